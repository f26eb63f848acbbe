"""Files of the Beam pipeline, through Beam's FileSystems (local paths, gs://, s3://, hdfs://): the
inputs cut into byte ranges that workers read independently, temporary pieces, their concatenation
into the outputs, and local copies of the tokenizer files for each worker.

A range owns the lines that start in it (it counts them, and reports a line that is not UTF-8) and the
documents whose first line starts in it, which it reads to their end even past the range. Whether the
first line in a range continues a document is decided by the line before it (invalid lines, which the
local tool skips without ending a document, are looked through). So every document is read by exactly
one range, whatever the range size, and ranges read in parallel give the local tool's documents.
"""
from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from typing import BinaryIO, Sequence

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems

from albert_tf.pretraining_data.config import PretrainingDataError, resolve_input_files
from albert_tf.pretraining_data.reading import ReadCounters, invalid_line_error, line_text

RAW = CompressionTypes.UNCOMPRESSED  # never guess a codec from the file name: the local tool reads bytes
_CHUNK = 1 << 16


def is_remote(path: str) -> bool:
    return "://" in path


def resolve_inputs(input_file: str, outputs: Sequence[str] = ()) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The input files of --input_file and their sizes; local paths exactly as the local tool resolves
    them (``outputs``: what a glob must not match), remote patterns through FileSystems.match (the same
    errors)."""
    patterns = [p.strip() for p in (input_file or "").split(",") if p.strip()]
    if not any(is_remote(p) for p in patterns):
        files = resolve_input_files(input_file, outputs)
        return files, tuple(os.path.getsize(f) for f in files)
    files, sizes = [], []
    for pattern in patterns:
        found = sorted((m.path, m.size_in_bytes) for result in FileSystems.match([pattern])
                       for m in result.metadata_list)
        if not found:
            raise PretrainingDataError(f"--input_file: no input file found at {pattern!r}")
        for path, size in found:
            if size == 0:
                raise PretrainingDataError(f"--input_file: {path} is empty (expected one sentence per line)")
            files.append(path)
            sizes.append(size)
    return tuple(files), tuple(sizes)


@dataclass(frozen=True)
class InputRange:
    index: tuple[int, int]  # (file, range in the file): corpus order; documents are numbered range by range
    path: str
    start: int
    end: int


def file_ranges(file_index: int, path: str, size: int, range_bytes: int) -> list[InputRange]:
    """The ranges of one input file (made on the workers: the job graph lists only the files)."""
    return [InputRange((file_index, k), path, start, min(size, start + range_bytes))
            for k, start in enumerate(range(0, size, range_bytes))]


def input_ranges(files: Sequence[str], sizes: Sequence[int], range_bytes: int) -> list[InputRange]:
    return [r for i, (path, size) in enumerate(zip(files, sizes)) for r in file_ranges(i, path, size, range_bytes)]


def _open(path: str) -> BinaryIO:
    return FileSystems.open(path, compression_type=RAW)


def _previous_line_start(f: BinaryIO, end: int) -> int:
    """Start of the line that ends (with its newline) at byte `end` - 1."""
    pos = end - 1  # the newline itself
    while pos > 0:
        start = max(0, pos - _CHUNK)
        f.seek(start)
        chunk = f.read(pos - start)
        newline = chunk.rfind(b"\n")
        if newline >= 0:
            return start + newline + 1
        pos = start
    return 0


def _continues_document(f: BinaryIO, line_start: int) -> bool:
    """Whether the line starting at `line_start` continues a document begun on an earlier line."""
    pos = line_start
    while pos > 0:
        start = _previous_line_start(f, pos)
        f.seek(start)
        raw = f.read(pos - start)
        pos = start
        try:
            return bool(line_text(raw, start == 0).strip())
        except UnicodeDecodeError:
            continue  # skipped or reported by its own range; never ends a document
    return False


def line_number(path: str, offset: int) -> int:
    """1-based number of the line starting at byte `offset` (read only to report an error)."""
    count = 0
    with _open(path) as f:
        remaining = offset
        while remaining > 0:
            chunk = f.read(min(remaining, 1 << 20))
            if not chunk:
                break
            count += chunk.count(b"\n")
            remaining -= len(chunk)
    return count + 1


def read_range(r: InputRange, skip_invalid_lines: bool, counters: ReadCounters) -> list[list[str]]:
    """The raw documents (lists of text lines) that `r` owns, in file order; counts its own lines."""
    documents: list[list[str]] = []
    with _open(r.path) as f:
        line_start = 0
        if r.start > 0:
            f.seek(r.start - 1)
            line_start = r.start if f.read(1) == b"\n" else r.start + len(f.readline())
        foreign = line_start > 0 and _continues_document(f, line_start)  # in a document of an earlier range
        f.seek(line_start)
        document: list[str] | None = None  # the owned document being read
        pos = line_start
        while True:
            raw = f.readline()
            if not raw:
                break
            start, pos = pos, pos + len(raw)
            owned = start < r.end
            if not owned and document is None:
                break
            if owned:
                counters.lines += 1
                counters.bytes_read += len(raw)
            try:
                text = line_text(raw, start == 0)
            except UnicodeDecodeError as err:
                if skip_invalid_lines:
                    counters.invalid_lines_skipped += owned
                    continue
                raise invalid_line_error(r.path, line_number(r.path, start), err) from None
            if text.strip():
                if document is not None:
                    document.append(text)
                elif not foreign:
                    document = [text]
            else:
                if document:
                    documents.append(document)
                document, foreign = None, False
        if document:
            documents.append(document)
    return documents


def make_temp_dir(first_output: str, tmp_dir: str | None) -> str:
    parent = tmp_dir or os.path.dirname(first_output) or "."
    path = FileSystems.join(parent, f"{os.path.basename(first_output)}.beam-tmp-{uuid.uuid4().hex[:12]}")
    FileSystems.mkdirs(path)
    return path


def remove_tree(path: str) -> None:
    """Removes a temporary directory (or prefix) and everything under it; errors are ignored."""
    try:
        if not is_remote(path):
            if os.path.exists(path):
                FileSystems.delete([path])
            return
        found = [m.path for result in FileSystems.match([FileSystems.join(path, "**")]) for m in result.metadata_list]
        if found:
            FileSystems.delete(found)
    except Exception:  # noqa: BLE001 -- cleanup after a failure must not hide the failure
        pass
    try:  # the directory itself, where the file system has them (HDFS); on GCS a prefix is gone with its files
        FileSystems.delete([path])
    except Exception:  # noqa: BLE001
        pass


def write_bytes(path: str, parts: Sequence[bytes]) -> None:
    with FileSystems.create(path, mime_type="application/octet-stream", compression_type=RAW) as out:
        for part in parts:
            out.write(part)


def concatenate(sources: Sequence[str], target: str) -> None:
    """Writes the files `sources` one after another to `target` (streamed), then removes them."""
    with FileSystems.create(target, mime_type="application/octet-stream", compression_type=RAW) as out:
        for source in sources:
            with _open(source) as f:
                while True:
                    chunk = f.read(1 << 20)
                    if not chunk:
                        break
                    out.write(chunk)
    if sources:
        FileSystems.delete(list(sources))


@functools.lru_cache(maxsize=None)
def local_copy(path: str | None) -> str | None:
    """`path` itself if local, else a copy in a local temporary directory (tokenizer files on GCS), made once
    per process and removed when it exits."""
    if path is None or not is_remote(path):
        return path
    folder = tempfile.mkdtemp(prefix="albert_tf-")
    atexit.register(shutil.rmtree, folder, True)
    target = os.path.join(folder, os.path.basename(path))
    with _open(path) as f, open(target, "wb") as out:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            out.write(chunk)
    return target
