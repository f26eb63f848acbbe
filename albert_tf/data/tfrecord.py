"""TFRecord files and `tf.train.Example` messages, written without TensorFlow.

The data tools write records in processes that never import TensorFlow (about
0.6 GB and seconds of start-up each). The bytes equal TensorFlow's:

- A TFRecord is: length (uint64 little-endian), masked CRC32C of those 8 bytes
  (uint32 LE), the data, masked CRC32C of the data (uint32 LE); the mask is
  TensorFlow's `((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32`.
- An Example is protobuf: Example.features (field 1) -> Features.feature, a
  map<string, Feature> whose entries are written in the order of
  `SerializeToString(deterministic=True)` with TensorFlow's protobuf (upb):
  by key bytes, except that a key comes after the longer keys it is a prefix of
  ("ab" before "a"; upb sorts in reverse and writes backwards). The features of
  the pretraining format have no such pairs, so there this is plain byte order,
  which C++ protobuf uses. (Without `deterministic`, map entries come in hash
  table order, which changes from process to process: no fixed order could match
  it byte for byte.)
  Feature.int64_list is field 3 and Feature.float_list field 2, each holding one
  packed repeated field 1; an empty list is an empty message, still present.
"""
from __future__ import annotations

import math
import os
import struct
from typing import Iterable, Mapping, Sequence

import google_crc32c

_MASK_DELTA = 0xA282EAD8
_UINT32 = 0xFFFFFFFF
_UINT64 = (1 << 64) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


# ------------------------------------------------------------------ TFRecord framing
def masked_crc32c(data: bytes) -> int:
    """TensorFlow's masked CRC32C of `data` (the CRC is masked because data may hold CRCs)."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _UINT32


def frame_record(data: bytes) -> bytes:
    """`data` as one TFRecord: length, its CRC, the data, the data's CRC."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, struct.pack("<I", masked_crc32c(length)), data,
                     struct.pack("<I", masked_crc32c(data))))


class TFRecordWriter:
    """Writes records to a new file at `path`, like `tf.io.TFRecordWriter` (no compression)."""

    def __init__(self, path: str | os.PathLike, buffer_bytes: int = 1 << 20):
        self._file = open(path, "wb", buffering=buffer_bytes)

    def write(self, record: bytes) -> None:
        self._file.write(frame_record(record))

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> "TFRecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ------------------------------------------------------------------ TFRecord framing checks
HEADER_BYTES, FOOTER_BYTES = 12, 4  # length + its CRC; the data's CRC
TAIL_BYTES = 1 << 16  # how much of a file's end `cut_short` reads (a pretraining record is a few KB)


def _header_length(header: bytes) -> int | None:
    """The data length a 12-byte record header gives, None when its CRC does not match."""
    length, crc = struct.unpack("<QI", header)
    return length if masked_crc32c(header[:8]) == crc else None


def cut_short(path: str | os.PathLike, tail_bytes: int = TAIL_BYTES) -> bool:
    """Whether a TFRecord file ends inside a record (a cut copy or an interrupted write), from its last
    `tail_bytes` only, so cheap for any corpus: in a whole file a record header (CRC-checked) there gives a
    record that ends exactly at the file's end. False when it cannot tell (no header in the tail: a last
    record longer than it) and for an empty file.

    TensorFlow's reader takes a file cut inside a record header for a shorter whole file (the records
    before are read, silently) and one cut inside the data for an error at that record's offset."""
    import numpy as np

    from albert_tf.fileio import open_binary

    with open_binary(path) as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        start = max(0, size - tail_bytes)
        f.seek(start)
        tail = f.read()
    if size == 0:
        return False
    if len(tail) < HEADER_BYTES + FOOTER_BYTES:
        return True
    # Where the record of a header at each offset of the tail would end (its little-endian uint64 length).
    data = np.frombuffer(tail, np.uint8).astype(np.uint64)
    count = len(tail) - HEADER_BYTES + 1
    lengths = sum(data[k:k + count] << np.uint64(8 * k) for k in range(8))
    plausible = lengths < np.uint64(1 << 40)  # (no overflow below)
    ends = np.arange(start + HEADER_BYTES + FOOTER_BYTES, start + HEADER_BYTES + FOOTER_BYTES + count,
                     dtype=np.uint64) + np.where(plausible, lengths, 0)

    def headers(where) -> bool:
        return any(_header_length(tail[i:i + HEADER_BYTES]) is not None for i in np.flatnonzero(where))

    if headers(plausible & (ends == np.uint64(size))):
        return False
    if start == 0:  # the whole file was read: its records do not end where it does
        return True
    # A header whose record ends past the file's end, or leaves less than a header after it.
    return headers(plausible & (ends > np.uint64(size - HEADER_BYTES)))


def framing_problem(path: str | os.PathLike, check_data: bool = True, records: int | None = None) -> str | None:
    """The first record of a TFRecord file whose framing is wrong, in words naming the record's number (#1 is
    the first) and byte offset: the file ends inside it, or a CRC does not match (of the length, or with
    `check_data`, of the data). None when every record is whole (with ``records``: the first that many, the
    rest of the file unread). Streams the file once."""
    from albert_tf.fileio import open_binary

    index, offset = 0, 0
    with open_binary(path) as raw:
        f = raw if hasattr(raw, "peek") else _Buffered(raw)
        while records is None or index < records:
            header = f.read(HEADER_BYTES)
            if not header:
                return None
            at = f"record #{index + 1} (at byte {offset})"
            if len(header) < HEADER_BYTES:
                return f"it ends {len(header)} bytes into the header of {at}, after {index} whole records"
            length = _header_length(header)
            if length is None:
                return f"the header of {at} does not match its CRC"
            body = f.read(length + FOOTER_BYTES)
            if len(body) < length + FOOTER_BYTES:
                return (f"it ends inside {at}, after {index} whole records ({HEADER_BYTES + len(body)} of the "
                        f"record's {HEADER_BYTES + length + FOOTER_BYTES} bytes are there)")
            if check_data and masked_crc32c(body[:length]) != struct.unpack("<I", body[length:])[0]:
                return f"the data of {at} does not match its CRC"
            index += 1
            offset += HEADER_BYTES + length + FOOTER_BYTES
    return None


class _Buffered:
    """Reads of a GFile (remote files) in full: `read(n)` returns n bytes unless the file ends."""

    def __init__(self, f):
        self._f = f

    def read(self, n: int) -> bytes:
        parts, wanted = [], n
        while wanted:
            part = self._f.read(wanted)
            if not part:
                break
            parts.append(part)
            wanted -= len(part)
        return b"".join(parts)


# ------------------------------------------------------------------ protobuf encoding
def varint(value: int) -> bytes:
    """Protobuf base-128 varint; negative int64 values as their 64-bit two's complement (10 bytes)."""
    value &= _UINT64
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def length_delimited(field_number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): tag, length, payload."""
    return varint(field_number << 3 | 2) + varint(len(payload)) + payload


def int64_feature(values: Iterable[int]) -> bytes:
    """Serialized `tf.train.Feature(int64_list=tf.train.Int64List(value=values))`."""
    packed = []
    for v in values:
        v = int(v)
        if not _INT64_MIN <= v <= _INT64_MAX:
            raise ValueError(f"int64 feature value out of range: {v}")
        packed.append(varint(v))
    int64_list = length_delimited(1, b"".join(packed)) if packed else b""
    return length_delimited(3, int64_list)


def _float32_bytes(value: float) -> bytes:
    try:
        return struct.pack("<f", value)
    except OverflowError:  # rounds beyond float32: a C cast (protobuf) gives +-inf
        return struct.pack("<f", math.copysign(math.inf, value))


def float_feature(values: Sequence[float]) -> bytes:
    """Serialized `tf.train.Feature(float_list=tf.train.FloatList(value=values))`.

    Values are rounded to float32 as protobuf does (a C cast: to nearest, beyond
    the float32 range to +-inf, NaN sign kept).
    """
    try:
        packed = struct.pack(f"<{len(values)}f", *values)
    except OverflowError:
        packed = b"".join(_float32_bytes(v) for v in values)
    float_list = length_delimited(1, packed) if packed else b""
    return length_delimited(2, float_list)


def features_entry(name: str, feature: bytes) -> bytes:
    """One entry of Features.feature (map<string, Feature>): key field 1, value field 2."""
    return length_delimited(1, length_delimited(1, name.encode("utf-8")) + length_delimited(2, feature))


def map_key_order(name: str) -> tuple[int, ...]:
    """Sort key of a map entry as upb's deterministic serialization: bytes, the end of a key above any byte."""
    return (*name.encode("utf-8"), 256)


def example_bytes(features: Mapping[str, bytes]) -> bytes:
    """Serialized `tf.train.Example` from {name: serialized Feature}, entries in TensorFlow's deterministic
    order (`map_key_order`)."""
    body = b"".join(features_entry(name, features[name]) for name in sorted(features, key=map_key_order))
    return length_delimited(1, body)
