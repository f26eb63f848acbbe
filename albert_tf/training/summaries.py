"""TensorBoard scalars and the console's durations, for the training loop and evaluation."""
from __future__ import annotations

import contextlib
import os
import re
from typing import Callable, Iterator

import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from albert_tf.errors import RunError
from albert_tf.fileio import make_folders
from albert_tf.training import faults

# TensorBoard's scalar plugin marker: lets us write scalars without the tensorboard package.
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"))


def write_scalar_summary(name: str, value: float) -> None:
    """``tf.summary.scalar`` without needing TensorBoard installed (same event format)."""
    tf.summary.write(name, tf.constant(value, tf.float32), metadata=_SCALAR_METADATA)


def write_scalars(directory: str, step: int, values: dict[str, float]) -> None:
    """One event file entry per value at ``step`` in ``directory`` (e.g. ``<output_dir>/eval``). Written by
    an evaluation before it is recorded: when this fails, a rerun evaluates the checkpoint again."""
    with reporting_event_errors(directory, lambda: "a rerun evaluates this checkpoint again"):
        make_folders(directory)  # with the umask's mode (the writer would make it 0755)
        writer = tf.summary.create_file_writer(directory)
        with writer.as_default(step=int(step)):
            for name, value in values.items():
                write_scalar_summary(name, float(value))
        writer.flush()


class LazySummaryWriter:
    """Creates the event file at the first summary, so that a run failing on its first
    batch (bad data) leaves no file behind.  ``directory=None`` writes nothing. ``resume_from()``: the
    checkpoint a rerun resumes from, for the line a failed write of the events ends with."""

    def __init__(self, directory: str | None, resume_from: Callable[[], str | None] = lambda: None):
        self._directory = directory
        self._writer = None
        self._then = lambda: faults.resume_point(resume_from())

    @contextlib.contextmanager
    def as_default(self, step: int) -> Iterator[None]:
        with reporting_event_errors(self._directory, self._then):
            if self._writer is None:
                self._writer = (tf.summary.create_file_writer(self._directory) if self._directory
                                else tf.summary.create_noop_writer())
            with self._writer.as_default(step=step):
                yield

    def flush(self) -> None:
        if self._writer is not None:
            with reporting_event_errors(self._directory, self._then):
                self._writer.flush()


@contextlib.contextmanager
def reporting_event_errors(directory: str | None, then: Callable[[], str]) -> Iterator[None]:
    """TensorFlow's failure to write an event file (a full disk, a forbidden folder: several lines of its
    internals) as one line naming the file, why, and ``then()`` (what a rerun does). An event file this
    writer created and could not write a byte to is removed."""
    try:
        yield
    except tf.errors.OpError as e:
        path = _event_file(e) or directory
        if path and path != directory and os.path.isfile(path) and os.path.getsize(path) == 0:
            os.remove(path)  # named in the error: this writer's own, and empty
        raise RunError(f"cannot write the TensorBoard events {path}: {_reason(e)}; {then()}") from e
    except OSError as e:  # making its folder: a file in the way, no permission, a full disk
        reason = faults.disk_full_reason(e) or e.strerror or str(e)
        raise RunError(f"cannot write the TensorBoard events {directory}: {reason}; {then()}") from e


def _event_file(err: tf.errors.OpError) -> str | None:
    """The event file a writer's error names (its first line: ``<file>; <reason>``), if any."""
    lines = (err.message or "").splitlines()
    first = re.sub(r"\{\{[^}]*\}\}", "", lines[0] if lines else "").strip()
    path = first.rpartition("; ")[0]
    return path if "events.out.tfevents." in os.path.basename(path) else None


def _reason(err: tf.errors.OpError) -> str:
    reason = faults.disk_full_reason(err)
    if reason is None and isinstance(err, tf.errors.PermissionDeniedError):
        reason = "permission denied"
    if reason is None:
        reason = faults.op_error_reason(err)
    return reason


