"""Hub-style SavedModel export: launches albert_tf/drivers/export_model.py from a checkout
(`python export_model.py --help`); installed, the same driver is the `albert-export-model` command."""
from albert_tf.drivers.export_model import main, run  # noqa: F401  (main: for `import export_model` in scripts)

if __name__ == "__main__":
    run()
