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

from albert_tf.data.records import RecordSchema
from albert_tf.fileio import atomic_output, atomic_write_text, read_text

# build(write) writes serialized records through `write` and returns what to keep in the side file.
Builder = Callable[[Callable[[bytes], None]], Mapping[str, Any]]


@dataclasses.dataclass(frozen=True)
class CachedRecords:
    record_file: str
    side_file: str
    side: dict[str, Any]  # key, settings, and what the builder returned
    reused: bool


def file_sha256(path: str | os.PathLike) -> str:
    import tensorflow as tf

    digest = hashlib.sha256()
    with tf.io.gfile.GFile(os.fspath(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_key(schema: RecordSchema, settings: Mapping[str, Any]) -> str:
    """The hex key of records of ``schema`` made with ``settings`` (JSON values)."""
    keyed = {"schema": schema.name, "format_version": schema.version, **settings}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()


def _load_side_file(side_file: str, key: str) -> dict | None:
    try:
        side = json.loads(read_text(side_file) or "null")
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return side if isinstance(side, dict) and side.get("key") == key else None


def cached_records(record_file: str, schema: RecordSchema, settings: Mapping[str, Any], build: Builder,
                   side_file: str | None = None) -> CachedRecords:
    """The records at ``record_file`` if its side file says they were made from ``settings``,
    else ``build`` them (atomically) and write the side file."""
    import tensorflow as tf

    side_file = side_file or record_file + ".json"
    key = cache_key(schema, settings)
    side = _load_side_file(side_file, key) if tf.io.gfile.exists(record_file) else None
    if side is not None:
        return CachedRecords(record_file, side_file, side, reused=True)
    with atomic_output(record_file) as tmp, tf.io.TFRecordWriter(tmp) as writer:
        info = dict(build(writer.write))
    side = {"key": key, "settings": dict(settings), **info}
    atomic_write_text(side_file, json.dumps(side, separators=(",", ":")))
    return CachedRecords(record_file, side_file, side, reused=False)
