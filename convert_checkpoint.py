"""Checkpoint conversion (Google TF1, albert_tf, Hugging Face): launches albert_tf/drivers/convert_checkpoint.py from a checkout
(`python convert_checkpoint.py --help`); installed, the same driver is the `albert-convert-checkpoint` command."""
from albert_tf.drivers.convert_checkpoint import main, run  # noqa: F401  (main: for `import convert_checkpoint` in scripts)

if __name__ == "__main__":
    run()
