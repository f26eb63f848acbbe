"""A uniform random permutation of more records than fit in memory (an external shuffle).

Every record carries a 64-bit key; the output is all records sorted by key,
equal keys in arrival order. With independent uniform keys that is a uniform
random permutation. Records are appended to one of B bucket files by key range
(bucket = key * B >> 64), in arrival order; the buckets are then read back one
at a time, in key order, and sorted in memory. A bucket larger than the memory
limit (B is chosen from an estimate) is first split on disk into smaller key
ranges the same way. So the order depends only on the keys and the arrival
order, not on B, the limit, or which process produced a record.

Bucket file entry: uint64 key, uint32 payload length (little-endian), payload.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Iterator

KEY_SPACE = 1 << 64
ENTRY_HEADER = struct.Struct("<QI")


def bucket_of(key: int, num_buckets: int) -> int:
    """The bucket (key range) of `key` among `num_buckets` equal ranges of [0, 2**64)."""
    return (key * num_buckets) >> 64


def entry(key: int, payload: bytes) -> bytes:
    """One bucket-file entry."""
    return ENTRY_HEADER.pack(key, len(payload)) + payload


@dataclass
class ShuffleStats:
    buckets: int = 0
    bucket_splits: int = 0  # buckets over the memory limit, split on disk before sorting
    largest_sorted_bytes: int = 0  # the most entry bytes held in memory at once
    bytes_written: int = 0  # entry bytes scattered (about the output's size)


def _range_start(lo: int, hi: int, parts: int, i: int) -> int:
    """Start of part i when [lo, hi) is cut as `(key - lo) * parts // (hi - lo)`."""
    return lo + -(-(i * (hi - lo)) // parts)


class BucketFiles:
    """Scatter side, then the sorted read-back. Files live in `directory` and are removed as they are read."""

    BUFFER_BYTES = 8192  # per open bucket file: at most 8 MiB for 1024 buckets

    def __init__(self, directory: str, num_buckets: int):
        self.directory = directory
        self.num_buckets = num_buckets
        self.stats = ShuffleStats(buckets=num_buckets)
        self._files: dict[int, object] = {}

    def _path(self, bucket: int) -> str:
        return os.path.join(self.directory, f"bucket-{bucket:05d}")

    def append(self, bucket: int, blob: bytes) -> None:
        """Appends entries (concatenated `entry` bytes) to `bucket`."""
        f = self._files.get(bucket)
        if f is None:
            f = self._files[bucket] = open(self._path(bucket), "wb", buffering=self.BUFFER_BYTES)
        f.write(blob)
        self.stats.bytes_written += len(blob)

    def close(self) -> None:
        for f in self._files.values():
            f.close()

    def sorted_runs(self, memory_limit: int, max_open: int) -> Iterator[list[memoryview]]:
        """All payloads in key order, one list per bucket (or part of a split bucket); each file is removed
        once read. At most about `memory_limit` bytes of entries (plus ~150 bytes per entry of index) are
        in memory."""
        self.close()
        for bucket in range(self.num_buckets):
            path = self._path(bucket)
            if bucket in self._files:
                lo = _range_start(0, KEY_SPACE, self.num_buckets, bucket)
                hi = _range_start(0, KEY_SPACE, self.num_buckets, bucket + 1)
                yield from self._sorted(path, lo, hi, memory_limit, max_open, can_split=True)

    def _sorted(self, path: str, lo: int, hi: int, memory_limit: int, max_open: int,
                can_split: bool) -> Iterator[list[memoryview]]:
        size = os.path.getsize(path)
        parts = min(max_open, -(-size // max(1, memory_limit // 2)))
        if size > memory_limit and can_split and parts >= 2 and hi - lo >= parts:
            self.stats.bucket_splits += 1
            sizes = self._split(path, lo, hi, parts)
            for i in range(parts):
                sub_lo, sub_hi = _range_start(lo, hi, parts, i), _range_start(lo, hi, parts, i + 1)
                if sizes[i]:
                    # A part as large as the whole (all keys in one range) cannot shrink by splitting again.
                    yield from self._sorted(f"{path}.{i}", sub_lo, sub_hi, memory_limit, max_open,
                                            can_split=sizes[i] < size)
                else:
                    os.remove(f"{path}.{i}")
            return
        with open(path, "rb") as f:
            data = f.read()
        os.remove(path)
        self.stats.largest_sorted_bytes = max(self.stats.largest_sorted_bytes, len(data))
        unpack = ENTRY_HEADER.unpack_from
        header = ENTRY_HEADER.size
        index = []  # (key, start, end): sorting tuples keeps equal keys in file (arrival) order
        pos = 0
        while pos < len(data):
            key, length = unpack(data, pos)
            index.append((key, pos + header, pos + header + length))
            pos += header + length
        index.sort()
        view = memoryview(data)
        yield [view[start:end] for _, start, end in index]

    def _split(self, path: str, lo: int, hi: int, parts: int) -> list[int]:
        """Streams `path` into `parts` files by key range (order kept within each); returns their sizes."""
        width = hi - lo
        sizes = [0] * parts
        outs = [open(f"{path}.{i}", "wb", buffering=1 << 16) for i in range(parts)]
        try:
            with open(path, "rb", buffering=1 << 20) as f:
                while True:
                    header = f.read(ENTRY_HEADER.size)
                    if not header:
                        break
                    key, length = ENTRY_HEADER.unpack(header)
                    part = ((key - lo) * parts) // width
                    outs[part].write(header)
                    outs[part].write(f.read(length))
                    sizes[part] += ENTRY_HEADER.size + length
        finally:
            for out in outs:
                out.close()
        os.remove(path)
        return sizes
