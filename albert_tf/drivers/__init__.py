"""The command-line drivers: each maps its flags (the original's names and defaults) onto
calls into the package, and ends on a user error with one line (`albert_tf.cli`).

Installed as console scripts (`albert-run-classifier`, ...); from a checkout, the
top-level `run_classifier.py`, ... launch them. Nothing here is imported by the library.

Every way of starting a driver (a launcher, a console script, ``python -m``) imports this
package before the driver module imports TensorFlow, so this is where the drivers start
quietly (`albert_tf.startup`: ``--verbosity=1`` or ``ALBERT_TF_VERBOSE=1`` shows
TensorFlow's start-up lines).
"""
from albert_tf.startup import quiet_startup

quiet_startup()
