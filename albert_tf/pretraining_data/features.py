"""THE definition of the pretraining TFRecord features (Google ALBERT's format).

Each record is a `tf.train.Example` with (the table is `SCHEMA`, a `records.RecordSchema`)

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
are interchangeable. The writer side (`ExampleSerializer`, `serialize_example`)
encodes the protobuf by hand (`tfrecord`) so that the tool never imports
TensorFlow; the reader side (`feature_spec`, `parse_example`, `padding`), built by
`SCHEMA`, imports TensorFlow when called.
"""
from __future__ import annotations

from typing import Sequence

from albert_tf.data.records import RecordSchema
from albert_tf.data.tfrecord import (
    example_bytes,
    features_entry,
    float_feature,
    int64_feature,
    length_delimited,
    map_key_order,
    varint,
)

SEQ = "max_seq_length"
PRED = "max_predictions_per_seq"
# The one table: the parse spec, the writers' lengths and the padding all come from it.
SCHEMA = RecordSchema("pretraining", 1, (
    ("input_ids", "int64", SEQ),
    ("input_mask", "int64", SEQ),
    ("segment_ids", "int64", SEQ),
    ("token_boundary", "int64", SEQ),
    ("masked_lm_positions", "int64", PRED),
    ("masked_lm_ids", "int64", PRED),
    ("masked_lm_weights", "float32", PRED),
    ("next_sentence_labels", "int64", 1),  # [1], not a scalar: the original's shape
))
FEATURE_NAMES = SCHEMA.names


def _sizes(max_seq_length: int, max_predictions_per_seq: int) -> dict[str, int]:
    return {SEQ: max_seq_length, PRED: max_predictions_per_seq}


def feature_lengths(max_seq_length: int, max_predictions_per_seq: int) -> dict[str, int]:
    """Length of each feature for the given sizes."""
    shapes = SCHEMA.shapes(**_sizes(max_seq_length, max_predictions_per_seq))
    return {name: shape[0] for name, shape in shapes.items()}


def feature_spec(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """`tf.io.parse_example` spec: {name: tf.io.FixedLenFeature([length], dtype)}.

    With --do_permutation the masked_lm_* features are 2 * max_predictions_per_seq long:
    pass that doubled value here.
    """
    return SCHEMA.parse_spec(**_sizes(max_seq_length, max_predictions_per_seq))


def parse_example(serialized, max_seq_length: int, max_predictions_per_seq: int,
                  with_token_boundary: bool = True) -> dict:
    """Parses one serialized Example (scalar string) or a batch ([B] strings).

    Returns {name: tensor}: int64 features cast to int32 (TPU/GPU friendly, as
    the original's input_fn did), masked_lm_weights float32. Shapes are
    [length] for a scalar input, [B, length] for a batch. ``with_token_boundary=False``
    leaves ``token_boundary`` out, as the original's trainer did without online masking:
    BERT-format records (no ``token_boundary``) then parse too.
    """
    skip = () if with_token_boundary else ("token_boundary",)
    return SCHEMA.parse(serialized, skip=skip, **_sizes(max_seq_length, max_predictions_per_seq))


def padding(max_seq_length: int, max_predictions_per_seq: int) -> dict:
    """An all-zero parsed record (what the writers pad with, in `parse_example`'s dtypes)."""
    return SCHEMA.padding(**_sizes(max_seq_length, max_predictions_per_seq))


# ---------------------------------------------------------------- writer side
def _int64_feature_packed(packed: bytes) -> bytes:
    return length_delimited(3, length_delimited(1, packed) if packed else b"")


def varint_table(n: int) -> list[bytes]:
    """[varint(i) for i in range(n)], built arithmetically (each process builds one; 30000 calls take 0.3 s)."""
    one = [bytes((i,)) for i in range(min(n, 1 << 7))]
    two = [bytes((i & 0x7F | 0x80, i >> 7)) for i in range(1 << 7, min(n, 1 << 14))]
    three = [bytes((i & 0x7F | 0x80, (i >> 7) & 0x7F | 0x80, i >> 14)) for i in range(1 << 14, min(n, 1 << 21))]
    return one + two + three + [varint(i) for i in range(1 << 21, n)]


class ExampleSerializer:
    """Builds serialized `tf.train.Example` bytes for pretraining instances, fast.

    Same bytes as `tfrecord.example_bytes` (and TensorFlow's deterministic
    serialization): features in map_key_order, packed lists padded with 0. Per
    feature only the packed values are built per instance; the bytes in front of
    them depend only on their length and are cached, and lists of 0/1 (or any
    values below 128) are their own varint encoding. Values must be
    non-negative ints below `max_int`.
    """

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int, max_int: int):
        self.max_seq_length = max_seq_length
        self.max_predictions_per_seq = max_predictions_per_seq
        self._varints = varint_table(max(max_int, max_seq_length + 1, 128))
        self._prefixes: dict[tuple[str, int], bytes] = {}
        seq, pred = max_seq_length, max_predictions_per_seq
        self._positions_fit_a_byte = seq <= 128  # positions < seq are then one-byte varints
        # Entries that depend only on a count, precomputed: input_mask by number of
        # real tokens, masked_lm_weights by number of predictions, the SOP label.
        self._mask_entries = [self._int64_entry("input_mask", bytes([1] * n + [0] * (seq - n)))
                              for n in range(seq + 1)]
        self._weight_entries = [
            features_entry("masked_lm_weights", float_feature([1.0] * m + [0.0] * (pred - m)))
            for m in range(pred + 1)
        ]
        self._label_entries = [self._int64_entry("next_sentence_labels", bytes([label])) for label in (0, 1)]

    def _int64_entry(self, name: str, packed: bytes) -> bytes:
        """The Features map entry for `name` holding already packed varints."""
        prefix = self._prefixes.get((name, len(packed)))
        if prefix is None:
            placeholder = bytes(len(packed))
            prefix = features_entry(name, _int64_feature_packed(placeholder))[: -len(packed) or None]
            self._prefixes[(name, len(packed))] = prefix
        return prefix + packed

    def _packed(self, values: Sequence[int]) -> bytes:
        varints = self._varints
        return b"".join([varints[v] for v in values])

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
        pad = bytes(self.max_seq_length - n)  # varint 0 is one zero byte
        mpad = bytes(self.max_predictions_per_seq - m)
        entry = self._int64_entry
        positions = bytes(masked_lm_positions) if self._positions_fit_a_byte else self._packed(masked_lm_positions)
        body = b"".join(
            [  # in map_key_order (see the assertion below the class)
                entry("input_ids", self._packed(tokens) + pad),
                self._mask_entries[n],
                entry("masked_lm_ids", self._packed(masked_lm_ids) + mpad),
                entry("masked_lm_positions", positions + mpad),
                self._weight_entries[m],
                self._label_entries[next_sentence_label],
                entry("segment_ids", bytes(segment_ids) + pad),
                entry("token_boundary", bytes(token_boundary) + pad),
            ]
        )
        return b"\x0a" + self._varints_or_encode(len(body)) + body  # Example.features (field 1)

    def _varints_or_encode(self, n: int) -> bytes:
        return self._varints[n] if n < len(self._varints) else varint(n)

    def max_record_bytes(self) -> int:
        """Size of the largest serialized instance (every id and position at its largest)."""
        seq, pred = self.max_seq_length, self.max_predictions_per_seq
        top = len(self._varints) - 1
        return len(self.serialize_instance([top] * seq, [1] * seq, [1] * seq, [seq - 1] * pred, [top] * pred, 1))


# serialize_instance writes the features in this order, which must be TensorFlow's (tfrecord.map_key_order).
assert sorted(FEATURE_NAMES, key=map_key_order) == [
    "input_ids", "input_mask", "masked_lm_ids", "masked_lm_positions", "masked_lm_weights",
    "next_sentence_labels", "segment_ids", "token_boundary",
]


def serialize_example(features: dict, max_seq_length: int, max_predictions_per_seq: int) -> bytes:
    """Serialized Example from padded feature lists {name: values} (the features of SCHEMA).

    A plain-Python writer for tools and tests; `ExampleSerializer` is the fast path.
    """
    lengths = feature_lengths(max_seq_length, max_predictions_per_seq)
    for name in FEATURE_NAMES:
        if len(features[name]) != lengths[name]:
            raise ValueError(f"feature {name} has {len(features[name])} values, expected {lengths[name]}")
    int_values = [v for name, kind, _ in SCHEMA.features if kind == "int64" for v in features[name]]
    if any(v < 0 for v in int_values):
        raise ValueError("pretraining int64 features are never negative")
    return example_bytes({
        name: int64_feature(features[name]) if kind == "int64" else float_feature(features[name])
        for name, kind, _ in SCHEMA.features
    })
