"""GLUE fine-tuning, evaluation, prediction and export: launches albert_tf/drivers/run_classifier.py from a checkout
(`python run_classifier.py --help`); installed, the same driver is the `albert-run-classifier` command."""
from albert_tf.drivers.run_classifier import main, run  # noqa: F401  (main: for `import run_classifier` in scripts)

if __name__ == "__main__":
    run()
