"""Pretraining data creation: launches albert_tf/drivers/create_pretraining_data.py from a checkout
(`python create_pretraining_data.py --help`); installed, the same driver is the
`albert-create-pretraining-data` command."""
from albert_tf.cli import describe_driver
from albert_tf.drivers import create_pretraining_data as driver
from albert_tf.drivers.create_pretraining_data import main, run  # noqa: F401  (main: for scripts that import it)

if __name__ == "__main__":
    describe_driver(driver)
    run()
