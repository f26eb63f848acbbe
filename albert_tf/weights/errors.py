"""The error every checkpoint reader and writer raises for input the user can fix."""


class CheckpointError(ValueError):
    """A checkpoint that cannot be found, read or written, or does not fit the model."""
