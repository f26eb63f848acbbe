"""The one feature cache: TFRecords built once and reused while their inputs are unchanged.

Used by GLUE, SQuAD (and any task driver): a record file plus a JSON side file
written last, both through a temporary name and a rename (``albert_tf.fileio``), so a
crash leaves the old cache or none, never a half one. The side file holds the cache
key, the settings it was made from (``settings``) and what the builder reports
(counts, statistics, per-feature metadata for post-processing; no pickle). The key
hashes the settings together with the record schema's name and version, so a changed
data file (callers put its ``file_sha256``), tokenizer, length or format rebuilds.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Callable, Mapping

from absl import logging

from albert_tf.data.records import RecordSchema
from albert_tf.fileio import atomic_output, atomic_write_text

# build(write) writes serialized records through `write` and returns what to keep in the side file.
Builder = Callable[[Callable[[bytes], None]], Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class CachedRecords:
    record_file: str
    side_file: str
    side: dict[str, Any]  # key, settings, and what the builder returned
    reused: bool


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_key(schema: RecordSchema, settings: Mapping[str, Any]) -> str:
    """The hex key of records of ``schema`` made with ``settings`` (JSON values)."""
    keyed = {"schema": schema.name, "format_version": schema.version, **settings}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()


def _load_side_file(side_file: str, key: str, record_file: str) -> dict | None:
    """The side file if it describes these records; a damaged cache (unreadable side file, record
    file of another size than the one written) is rebuilt with a warning, never read as truth."""
    try:
        with open(side_file, encoding="utf-8") as f:
            side = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        logging.warning("Feature cache %s is damaged (%s): rebuilding %s.", side_file, e, record_file)
        return None
    if not isinstance(side, dict):
        logging.warning("Feature cache %s is damaged (not a JSON object): rebuilding %s.", side_file, record_file)
        return None
    if side.get("key") != key:
        return None
    size, written = os.path.getsize(record_file), side.get("record_bytes")
    if written is not None and size != written:
        logging.warning("Feature cache %s has %d bytes, %d were written (truncated or replaced): rebuilding it.",
                        record_file, size, written)
        return None
    return side


def cached_records(record_file: str, schema: RecordSchema, settings: Mapping[str, Any], build: Builder,
                   side_file: str | None = None) -> CachedRecords:
    """The records at ``record_file`` if its side file says they were made from ``settings``,
    else ``build`` them (atomically) and write the side file."""
    import tensorflow as tf

    side_file = side_file or record_file + ".json"
    key = cache_key(schema, settings)
    side = _load_side_file(side_file, key, record_file) if os.path.isfile(record_file) else None
    if side is not None:
        return CachedRecords(record_file, side_file, side, reused=True)
    with atomic_output(record_file) as tmp, tf.io.TFRecordWriter(tmp) as writer:
        info = dict(build(writer.write))
    side = {"key": key, "settings": dict(settings), "record_bytes": os.path.getsize(record_file), **info}
    atomic_write_text(side_file, json.dumps(side, separators=(",", ":")))
    return CachedRecords(record_file, side_file, side, reused=False)
