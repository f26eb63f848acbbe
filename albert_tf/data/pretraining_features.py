"""THE definition of the pretraining TFRecord features (Google ALBERT's format).

Each record is a `tf.train.Example` with

| feature                | dtype   | shape                        |
|------------------------|---------|------------------------------|
| input_ids              | int64   | [max_seq_length]             |
| input_mask             | int64   | [max_seq_length]             |
| segment_ids            | int64   | [max_seq_length]             |
| token_boundary         | int64   | [max_seq_length]             |
| masked_lm_positions    | int64   | [max_predictions_per_seq]    |
| masked_lm_ids          | int64   | [max_predictions_per_seq]    |
| masked_lm_weights      | float32 | [max_predictions_per_seq]    |
| next_sentence_labels   | int64   | [1] (holds the SOP label)    |

Padding is 0. Files written by Google's create_pretraining_data.py and by ours
are interchangeable. The writer side (`serialize_example`) encodes the protobuf
by hand so that worker processes need not import TensorFlow; the reader side
(`feature_spec`, `parse_example`) imports TensorFlow when called.
"""
from __future__ import annotations

import struct
from typing import Sequence

# (name, kind, length key): the length key says which argument gives the shape.
SEQ = "max_seq_length"
PRED = "max_predictions_per_seq"
FEATURES: tuple[tuple[str, str, str | None], ...] = (
    ("input_ids", "int64", SEQ),
    ("input_mask", "int64", SEQ),
    ("segment_ids", "int64", SEQ),
    ("token_boundary", "int64", SEQ),
    ("masked_lm_positions", "int64", PRED),
    ("masked_lm_ids", "int64", PRED),
    ("masked_lm_weights", "float32", PRED),
    ("next_sentence_labels", "int64", None),
)
FEATURE_NAMES = tuple(name for name, _, _ in FEATURES)


def feature_lengths(max_seq_length: int, max_predictions_per_seq: int) -> dict[str, int]:
    """Length of each feature for the given sizes."""
    sizes = {SEQ: max_seq_length, PRED: max_predictions_per_seq, None: 1}
    return {name: sizes[key] for name, _, key in FEATURES}


def feature_spec(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """`tf.io.parse_example` spec: {name: tf.io.FixedLenFeature([length], dtype)}.

    With --do_permutation the masked_lm_* features are 2 * max_predictions_per_seq long:
    pass that doubled value here.
    """
    import tensorflow as tf

    dtypes = {"int64": tf.int64, "float32": tf.float32}
    lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
    return {name: tf.io.FixedLenFeature([lengths[name]], dtypes[kind]) for name, kind, _ in FEATURES}


def parse_example(serialized, max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """Parses one serialized Example (scalar string) or a batch ([B] strings).

    Returns {name: tensor}: int64 features cast to int32 (TPU/GPU friendly, as
    the original's input_fn did), masked_lm_weights float32. Shapes are
    [length] for a scalar input, [B, length] for a batch.
    """
    import tensorflow as tf

    spec = feature_spec(max_seq_length, max_predictions_per_seq)
    if serialized.shape.rank == 0:
        parsed = tf.io.parse_single_example(serialized, spec)
    else:
        parsed = tf.io.parse_example(serialized, spec)
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t for name, t in parsed.items()}


# ---------------------------------------------------------------- writer side
def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class ExampleSerializer:
    """Builds serialized `tf.train.Example` bytes for pretraining instances, fast.

    Encodes the protobuf wire format directly (packed int64/float lists, the
    features in the original's order), which `tf.train.Example` parses like its
    own output. Values must be non-negative ints below `max_int`.
    """

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int, max_int: int):
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        self._varints = [_varint(i) for i in range(max(max_int, max_seq_length + 1, 128))]
        self._num_varints = len(self._varints)
        seq, pred = max_seq_length, max_predictions_per_seq
        # Entries that depend only on a count, precomputed: input_mask by number of
        # real tokens, masked_lm_weights by number of predictions, the SOP label.
        self._mask_entries = [self._int64_entry("input_mask", [1] * n + [0] * (seq - n)) for n in range(seq + 1)]
        self._weight_entries = [
            self._entry("masked_lm_weights", self._float_feature([1.0] * m + [0.0] * (pred - m)))
            for m in range(pred + 1)
        ]
        self._label_entries = [self._int64_entry("next_sentence_labels", [label]) for label in (0, 1)]

    def _len(self, data: bytes) -> bytes:
        n = len(data)
        return self._varints[n] if n < self._num_varints else _varint(n)

    def _entry(self, name: str, feature: bytes) -> bytes:
        # Features.feature map entry: key (field 1, string) + value Feature (field 2).
        key = name.encode()
        entry = b"\x0a" + self._len(key) + key + b"\x12" + self._len(feature) + feature
        return b"\x0a" + self._len(entry) + entry

    def _int64_entry(self, name: str, values: Sequence[int]) -> bytes:
        # Feature.int64_list (field 3) -> Int64List.value (field 1, packed varints).
        varints = self._varints
        packed = b"".join([varints[v] for v in values])
        int64_list = b"\x0a" + self._len(packed) + packed
        return self._entry(name, b"\x1a" + self._len(int64_list) + int64_list)

    def _float_feature(self, values: Sequence[float]) -> bytes:
        # Feature.float_list (field 2) -> FloatList.value (field 1, packed little-endian float32).
        packed = struct.pack(f"<{len(values)}f", *values)
        float_list = b"\x0a" + self._len(packed) + packed
        return b"\x12" + self._len(float_list) + float_list

    def serialize_instance(
        self,
        tokens: Sequence[int],
        segment_ids: Sequence[int],
        token_boundary: Sequence[int],
        masked_lm_positions: Sequence[int],
        masked_lm_ids: Sequence[int],
        next_sentence_label: int,
    ) -> bytes:
        """One instance, unpadded (padding with 0 to the feature lengths happens here)."""
        n = len(tokens)
        m = len(masked_lm_positions)
        pad = [0] * (self.max_seq_length - n)
        mpad = [0] * (self.max_predictions_per_seq - m)
        entry = self._int64_entry
        features = b"".join(
            [
                entry("input_ids", [*tokens, *pad]),
                self._mask_entries[n],
                entry("segment_ids", [*segment_ids, *pad]),
                entry("token_boundary", [*token_boundary, *pad]),
                entry("masked_lm_positions", [*masked_lm_positions, *mpad]),
                entry("masked_lm_ids", [*masked_lm_ids, *mpad]),
                self._weight_entries[m],
                self._label_entries[next_sentence_label],
            ]
        )
        # Example.features (field 1) -> Features.
        return b"\x0a" + self._len(features) + features


def serialize_example(features: dict, max_seq_length: int, max_predictions_per_seq: int) -> bytes:
    """Serialized Example from padded feature lists {name: values} (names of FEATURES).

    A plain-Python writer for tools and tests; `ExampleSerializer` is the fast path.
    """
    lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
    for name in FEATURE_NAMES:
        if len(features[name]) != lengths[name]:
            raise ValueError(f"feature {name} has {len(features[name])} values, expected {lengths[name]}")
    int_values = [v for name, kind, _ in FEATURES if kind == "int64" for v in features[name]]
    if any(v < 0 for v in int_values):
        raise ValueError("pretraining int64 features are never negative")
    serializer = ExampleSerializer(max_seq_length, max_predictions_per_seq, max(int_values, default=0) + 1)
    body = b"".join(
        serializer._int64_entry(name, features[name]) if kind == "int64"
        else serializer._entry(name, serializer._float_feature(features[name]))
        for name, kind, _ in FEATURES
    )
    return b"\x0a" + serializer._len(body) + body
