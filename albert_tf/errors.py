"""The run-time error kind the drivers report as one line (see `albert_tf.cli`).

Bad input raises ValueError subclasses where it is found (ConfigError, CheckpointError,
GlueDataError, ...). A run that starts fine but cannot go on for a reason the user can
act on (a diverged loss) raises a `RunError`: it lives here, below every package, so
that the error path need not import the training loop to recognise it.
"""


class RunError(RuntimeError):
    """A run stopped for a reason the user can act on, not a bug."""
