"""SQuAD 1.1 / 2.0 fine-tuning and prediction: launches albert_tf/drivers/run_squad.py from a checkout
(`python run_squad.py --help`); installed, the same driver is the `albert-run-squad` command."""
from albert_tf.drivers.run_squad import main, run  # noqa: F401  (main: for `import run_squad` in scripts)

if __name__ == "__main__":
    run()
