"""One writer per ``--output_dir``: a training run holds a lock file there while it trains.

The file (``run.lock``, taken by a job's chief whatever the job's size, and
``run.lock-worker-<i>`` by the other workers of a multi-worker job, so that the workers of one job do
not exclude each other but jobs of any sizes do) holds the holder's host, pid,
process start time and start date.  A second run into the folder stops with one line
naming the holder.  A lock whose holder is provably gone (same host, and no process with
that pid and start time) is taken over with a warning; any other lock only with
``--take_over_run_lock`` (for a holder on another host that is known to be dead).

Local folders are locked with an exclusive create (atomic).  Taking over a dead holder's lock
is serialized by a second exclusive create, of ``<lock>.takeover``: only its creator removes
the lock, after checking that it still holds the dead holder's record, and creates its own; a
run that loses that race looks again and finds the winner's live lock.  Remote folders
(``gs://``) have no atomic create through ``tf.io.gfile``: both files are written after checking
that there is none, which narrows but cannot close the window of two runs starting (or taking
over) at the same instant.

``RunLock`` also holds single files: create_pretraining_data takes ``<output>.lock`` for each
output it writes (``pretraining_data.outputs``), and a fine-tuning run ``<record file>.lock`` for each
feature cache it builds or reads (``file_lock_for_run``): a cache's path is the user's choice, often
outside ``--output_dir`` and shared by several runs.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import socket
import time
from typing import Callable, Iterator, NamedTuple

from absl import logging

from albert_tf.errors import RunError
from albert_tf.fileio import (absolute, atomic_write_text, is_remote, make_folders, make_new_folders, read_text,
                              remove_empty_folders, remove_file)
from albert_tf.processes import process_alive, process_start_ticks

LOCK_FILENAME = "run.lock"
LOCK_SUFFIX = ".lock"  # <file>.lock: a single file's lock (file_lock_for_run)
TAKEOVER_SUFFIX = ".takeover"  # <lock>.takeover: held while one run replaces a dead holder's lock
_LOOKS, _PAUSE_SECONDS = 25, 0.2  # how long a run waits for another one's takeover to finish


class RunLockedError(RunError):
    """Another run holds ``--output_dir``."""


def lock_path(output_dir: str, num_workers: int = 1, worker_index: int = 0) -> str:
    """``run.lock`` for a job's chief (worker 0) whatever the job's size, so that jobs of any sizes
    exclude each other; ``run.lock-worker-<i>`` for its other workers."""
    name = LOCK_FILENAME if num_workers <= 1 or worker_index == 0 else f"{LOCK_FILENAME}-worker-{worker_index}"
    return os.path.join(output_dir, name)


class RunLock:
    """``acquire()`` / ``release()`` of one lock file; ``take_over``: break any existing lock."""

    def __init__(self, path: str, take_over: bool = False, what: str = "--output_dir",
                 take_over_hint: str = "rerun with --take_over_run_lock"):
        self.path = path
        self.take_over = take_over
        self.what, self.take_over_hint = what, take_over_hint  # the refusal's words: what is locked, the way out
        self.held = False
        pid = os.getpid()
        self.record = {"host": socket.gethostname(), "pid": pid, "start_ticks": process_start_ticks(pid),
                       "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}

    def _create(self, path: str | None = None) -> bool:
        """Writes our record to the lock file (or ``path``) unless it exists; whether it did."""
        path = path or self.path
        text = json.dumps(self.record) + "\n"
        if is_remote(path):
            if read_text(path) is not None:
                return False
            atomic_write_text(path, text)
            return True
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)  # the umask's mode
        except FileExistsError:
            return False
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text)
        except OSError as e:
            os.remove(path)  # a full disk: no empty lock that would refuse the next run
            raise OSError(e.errno, f"{e.strerror} (taking the run lock)", path) from e
        return True

    def _holder(self) -> dict | None:
        return _parse(read_text(self.path))

    def acquire(self) -> None:
        for _ in range(_LOOKS):  # a lock removed or being taken over between our looks: look again
            if self._create():
                self.held = True
                return
            text = read_text(self.path)
            if text is None:
                continue
            warning = self._may_take(_parse(text))  # or the refusal
            if self._replace(text):
                logging.warning("%s", warning)
                self.held = True
                return
            time.sleep(_PAUSE_SECONDS)
        raise RunLockedError(f"could not take the run lock {self.path}: another run keeps taking it over (if no "
                             f"run is starting, delete {self.path}{TAKEOVER_SUFFIX})")

    def _may_take(self, holder: dict) -> str:
        """The warning to log when taking over the lock ``holder`` wrote; raises the refusal if we may not."""
        described = describe(holder)
        same_host = holder.get("host") == self.record["host"]
        if same_host and holder.get("pid") == self.record["pid"]:
            return f"{self.path} was left by this process; taking it."
        if self.take_over:
            return f"Taking over the run lock {self.path} held by {described} (--take_over_run_lock)."
        if gone_from_this_host(holder, self.record["host"]):
            return f"Taking over the run lock {self.path}: its holder ({described}) is no longer running."
        if not holder:
            raise RunLockedError(f"{self.path} exists but names no holder: if no run is using this "
                                 f"{self.what}, delete it or {self.take_over_hint}")
        raise RunLockedError(
            f"{self.what} is in use by another run ({described}; lock {self.path}); wait for it to "
            f"end, or if it is dead on another host, {self.take_over_hint}")

    def _replace(self, judged: str) -> bool:
        """Replaces the lock file by ours if it still holds ``judged`` (the text we judged): under the
        takeover file, so that of two runs that judged the same dead holder only one removes it (never
        the other's fresh lock).  False: another run is taking it over, or it changed; look again."""
        guard = self.path + TAKEOVER_SUFFIX
        if not self._create(guard):
            return False
        try:
            if read_text(self.path) != judged:
                return False
            remove_file(self.path)
            return self._create()
        finally:
            remove_file(guard)

    def release(self) -> None:
        if self.held:
            self.held = False
            holder = self._holder()
            if holder and holder.get("pid") == self.record["pid"] and holder.get("host") == self.record["host"]:
                remove_file(self.path)

    def __enter__(self) -> "RunLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _parse(text: str | None) -> dict | None:
    """The holder a lock file's text names: None without a file, {} for no readable holder."""
    if text is None:
        return None
    try:
        holder = json.loads(text)
        return holder if isinstance(holder, dict) else {}
    except ValueError:
        return {}  # half-written by a process killed while creating it


def describe(holder: dict) -> str:
    return (f"host {holder.get('host', '?')}, pid {holder.get('pid', '?')}, "
            f"started {holder.get('started', '?')}")


# Lock files this process holds: a driver takes the lock before its first write and the Trainer
# inside it finds it already held (the outermost block owns it).
_held: set[str] = set()


class JobMessages(NamedTuple):
    """How a multi-worker job's chief tells its other workers something, and how they wait for its word: the
    training code's calls of the job's coordination service (``training.distribution.JOB_MESSAGES``), handed to
    the run's ``output_dir_lock`` by the code that has them, so that lower floors (the feature caches) use them
    without importing the training code."""
    tell: Callable[[str, str], None]  # the chief: (key, value); a key told before keeps its first value
    chiefs_word: Callable[[str], str]  # another worker: the chief's value for a key, waiting for it


# The outermost output_dir_lock block of this process (the run): its ExitStack releases the file locks the
# run took (file_lock_for_run) when the run ends; the job's worker count, this worker's index, its messages.
_runs: list[tuple[contextlib.ExitStack, int, int, JobMessages | None]] = []


@contextlib.contextmanager
def output_dir_lock(output_dir: str, num_workers: int = 1, worker_index: int = 0,
                    take_over: bool = False, messages: JobMessages | None = None) -> Iterator[str]:
    """Holds ``output_dir``'s run lock (creating the folder) for the block; nested blocks of this process
    share it. A folder this run (in a multi-worker job: this job) created that is still empty at the end is
    removed again (a refused or failed run leaves nothing behind): by the job's last worker to release its lock
    (``_made_by_this_job``). Yields the lock file's path. ``messages``: a multi-worker job's (``job_messages``),
    for what its workers share (whether the job made ``output_dir``, its feature caches)."""
    output_dir = absolute(output_dir)  # one key for one folder, however it was named
    path = lock_path(output_dir, num_workers, worker_index)
    if path in _held:
        yield path
        return
    created = _made_by_this_job(output_dir, num_workers, worker_index, messages)
    try:
        with RunLock(path, take_over=take_over), contextlib.ExitStack() as run_files:
            _held.add(path)
            _runs.append((run_files, num_workers, worker_index, messages))
            try:
                yield path
            finally:
                _runs.pop()  # then run_files releases the file locks the run took
                _held.discard(path)
    finally:
        if not is_remote(output_dir):  # not when not empty (another worker's lock, the run's files) or gone
            remove_empty_folders(created)


def _made_by_this_job(output_dir: str, num_workers: int, worker_index: int,
                      messages: JobMessages | None) -> list[str]:
    """Makes ``output_dir`` if missing; the folders this job made, innermost first (then removed again if empty
    at the end): ``output_dir`` and the parents it made for it (a refused ``runs/new/MRPC`` left ``runs/new``).

    The rule for a multi-worker job: the last worker to release its lock removes the folder if the job made it
    and it is empty (each worker's lock file keeps it from being empty until then). So every worker must know
    whether the job made it, not only whether it did: the chief looks and makes it, and tells the other workers,
    which make theirs only after its word (on a filesystem of their own, they also count their own making).
    Without the job's ``messages`` each worker counts only its own making (an empty folder may stay). The chief's
    word names the folders it made, ``output_dir`` and its parents (a refused job whose chief ended first left
    ``runs/new`` when only ``output_dir`` was told)."""
    if num_workers <= 1 or messages is None:
        return _make(output_dir)
    global _words_on_output_dir
    # The key names no path: each worker may name the shared folder its own way (its own mount point), and a
    # worker waiting for a key its chief never tells would hang the job. The count: the workers run the same.
    _words_on_output_dir += 1
    about = f"whether the job made --output_dir (multi-worker run {_words_on_output_dir} of this process)"
    if worker_index == 0:
        made = _make(output_dir)
        # The names of the folders made (output_dir's and its new parents'), not paths: see the key.
        messages.tell(about, _MADE + json.dumps([os.path.basename(folder) for folder in made]) if made else _FOUND)
        return made
    try:
        word = messages.chiefs_word(about)
    except RunError:  # the chief stopped before its lock (WorkerLostError): this worker's run ends on its own
        word = _FOUND
    return _make(output_dir) or _folders_named(output_dir, json.loads(word[len(_MADE):]) if word.startswith(_MADE)
                                                else [])


def _folders_named(output_dir: str, names: list[str]) -> list[str]:
    """``output_dir`` and its parents, innermost first, as long as their names are ``names`` (those of the folders
    the chief made): the same folders where this worker names the shared folder the chief's way, and no folder
    above where it is mounted elsewhere (another name: the walk stops)."""
    folders = []
    for name in names:
        if os.path.basename(output_dir) != name:
            break
        folders.append(output_dir)
        output_dir = os.path.dirname(output_dir)
    return folders


def _make(output_dir: str) -> list[str]:
    """Makes ``output_dir``; the folders made, innermost first: it and the parents it needed ([] or [output_dir]
    when remote). A failure partway (a name too long) removes those it made before it is raised."""
    import tensorflow as tf

    if not is_remote(output_dir):
        return make_new_folders(output_dir)
    made = [] if tf.io.gfile.exists(output_dir) else [output_dir]
    make_folders(output_dir)
    return made


_MADE, _FOUND = "made ", "found"  # the chief's word on --output_dir to the other workers of a multi-worker job
# (after _MADE, the JSON list of the names of the folders it made, innermost first)
_words_on_output_dir = 0  # the multi-worker runs (outermost output_dir_lock blocks) of this process


def at_run_end(callback: Callable[[], None]) -> bool:
    """Calls ``callback`` when this process's run (its outermost ``output_dir_lock`` block) ends, after the file
    locks taken later in the run are released; False outside a run (nothing registered)."""
    if not _runs:
        return False
    _runs[0][0].callback(callback)
    return True


def current_worker() -> tuple[int, int]:
    """(the job's worker count, this worker's index) of this process's run; (1, 0) outside a run."""
    return _runs[0][1:3] if _runs else (1, 0)


def job_messages() -> JobMessages | None:
    """The ``JobMessages`` this process's run was given; None outside a run or without them."""
    return _runs[0][3] if _runs else None


def file_lock_path(path: str) -> str:
    """``<path>.lock``, whichever worker takes it: a multi-worker job's chief takes its caches' locks and tells
    the other workers (``feature_cache``), which take one only for a copy on their own filesystem."""
    return path + LOCK_SUFFIX


def gone_from_this_host(holder: dict, host: str) -> bool:
    """Whether ``holder`` is a process of ``host`` (this one) that is no longer running: checked by its pid and
    start time, so a reused pid does not count.  Another host's holder is never judged gone."""
    return (holder.get("host") == host and isinstance(holder.get("pid"), int)
            and not process_alive(holder["pid"], holder.get("start_ticks")))


def live_holder(lock_file: str) -> bool:
    """Whether ``lock_file`` names a holder that may be running (another host's, or a live process here)."""
    holder = _parse(read_text(lock_file))
    return bool(holder) and isinstance(holder.get("pid"), int) and not gone_from_this_host(holder, socket.gethostname())


@contextlib.contextmanager
def file_lock_for_run(path: str, what: str, until_run_ends: bool = True) -> Iterator[None]:
    """Holds ``<path>.lock`` for the block and, inside a run (an ``output_dir_lock`` block) with
    ``until_run_ends``, until the run ends: a feature cache is read long after it was built (each epoch,
    prediction after training), so no other run may replace it meanwhile.  Another run's live lock raises
    ``RunLockedError`` naming ``what`` and the holder; this process's own is shared."""
    lock_file = file_lock_path(path)
    if lock_file in _held:
        yield
        return
    lock = RunLock(lock_file, what=what, take_over_hint=f"delete {lock_file}")
    lock.acquire()
    _held.add(lock_file)

    def release() -> None:
        _held.discard(lock_file)
        lock.release()

    if _runs and until_run_ends:
        _runs[0][0].callback(release)
        yield
        return
    try:
        yield
    finally:
        release()
