"""RACE fine-tuning and evaluation: launches albert_tf/drivers/run_race.py from a checkout
(`python run_race.py --help`); installed, the same driver is the `albert-run-race` command."""
from albert_tf.drivers.run_race import main, run  # noqa: F401  (main: for `import run_race` in scripts)

if __name__ == "__main__":
    run()
