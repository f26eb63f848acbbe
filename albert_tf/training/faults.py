"""Faults a training run reports as one line instead of a traceback: a full disk while
saving a checkpoint, and a lost worker of a multi-worker job."""
from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from typing import Callable, Iterator

import tensorflow as tf

from albert_tf.errors import RunError
from albert_tf.fileio import is_remote

# What a collective raises on the survivors when a peer dies (connection reset or refused,
# the coordination service's heartbeat timeout, or the collective being aborted).
LOST_PEER_ERRORS = (tf.errors.UnavailableError, tf.errors.CancelledError, tf.errors.AbortedError,
                    tf.errors.DeadlineExceededError, tf.errors.InternalError, tf.errors.UnknownError)
# Internal/Unknown errors count only when they speak of a peer (they are also what bugs raise).
_PEER_WORDS = re.compile(r"/task:\d|socket|connect|peer|collective|heartbeat", re.IGNORECASE)


class WorkerLostError(RunError):
    """Another worker of a multi-worker job stopped answering."""


class DiskFullError(RunError):
    """A file could not be written: the storage is out of room (no space, a quota, a file size limit)."""


# The storage is out of room: errno -> (what an OpError's text says, what our line says). A quota is the
# usual "disk full" on shared clusters; a file size limit is FAT32/exFAT's 4 GiB or `ulimit -f`.
_OUT_OF_ROOM = {errno.ENOSPC: ("No space left on device", "no space left on the device"),
                errno.EDQUOT: ("Disk quota exceeded", "disk quota exceeded"),
                errno.EFBIG: ("File too large", "file too large for the file system (or ulimit -f)")}


def disk_full_reason(err: BaseException) -> str | None:
    """Why the storage refused a write, on one line, when it is out of room; None for other errors."""
    if isinstance(err, OSError) and err.errno in _OUT_OF_ROOM:
        return _OUT_OF_ROOM[err.errno][1]
    if not isinstance(err, (tf.errors.OpError, OSError)):
        return None
    message = getattr(err, "message", None) or str(err)
    return next((reason for text, reason in _OUT_OF_ROOM.values() if text in message), None)


def is_disk_full(err: BaseException) -> bool:
    return disk_full_reason(err) is not None


@contextlib.contextmanager
def disk_full_as_one_line(what: str, kept: str = "what was written of it is removed; free space and rerun"
                          ) -> Iterator[None]:
    """A full disk (a quota, a file size limit) inside the block is one line: ``<reason> writing <what>; <kept>``.
    For TensorFlow's writers (SavedModel, SaveV2), whose error names a temporary file and an op
    (``{{function_node __wrapped__SaveV2...}} <dir>/.tmp-.../variables_temp/part-...tempstate...``); an OSError
    (this package's own writes, ``fileio.atomic_output``) names its final file already and passes as it is."""
    try:
        yield
    except tf.errors.OpError as e:
        reason = disk_full_reason(e)
        if reason is None:
            raise
        raise DiskFullError(f"{reason} writing {what}; {kept}") from None


def free_bytes(path: str) -> int | None:
    """Free space on the device holding ``path`` (None for remote storage)."""
    if is_remote(path):
        return None
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def disk_full_error(path: str, needed_bytes: int, previous: str | None,
                    reason: str = _OUT_OF_ROOM[errno.ENOSPC][1]) -> DiskFullError:
    kept = f"{previous} is intact and a rerun resumes from it" if previous else "no earlier checkpoint"
    if reason != _OUT_OF_ROOM[errno.ENOSPC][1]:  # a quota or a file size limit: the free space is beside the point
        return DiskFullError(f"{reason} writing checkpoint {path} of about {_mib(needed_bytes)}; {kept}")
    free = free_bytes(os.path.dirname(path) or ".")
    have = "" if free is None else f", {_mib(free)} free"
    return DiskFullError(f"{reason} writing checkpoint {path}: it needs about "
                         f"{_mib(needed_bytes)} free{have}; {kept}")


def size_of(*objects) -> int:
    """Bytes of the variables of ``objects`` (a model, an optimizer): about one checkpoint's size."""
    variables = {id(v): v for obj in objects for v in obj.variables}.values()
    return sum(v.shape.num_elements() * v.dtype.size for v in variables)


def _mib(count: int) -> str:
    return f"{count / 2**20:.1f} MiB"


def last_good_checkpoint(path: str | None, init_flag: str | None = None, learning_rate_flag: str | None = None
                         ) -> str:
    """How the NaN guard's line ends: the checkpoint a rerun resumes from, or what to do without one
    (``init_flag``: the flag the run's starting weights came from, as the user gave it; None: none given;
    ``learning_rate_flag``: the flag of the learning rate when a driver runs; None: no flags, the Python API)."""
    if path:
        return f"the last good one is {path}."
    check = f"check {init_flag} and the input data" if init_flag else "check the input data"
    return (f"there is no checkpoint yet, so a rerun starts again from step 0: lower "
            f"{learning_rate_flag or 'the learning rate'}, {check}.")


def resume_point(path: str | None) -> str:
    """Where a rerun after a stop resumes."""
    return f"a rerun resumes from {path}" if path else "no checkpoint was written yet"


# What tf.data's readers and parsers say about records they cannot read.
_DATA_WORDS = re.compile(r"corrupted record|truncated record|Is this even a TFRecord|serialized Example|"
                         r"Can't parse|Feature: |Key: ", re.IGNORECASE)


def is_data_error(err: BaseException) -> bool:
    """Whether an OpError from a training step comes from reading or parsing its records."""
    return isinstance(err, tf.errors.DataLossError) or bool(
        _DATA_WORDS.search(getattr(err, "message", None) or str(err)))


def is_framing_error(err: BaseException) -> bool:
    """Whether a read error is TensorFlow's for a TFRecord file cut short or with a CRC that does not match
    (bytes lost or changed: no setting of the run explains it)."""
    return isinstance(err, tf.errors.DataLossError) and bool(
        re.search(r"(corrupted|truncated) record at \d+", getattr(err, "message", None) or str(err)))


def op_error_reason(err: BaseException) -> str:
    """An OpError's own words on one line: without 'Graph execution error', the Python stack of the
    node and TensorFlow's node and op names."""
    message = getattr(err, "message", None) or str(err)
    lines = [line.strip() for line in message.splitlines()]
    kept = [line for line in lines if line and not line.startswith(("Graph execution error", "Detected at node",
                                                                     "File \"", "[[", "Error in user-defined",
                                                                     "<stack traces unavailable>"))]
    text = " ".join(kept) or message.strip().splitlines()[0]
    # An eager op's error ends "[Op:<type>] name: <node name>"; an input pipeline's starts "Error in
    # user-defined function passed to MapDataset:1 transformation with iterator: Iterator::Root::...: ":
    # TensorFlow's words, not the user's.
    text = re.sub(r"Error in user-defined function passed to \S+ transformation with iterator: \S+:\s*", "", text)
    # A remote call's error ends with gRPC's details ("Additional GRPC error information from remote target
    # /job:worker/... while calling ...: {grpc_status:14, grpc_message:...}"), which repeat the words before them.
    text = re.sub(r"(?<=\S)\s+Additional GRPC error information from remote target .*$", "", text, flags=re.DOTALL)
    return re.sub(r"\s*\[\[[^\]]*\]\]|\s*\[Op:[^\]]*\]( name:.*$)?|\{\{[^}]*\}\}", "", text).strip()


def is_lost_peer(err: BaseException) -> bool:
    if isinstance(err, (tf.errors.InternalError, tf.errors.UnknownError)):
        return bool(_PEER_WORDS.search(getattr(err, "message", None) or str(err)))
    return isinstance(err, LOST_PEER_ERRORS)


def lost_task(err: BaseException, own_index: int) -> str:
    """The task an error names, other than this one (``/job:worker/replica:0/task:1``), or 'another worker'."""
    message = getattr(err, "message", None) or str(err)
    for job, task in re.findall(r"/job:(\w+)/replica:\d+/task:(\d+)", message):
        if not (job in ("worker", "chief") and int(task) == own_index):
            return f"/job:{job}/task:{task}"
    return "another worker"


def worker_lost_error(err: BaseException, own_index: int, step: int, resume_from: str | None) -> WorkerLostError:
    where = resume_from or "step 0 (no checkpoint yet)"
    return WorkerLostError(
        f"lost {lost_task(err, own_index)} of the multi-worker job at step {step} "
        f"({type(err).__name__}); this worker stops. Rerun every worker with the same flags: they "
        f"resume from {where}")


@contextlib.contextmanager
def reporting_lost_workers(worker, step: Callable[[], int], resume_from: Callable[[], str | None]) -> Iterator[None]:
    """Turns a collective's failure on a surviving worker into ``WorkerLostError`` (one worker: unchanged)."""
    try:
        yield
    except LOST_PEER_ERRORS as e:
        if worker.num_workers <= 1 or not is_lost_peer(e):
            raise
        raise worker_lost_error(e, worker.worker_index, step(), resume_from()) from e
