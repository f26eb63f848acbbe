"""The one feature cache: TFRecords built once and reused while their inputs are unchanged.

``CachedSplit`` is the one type every task's cached split has (GLUE, RACE, SQuAD and
any new task): the record file, its schema and sizes (so datasets, padding rows and
parsing come from the schema, ``data.datasets``), the record count and the side file.

Used by every fine-tuning task: a record file plus a JSON side file written before the
records are renamed into place, both through a temporary name and a rename
(``albert_tf.fileio``), so a crash leaves the old cache or none, never a half one. Files at
a cache's paths that it did not write (no side file, or not its JSON) are refused, never
replaced. The side file holds the cache key, the settings it was made from (``settings``)
and what the builder reports (counts, statistics, per-feature metadata for post-processing;
no pickle). The key hashes the settings together with the record schema's name and version,
so a changed data file (callers put its ``file_sha256``), tokenizer, length or format
rebuilds. A local cache is locked (``<record file>.lock``) before it is looked at or written: two runs
sharing a cache path never mix their files, and none replaces records another run still reads. A multi-worker
job's chief alone builds and locks it; its other workers read what it tells them is there.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import functools
import hashlib
import json
import os
import time
from typing import Any, Callable, Mapping

from absl import logging

from albert_tf.data.records import RecordSchema
from albert_tf.fileio import (atomic_output, atomic_write_text, is_remote, make_folders, make_new_folders, read_text,
                              remove_empty_folders)
from albert_tf.errors import RunError
from albert_tf.run_lock import (JobMessages, RunLockedError, at_run_end, current_worker, file_lock_for_run,
                                   file_lock_path, job_messages, live_holder)

# build(write) writes serialized records through `write` and returns what to keep in the side file.
Builder = Callable[[Callable[[bytes], None]], Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class CachedSplit:
    """The cached records of one split: read them with ``data.datasets``."""

    record_file: str
    side_file: str
    schema: RecordSchema
    sizes: Mapping[str, int]  # the schema's sizes, e.g. {"max_seq_length": 128}
    side: Mapping[str, Any]  # key, settings, num_records and what the builder returned
    reused: bool = dataclasses.field(compare=False)  # how it was obtained, not what it is

    @property
    def num_records(self) -> int:
        return int(self.side["num_records"])

    def parse(self, serialized):
        """Serialized record(s) -> {feature: tensor} (int64 as int32)."""
        return self.schema.parse(serialized, **self.sizes)

    def padding(self) -> dict:
        """An all-zero record (``is_real_example`` 0): fills a last eval batch."""
        return self.schema.padding(**self.sizes)


def cache_key(schema: RecordSchema, settings: Mapping[str, Any]) -> str:
    """The hex key of records of ``schema`` made with ``settings`` (JSON values)."""
    keyed = {"schema": schema.name, "format_version": schema.version, **settings}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()


def _size(path: str) -> int:
    import tensorflow as tf

    return tf.io.gfile.stat(path).length if is_remote(path) else os.path.getsize(path)


class FeatureCacheError(ValueError):
    """A feature-file path holds something that is not this tool's cache: never overwritten."""


_WAIT_SECONDS = 5  # between looks at the lock of a keyed cache another run is building
_SIDE_FIELDS = {"key": str, "settings": dict, "num_records": int}


def _not_ours(record_file: str, side_file: str, what: str) -> FeatureCacheError:
    return FeatureCacheError(
        f"{what}: not a feature cache this tool wrote, so not overwriting {record_file} or {side_file}; "
        f"move it away (or delete it if it is an old cache) or name other files with the feature-file flags")


def _load_side_file(side_file: str, key: str, record_file: str) -> dict | None:
    """The side file if it describes these records; None when the cache is to be (re)built: there is
    none, it was made from other settings, or its record file is not the one written (truncated or
    replaced: rebuilt with a warning).  Files that are not a cache this tool wrote (a side file that
    is not its JSON, a record file without a side file, say the original's TFRecord and pickle at the
    same flags' paths) raise ``FeatureCacheError``: they are the user's, not ours to replace."""
    import tensorflow as tf

    try:
        text = read_text(side_file)
    except UnicodeDecodeError as e:  # a pickle, say
        raise _not_ours(record_file, side_file, f"{side_file} is not UTF-8 text ({e.reason})") from None
    if text is None:
        if tf.io.gfile.exists(record_file):
            raise _not_ours(record_file, side_file, f"{record_file} has no side file {side_file}")
        return None
    try:
        side = json.loads(text)
    except ValueError as e:  # not JSON
        raise _not_ours(record_file, side_file, f"{side_file} is not JSON ({e})") from None
    if not isinstance(side, dict) or any(not isinstance(side.get(k), t) for k, t in _SIDE_FIELDS.items()):
        raise _not_ours(record_file, side_file, f"{side_file} has no cache key, settings and record count")
    if side["key"] != key or not tf.io.gfile.exists(record_file):
        return None
    size, written = _size(record_file), side.get("record_bytes")
    if written is not None and size != written:
        logging.warning("Feature cache %s has %d bytes, %d were written (truncated or replaced): rebuilding it.",
                        record_file, size, written)
        return None
    return side


def check_distinct_caches(caches: Mapping[str, str], side_files: Mapping[str, str | None] | None = None) -> None:
    """Raises ``ValueError`` (one line) when two splits' feature files are one file: ``caches`` maps what
    names each (a flag, or its default) to its path, ``side_files`` to its side file (default
    ``<path>.json``). Each split would rebuild the file under the other (run_race trained on its dev
    records when --train_file named --eval_file's file)."""
    side_files = side_files or {}
    seen: dict[str, str] = {}
    for name, path in caches.items():
        side = side_files.get(name) or path + ".json"
        for what, file in ((name, path), (f"{name}'s side file", side)):
            key = file if is_remote(file) else os.path.realpath(file)
            if key in seen:
                raise ValueError(f"{seen[key]} and {what} are the same file ({file}): each split needs its own "
                                 f"feature file")
            seen[key] = what


def cached_records(record_file: str, schema: RecordSchema, settings: Mapping[str, Any], build: Builder,
                   side_file: str | None = None, sizes: Mapping[str, int] | None = None,
                   source: str | None = None, expected: Callable[[], int] | None = None,
                   keyed_name: bool = False) -> CachedSplit:
    """The records at ``record_file`` if its side file says they were made from ``settings``,
    else ``build`` them (atomically) and write the side file (with the count of records written);
    a build starts with a line naming ``source`` (what is converted: the data file), then a progress line
    every ``progress.PROGRESS_SECONDS`` (records written, of ``expected()`` when the caller can
    count them, records/s and the ETA): MNLI's or QQP's training file takes minutes.

    ``sizes`` are the schema's sizes (default: ``settings["max_seq_length"]`` when present).

    A local cache's lock (``<record_file>.lock``, ``run_lock.file_lock_for_run``) is held from before the first
    look until the run ends: another run at the same path, whatever its settings, stops with one line
    naming the cache and the holder (``RunLockedError``) rather than replace records this run still reads.
    ``keyed_name``: the file's name holds the cache key (GLUE's), so a run at that path has these settings
    and never writes other records there: the lock is held only while building, and a run finding another
    one building it waits, then reuses its records.

    In a multi-worker job only the chief looks, builds and locks; the other workers wait for its word, then read
    its records (or, on a filesystem of their own, make their own copy under their own lock)."""
    if sizes is None:
        sizes = {"max_seq_length": int(settings["max_seq_length"])} if "max_seq_length" in settings else {}
    side_file = side_file or record_file + ".json"
    key = cache_key(schema, settings)
    obtain = functools.partial(_in_its_folder, record_file, side_file, schema, settings, key, build, dict(sizes),
                               source, expected, keyed_name)
    # A multi-worker job's workers: each taking a lock of its own let them build the same file at once, and
    # another job's worker build its records over a cache a run held. Now the chief alone looks, builds and
    # locks (keeping other jobs out), and the other workers read what it says is there.
    # (A run without the job's messages is taken as alone: another worker then finds the chief's lock, one line.)
    (num_workers, worker_index), messages = current_worker(), job_messages()
    if num_workers > 1 and messages and worker_index == 0:
        return _telling_the_workers(messages, f"the feature cache {record_file}", obtain)
    if num_workers > 1 and messages and (side := _the_chiefs(messages, record_file, side_file, key)) is not None:
        return CachedSplit(record_file, side_file, schema, dict(sizes), side, reused=True)
    return obtain()  # alone, or another worker on a filesystem of its own: its own copy, under its own lock


_READY = "ready"  # what a multi-worker job's chief tells the others once its cache is there (else why not)


def _telling_the_workers(messages: JobMessages, about: str, obtain: Callable[[], CachedSplit]) -> CachedSplit:
    """The chief: ``obtain()``, then tells the other workers it is ready, or why not (its refusal's one line)."""
    try:
        cached = obtain()
    except Exception as e:
        messages.tell(about, " ".join(str(e).split()) or type(e).__name__)
        raise
    messages.tell(about, _READY)
    return cached


def _the_chiefs(messages: JobMessages, record_file: str, side_file: str, key: str) -> dict | None:
    """Another worker: the side file of the chief's cache once it says it is ready (raises what stopped it);
    None when this worker sees other files at the path (its filesystem is not the chief's: another machine)."""
    word = messages.chiefs_word(f"the feature cache {record_file}")
    if word != _READY:
        raise RunError(f"the multi-worker job's chief stopped: {word}")
    return _load_side_file(side_file, key, record_file)


def _in_its_folder(record_file: str, side_file: str, schema: RecordSchema, settings: Mapping[str, Any], key: str,
                   build: Builder, sizes: dict, source: str | None, expected: Callable[[], int] | None,
                   keyed_name: bool) -> CachedSplit:
    """The cache's folder made, then ``_lookup_or_build``."""
    folder = os.path.dirname(record_file if is_remote(record_file) else os.path.abspath(record_file))
    if is_remote(folder):
        created = []
        make_folders(folder)
    else:
        created = make_new_folders(folder)  # none left when it fails partway
    # Folders made here for the cache are removed again if still empty once its lock is released (at the run's
    # end, or below): a refused or failed run leaves nothing behind.  Registered before the lock, so run after.
    if created:
        at_run_end(lambda: remove_empty_folders(created))
    try:
        return _lookup_or_build(record_file, side_file, schema, settings, key, build, sizes, source, expected,
                                keyed_name)
    finally:
        remove_empty_folders(created)


def _lookup_or_build(record_file: str, side_file: str, schema: RecordSchema, settings: Mapping[str, Any], key: str,
                     build: Builder, sizes: dict, source: str | None, expected: Callable[[], int] | None,
                     keyed_name: bool) -> CachedSplit:
    """``cached_records`` once its folder exists: under the cache's lock, its records or a new build."""
    with contextlib.ExitStack() as lock:
        # The cache's lock before its first write and before trusting what is there: another run building
        # this path could otherwise pair its side file with our records, or replace records we still read.
        try:  # local caches, as create_pretraining_data's outputs: gs:// has no atomic create to lock with
            if not is_remote(record_file):
                _take_lock(lock, record_file, keyed_name)
        except OSError as e:  # a folder this user may not write: a finished cache there is still read
            if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS) or (
                    side := _load_side_file(side_file, key, record_file)) is None:
                raise
            logging.warning("Cannot lock the feature cache %s (%s): reusing it unlocked.", record_file, e.strerror)
            return CachedSplit(record_file, side_file, schema, sizes, side, reused=True)
        side = _load_side_file(side_file, key, record_file)
        if side is not None:
            return CachedSplit(record_file, side_file, schema, sizes, side, reused=True)
        return _build(record_file, side_file, schema, settings, key, build, sizes, source, expected)


def _take_lock(stack: contextlib.ExitStack, record_file: str, keyed_name: bool) -> None:
    """Enters the cache's lock into ``stack``; for a keyed name, waits while another live run holds it."""
    waiting = False
    while True:
        try:
            stack.enter_context(file_lock_for_run(record_file, f"the feature cache {record_file}",
                                                  until_run_ends=not keyed_name))
            return
        except RunLockedError as e:
            if not keyed_name or not live_holder(file_lock_path(record_file)):  # not a build to wait for
                raise
            if not waiting:
                logging.warning("Waiting for the run building these features (they will be reused): %s", e)
                waiting = True
            time.sleep(_WAIT_SECONDS)


def _build(record_file: str, side_file: str, schema: RecordSchema, settings: Mapping[str, Any], key: str,
           build: Builder, sizes: dict, source: str | None, expected: Callable[[], int] | None) -> CachedSplit:
    """Builds the records and their side file (under the cache's lock)."""
    import tensorflow as tf

    from albert_tf.progress import Progress

    logging.info("Converting %s to features: %s", source or "the examples", record_file)
    count = 0
    progress = Progress(f"Converting {source or 'the examples'}", expected() if expected else None, unit="record")
    with atomic_output(record_file) as tmp:
        try:
            with tf.io.TFRecordWriter(tmp) as writer:
                def write(record: bytes) -> None:
                    nonlocal count
                    writer.write(record)
                    count += 1
                    progress.add(1, 1)

                info = dict(build(write))
        except tf.errors.OpError as e:  # a full disk: TensorFlow's writer named the temporary, which is removed
            raise type(e)(e.node_def, e.op, e.message.replace(tmp, record_file)) from None
        side = {"key": key, "settings": dict(settings), "num_records": count, "record_bytes": _size(tmp), **info}
        # The side file first, the records' rename last: a kill in between leaves our side file beside
        # an old or no record file (rebuilt next time), never records without a side file.
        atomic_write_text(side_file, json.dumps(side, separators=(",", ":")))
    return CachedSplit(record_file, side_file, schema, sizes, side, reused=False)
