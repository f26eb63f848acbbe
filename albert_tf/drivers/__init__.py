"""The command-line drivers: each maps its flags (the original's names and defaults) onto
calls into the package, and ends on a user error with one line (`albert_tf.cli`).

Installed as console scripts (`albert-run-classifier`, ...); from a checkout, the
top-level `run_classifier.py`, ... launch them. Nothing here is imported by the library.
"""
