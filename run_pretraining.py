"""ALBERT pretraining (masked LM + sentence order): launches albert_tf/drivers/run_pretraining.py from a checkout
(`python run_pretraining.py --help`); installed, the same driver is the `albert-run-pretraining` command."""
from albert_tf.drivers.run_pretraining import main, run  # noqa: F401  (main: for `import run_pretraining` in scripts)

if __name__ == "__main__":
    run()
