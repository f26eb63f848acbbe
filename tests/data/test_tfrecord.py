"""The TensorFlow-free TFRecord writer and Example encoder: byte for byte what TensorFlow writes."""
import math

import pytest
import tensorflow as tf

from albert_tf.data.tfrecord import TFRecordWriter, example_bytes, float_feature, int64_feature

FLOAT_EDGES = [0.0, -0.0, 1.0, 0.1, -2.5e-3, math.inf, -math.inf, math.nan, -math.nan,
               1.4e-45, 1e-46, 3.4028234663852886e38, 3.4028235677973366e38, 1e39, -1e39]
INT_EDGES = [0, 1, -1, 127, 128, 16383, 16384, 2**31, -2**31, 2**63 - 1, -2**63]

# (name, kind, values): empty lists, negative and extreme ints, float edge values, names whose
# byte order differs from their insertion order (upper case, non-ASCII, a prefix of another).
CASES = [
    [],
    [("a", "int64", [])],
    [("a", "float", [])],
    [("input_ids", "int64", [2, 29999, 3]), ("masked_lm_weights", "float", [1.0, 0.0]),
     ("next_sentence_labels", "int64", [1])],
    [("z", "int64", INT_EDGES), ("B", "float", FLOAT_EDGES), ("é", "int64", [5]), ("a", "float", [0.5]),
     ("ab", "int64", list(range(-300, 300))), ("a b", "int64", [])],
    [("long", "int64", list(range(20000)))],  # a record longer than 64 KiB
]


def _tf_example(case) -> bytes:
    feature = {}
    for name, kind, values in case:
        if kind == "int64":
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    # TensorFlow writes map entries in hash order, which changes from process to process without this.
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


def _our_example(case) -> bytes:
    return example_bytes({name: int64_feature(values) if kind == "int64" else float_feature(values)
                          for name, kind, values in case})


@pytest.mark.parametrize("case", CASES, ids=range(len(CASES)))
def test_example_bytes_equal_tensorflow(case):
    assert _our_example(case) == _tf_example(case)


def test_tfrecord_file_bytes_equal_tensorflow(tmp_path):
    records = [_tf_example(case) for case in CASES] + [b"", b"\x00" * 70000, bytes(range(256))]
    theirs, ours = tmp_path / "tf.tfrecord", tmp_path / "ours.tfrecord"
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for record in records:
            writer.write(record)
    with TFRecordWriter(ours) as writer:
        for record in records:
            writer.write(record)
    assert ours.read_bytes() == theirs.read_bytes()
    assert list(tf.data.TFRecordDataset(str(ours)).as_numpy_iterator()) == records


def test_out_of_range_int64_is_refused():
    with pytest.raises(ValueError, match="out of range"):
        int64_feature([2**63])
