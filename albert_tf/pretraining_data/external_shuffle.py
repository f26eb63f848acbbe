"""A uniform random permutation of more records than fit in memory (an external shuffle).

Every record carries a 64-bit random key and an ordinal (its place in generation
order); the output is all records sorted by (key, ordinal). With independent
uniform keys that is a uniform random permutation, and the ordinal makes equal
keys (rare, but expected once in a few billion records) keep generation order.

Scatter: records are appended to one of B buckets by key range (bucket = key * B
>> 64). A bucket may be spread over several files, `bucket-<b>.<tag>`, one per
writing process, so that workers scatter in parallel without sharing a file.
Sort: each bucket's files are read back together and sorted in memory; a bucket
larger than the memory limit (B is chosen from an estimate) is first split on
disk into smaller key ranges the same way. Buckets are independent, so several
processes may sort different buckets at once. The order depends only on the keys
and ordinals: not on B, the memory limit, which process wrote a record or where.

Bucket file entry: uint64 key, uint64 ordinal, uint32 payload length (little-endian), payload.
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Iterable, Iterator, Mapping

KEY_SPACE = 1 << 64
ENTRY_HEADER = struct.Struct("<QQI")


def bucket_of(key: int, num_buckets: int) -> int:
    """The bucket (key range) of `key` among `num_buckets` equal ranges of [0, 2**64)."""
    return (key * num_buckets) >> 64


def entry(key: int, ordinal: int, payload: bytes) -> bytes:
    """One bucket-file entry."""
    return ENTRY_HEADER.pack(key, ordinal, len(payload)) + payload


@dataclass
class ShuffleStats:
    bucket_splits: int = 0  # buckets over the memory limit, split on disk before sorting
    largest_sorted_bytes: int = 0  # the most entry bytes one process held in memory at once

    def merge(self, other: "ShuffleStats") -> None:
        self.bucket_splits += other.bucket_splits
        self.largest_sorted_bytes = max(self.largest_sorted_bytes, other.largest_sorted_bytes)


def _bucket_prefix(directory: str, bucket: int) -> str:
    return os.path.join(directory, f"bucket-{bucket:05d}")


def append_to_buckets(directory: str, tag: str, blobs: Mapping[int, bytes]) -> None:
    """Appends each blob (concatenated `entry` bytes) to its bucket's file for writer `tag`.
    Only one process may use a given tag at a time."""
    for bucket, blob in blobs.items():
        with open(f"{_bucket_prefix(directory, bucket)}.{tag}", "ab") as f:
            f.write(blob)


def _range_start(lo: int, hi: int, parts: int, i: int) -> int:
    """Start of part i when [lo, hi) is cut as `(key - lo) * parts // (hi - lo)`."""
    return lo + -(-(i * (hi - lo)) // parts)


def sorted_bucket(directory: str, bucket: int, num_buckets: int, tags: Iterable[str], memory_limit: int,
                  max_open: int, stats: ShuffleStats) -> Iterator[list[memoryview]]:
    """The payloads of `bucket` (its files of writers `tags`) in (key, ordinal) order, as one list (or, for a
    bucket split on disk, one list per key range, in order). Its files are removed once read. At most about
    `memory_limit` bytes of entries (plus ~160 bytes per entry of index) are in memory."""
    prefix = _bucket_prefix(directory, bucket)
    paths = [path for path in (f"{prefix}.{tag}" for tag in sorted(tags)) if os.path.exists(path)]
    if paths:
        lo = _range_start(0, KEY_SPACE, num_buckets, bucket)
        hi = _range_start(0, KEY_SPACE, num_buckets, bucket + 1)
        yield from _sorted(paths, lo, hi, memory_limit, max_open, True, stats)


def _sorted(paths: list[str], lo: int, hi: int, memory_limit: int, max_open: int, can_split: bool,
            stats: ShuffleStats) -> Iterator[list[memoryview]]:
    sizes = [os.path.getsize(p) for p in paths]
    size = sum(sizes)
    parts = min(max_open, -(-size // max(1, memory_limit // 2)))
    if size > memory_limit and can_split and parts >= 2 and hi - lo >= parts:
        stats.bucket_splits += 1
        part_prefix = paths[0] + ".part"
        part_sizes = _split(paths, part_prefix, lo, hi, parts)
        for i in range(parts):
            part = f"{part_prefix}{i}"
            if part_sizes[i]:
                # A part as large as the whole (all keys in one range) cannot shrink by splitting again.
                yield from _sorted([part], _range_start(lo, hi, parts, i), _range_start(lo, hi, parts, i + 1),
                                   memory_limit, max_open, part_sizes[i] < size, stats)
            else:
                os.remove(part)
        return
    data = bytearray(size)
    view = memoryview(data)
    pos = 0
    for path, n in zip(paths, sizes):
        with open(path, "rb") as f:
            f.readinto(view[pos:pos + n])
        os.remove(path)
        pos += n
    stats.largest_sorted_bytes = max(stats.largest_sorted_bytes, size)
    unpack = ENTRY_HEADER.unpack_from
    header = ENTRY_HEADER.size
    index = []  # (key, ordinal, start, end): ordinals are unique, so positions never decide
    pos = 0
    while pos < size:
        key, ordinal, length = unpack(data, pos)
        index.append((key, ordinal, pos + header, pos + header + length))
        pos += header + length
    index.sort()
    yield [view[start:end] for _, _, start, end in index]


def _split(paths: list[str], part_prefix: str, lo: int, hi: int, parts: int) -> list[int]:
    """Streams the files into `parts` files `<part_prefix><i>` by key range; removes them; returns part sizes."""
    width = hi - lo
    sizes = [0] * parts
    outs = [open(f"{part_prefix}{i}", "wb", buffering=1 << 16) for i in range(parts)]
    try:
        for path in paths:
            with open(path, "rb", buffering=1 << 20) as f:
                while True:
                    header = f.read(ENTRY_HEADER.size)
                    if not header:
                        break
                    key, _, length = ENTRY_HEADER.unpack(header)
                    part = ((key - lo) * parts) // width
                    outs[part].write(header)
                    outs[part].write(f.read(length))
                    sizes[part] += ENTRY_HEADER.size + length
            os.remove(path)
    finally:
        for out in outs:
            out.close()
    return sizes
