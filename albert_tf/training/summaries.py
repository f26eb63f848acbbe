"""TensorBoard scalars and the console's durations, for the training loop and evaluation."""
from __future__ import annotations

import math

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

# TensorBoard's scalar plugin marker: lets us write scalars without the tensorboard package.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


def write_scalar_summary(name: str, value: float) -> None:
    """``tf.summary.scalar`` without needing TensorBoard installed (same event format)."""
    tf.summary.write(name, tf.constant(value, tf.float32), metadata=_SCALAR_METADATA)


def write_scalars(directory: str, step: int, values: dict[str, float]) -> None:
    """One event file entry per value at ``step`` in ``directory`` (e.g. ``<output_dir>/eval``)."""
    writer = tf.summary.create_file_writer(directory)
    with writer.as_default(step=int(step)):
        for name, value in values.items():
            write_scalar_summary(name, float(value))
    writer.flush()


class LazySummaryWriter:
    """Creates the event file at the first summary, so that a run failing on its first
    batch (bad data) leaves no file behind.  ``directory=None`` writes nothing."""

    def __init__(self, directory: str | None):
        self._directory = directory
        self._writer = None

    def as_default(self, step: int):
        if self._writer is None:
            self._writer = (tf.summary.create_file_writer(self._directory) if self._directory
                            else tf.summary.create_noop_writer())
        return self._writer.as_default(step=step)

    def flush(self) -> None:
        if self._writer is not None:
            self._writer.flush()


def format_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"
