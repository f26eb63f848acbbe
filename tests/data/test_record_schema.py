"""Record schemas: parse spec, writer and padding from one table, checked against protobuf by hand."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data.records import RecordSchema

SCHEMA = RecordSchema("toy", 1, (("ids", "int64", "max_seq_length"), ("pair", "float32", 2),
                                 ("label", "int64", None)))


def test_spec_writer_and_reader_agree():
    spec = SCHEMA.parse_spec(max_seq_length=4)
    assert {k: (v.shape, v.dtype) for k, v in spec.items()} == {
        "ids": ([4], tf.int64), "pair": ([2], tf.float32), "label": ([], tf.int64)}
    serialized = SCHEMA.serialize({"ids": [3, 1, 0, 0], "pair": np.array([0.5, -1.0]), "label": 2},
                                  max_seq_length=4)
    example = tf.train.Example.FromString(serialized).features.feature  # read by protobuf, not by us
    assert list(example["ids"].int64_list.value) == [3, 1, 0, 0]
    assert list(example["pair"].float_list.value) == [0.5, -1.0] and list(example["label"].int64_list.value) == [2]
    parsed = SCHEMA.parse(tf.constant(serialized), max_seq_length=4)
    assert parsed["ids"].dtype == tf.int32 and parsed["ids"].numpy().tolist() == [3, 1, 0, 0]
    assert parsed["label"].shape == () and parsed["pair"].dtype == tf.float32
    batch = SCHEMA.parse(tf.constant([serialized, serialized]), max_seq_length=4)
    assert batch["ids"].shape == (2, 4)
    padding = SCHEMA.padding(max_seq_length=4)
    assert {k: (v.shape.as_list(), v.dtype) for k, v in padding.items()} == {
        "ids": ([4], tf.int32), "pair": ([2], tf.float32), "label": ([], tf.int32)}
    assert all(not v.numpy().any() for v in padding.values())


def test_errors_name_the_feature():
    with pytest.raises(ValueError, match="feature ids has 3 values, expected 4"):
        SCHEMA.serialize({"ids": [1, 2, 3], "pair": [0, 0], "label": 1}, max_seq_length=4)
    with pytest.raises(ValueError, match="no value for feature label"):
        SCHEMA.serialize({"ids": [1, 2, 3, 4], "pair": [0, 0]}, max_seq_length=4)
    with pytest.raises(ValueError, match="feature ids needs the size 'max_seq_length'"):
        SCHEMA.parse_spec()
    with pytest.raises(ValueError, match="dtype 'int32'"):
        RecordSchema("bad", 1, (("x", "int32", None),))


def test_variants_of_a_format():
    floats = SCHEMA.replace("label", "float32")
    assert floats.parse_spec(max_seq_length=1)["label"].dtype == tf.float32 and floats.version == SCHEMA.version
    more = SCHEMA.extend("toy_train", (("start", "int64", None),))
    assert more.names == ("ids", "pair", "label", "start") and dataclasses.replace(more, version=2) != more


def test_records_have_the_same_bytes_in_every_process(example_feature_order):
    # A protobuf map is written in hash-table order unless serialized deterministically, and that order
    # changes from process to process: the same inputs gave record files of other bytes on every run.
    # Deterministic order (upb's): by key bytes, a key after the longer keys it is a prefix of.
    from albert_tf.data.tfrecord import map_key_order
    from albert_tf.squad.records import TRAIN_SCHEMA

    values = {"unique_ids": 7, "input_ids": [2, 9, 3, 0], "input_mask": [1, 1, 1, 0], "segment_ids": [0] * 4,
              "p_mask": [1, 0, 1, 1], "start_positions": 1, "end_positions": 1, "is_impossible": 0}
    keys = example_feature_order(TRAIN_SCHEMA.serialize(values, max_seq_length=4))
    assert sorted(keys) == sorted(values)
    assert keys == sorted(values, key=map_key_order)
