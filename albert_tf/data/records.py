"""Record schemas: one table per TFRecord format, from which its parse spec, its writer
and its padding rows are built (pretraining's is `albert_tf.pretraining_data.features.SCHEMA`).

A row is ``(name, dtype, length)``: dtype ``"int64"`` or ``"float32"``; length a size
name (``"max_seq_length"``, given when the schema is used), a fixed number, a tuple of
those for a feature of several dimensions (stored flat, as TFRecords hold it: RACE's
``(4, "max_seq_length")``), or None for a scalar. So a feature's name, type and shape are written once per format and
the reader, the writer and the eval padding cannot drift apart. Parsed int64
features become int32 (what the models take, as the original's input_fn did).

The schemas themselves live with their formats (GLUE in ``glue/features.py``, RACE in
``race/records.py``, SQuAD in ``squad/records.py``, pretraining in
``pretraining_data/features.py``); each carries a version that enters the feature caches'
keys. ``sequence_features``: the features whose last dimension is the sequence (what a
batch trimmed to its longest row cuts).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence, Union

import numpy as np

Length = Union[str, int, None, tuple]
SEQUENCE = "max_seq_length"  # the size name of the sequence dimension
MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")  # what the encoder takes
DTYPES = ("int64", "float32")


def model_input_features(length: Length = SEQUENCE) -> tuple[tuple[str, str, Length], ...]:
    """The encoder's inputs as schema rows (int64 of ``length``): part of every fine-tuning record."""
    return tuple((name, "int64", length) for name in MODEL_INPUTS)


def example_bytes(example: Any) -> bytes:
    """A `tf.train.Example`'s bytes, the same in every process. Plain `SerializeToString()` writes the
    feature map in hash-table order, which changes from process to process: the same inputs would give
    record files (and feature caches) of other bytes on every run."""
    return example.SerializeToString(deterministic=True)


@dataclasses.dataclass(frozen=True)
class RecordSchema:
    """The features of one record format: ``RecordSchema("glue", 1, (("input_ids", "int64", SEQ), ...))``."""

    name: str
    version: int  # bump when the records change for the same inputs (invalidates caches)
    features: tuple[tuple[str, str, Length], ...]

    def __post_init__(self):
        for name, dtype, _ in self.features:
            if dtype not in DTYPES:
                raise ValueError(f"schema {self.name}: feature {name} has dtype {dtype!r}, expected one of {DTYPES}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.features)

    def shapes(self, **sizes: int) -> dict[str, list[int]]:
        """Each feature's shape for the given sizes (``[]`` for a scalar)."""
        shapes = {}
        for name, _, length in self.features:
            dims = () if length is None else length if isinstance(length, tuple) else (length,)
            shapes[name] = [self._size(name, dim, sizes) for dim in dims]
        return shapes

    def _size(self, name: str, dim: str | int, sizes: Mapping[str, int]) -> int:
        if isinstance(dim, int):
            return dim
        if dim not in sizes:
            raise ValueError(f"schema {self.name}: feature {name} needs the size {dim!r}")
        return int(sizes[dim])

    @property
    def sequence_features(self) -> tuple[str, ...]:
        """Features whose last dimension is the sequence (``SEQUENCE``)."""
        return tuple(name for name, _, length in self.features
                     if length == SEQUENCE or (isinstance(length, tuple) and length[-1] == SEQUENCE))

    def parse_spec(self, skip: tuple[str, ...] = (), **sizes: int) -> dict:
        """``{name: tf.io.FixedLenFeature(shape, dtype)}`` for ``tf.io.parse_*example`` (``skip``: features
        left out, which the records then need not hold)."""
        import tensorflow as tf

        shapes = self.shapes(**sizes)
        return {name: tf.io.FixedLenFeature(shapes[name], tf.as_dtype(dtype)) for name, dtype, _ in self.features
                if name not in skip}

    def parse(self, serialized, skip: tuple[str, ...] = (), **sizes: int) -> dict:
        """One serialized record (scalar string) or a batch ([B] strings) -> {name: tensor}."""
        import tensorflow as tf

        spec = self.parse_spec(skip, **sizes)
        if serialized.shape.rank == 0:
            parsed = tf.io.parse_single_example(serialized, spec)
        else:
            parsed = tf.io.parse_example(serialized, spec)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}

    def example(self, values: Mapping[str, Any], **sizes: int):
        """A ``tf.train.Example`` of ``values`` (every feature, at its full length)."""
        import tensorflow as tf

        shapes = self.shapes(**sizes)
        fields = {}
        for name, dtype, _ in self.features:
            if name not in values:
                raise ValueError(f"schema {self.name}: no value for feature {name}")
            flat = np.asarray(values[name]).reshape(-1).tolist()
            expected = int(np.prod(shapes[name])) if shapes[name] else 1
            if len(flat) != expected:
                raise ValueError(f"schema {self.name}: feature {name} has {len(flat)} values, expected {expected}")
            if dtype == "int64":
                fields[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in flat]))
            else:
                fields[name] = tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in flat]))
        return tf.train.Example(features=tf.train.Features(feature=fields))

    def serialize(self, values: Mapping[str, Any], **sizes: int) -> bytes:
        """``example(values)`` as the bytes a TFRecord file holds."""
        return example_bytes(self.example(values, **sizes))

    def padding(self, **sizes: int) -> dict:
        """An all-zero parsed record (the dtypes ``parse`` gives): fills a last eval batch."""
        import tensorflow as tf

        shapes = self.shapes(**sizes)
        return {name: tf.zeros(shapes[name], tf.int32 if dtype == "int64" else tf.float32)
                for name, dtype, _ in self.features}

    def replace(self, name: str, dtype: str) -> "RecordSchema":
        """The same format with one feature of another dtype (e.g. a float label)."""
        if name not in self.names:
            raise ValueError(f"schema {self.name} has no feature {name}")
        return dataclasses.replace(
            self, features=tuple((n, dtype if n == name else d, length) for n, d, length in self.features))

    def extend(self, name: str, features: Sequence[tuple[str, str, Length]]) -> "RecordSchema":
        """Another format: these features added (e.g. the training labels of SQuAD)."""
        return dataclasses.replace(self, name=name, features=self.features + tuple(features))
