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


def _written(tmp_path, sizes):
    """A file of records of `sizes` bytes (random data) by our writer, and each record's start offset
    counted from the sizes (12 header bytes, the data, 4 CRC bytes)."""
    import random

    rng = random.Random(3)
    path = tmp_path / "records.tfrecord"
    with TFRecordWriter(path) as writer:
        for size in sizes:
            writer.write(bytes(rng.randrange(256) for _ in range(size)))
    starts = [0]
    for size in sizes:
        starts.append(starts[-1] + 12 + size + 4)
    assert path.stat().st_size == starts[-1]
    return path, starts


def test_a_file_cut_anywhere_but_between_records_is_found_from_its_tail(tmp_path):
    """TensorFlow reads a file cut inside a record header as a shorter whole file, silently: `cut_short`
    tells from the file's tail alone (also one shorter than the file), `framing_problem` says where."""
    from albert_tf.data.tfrecord import cut_short, framing_problem

    path, starts = _written(tmp_path, [0, 40, 7, 300, 0, 25, 120])
    data = path.read_bytes()
    assert not cut_short(path) and framing_problem(path) is None
    cut = tmp_path / "cut.tfrecord"
    for end in range(1, len(data)):
        cut.write_bytes(data[:end])
        whole = sum(stop <= end for stop in starts[1:])  # records wholly there
        at = starts[whole]
        for tail in (1 << 16, 400, 200):  # > the largest record; > every record but one; smaller
            found = cut_short(cut, tail)
            if end in starts:
                assert not found, (end, tail)
            else:  # told when the tail holds the header of the cut record (cut in a header: of the one before)
                header = at if end - at >= 12 or whole == 0 else starts[whole - 1]
                assert found == (end <= tail or header >= end - tail), (end, tail)
                if tail >= 400:
                    assert found, (end, tail)
        problem = framing_problem(cut)
        if end in starts:
            assert problem is None
        elif end - at < 12:
            assert problem == (f"it ends {end - at} bytes into the header of record #{whole + 1} (at byte {at}), "
                               f"after {whole} whole records"), end
        else:
            assert problem == (f"it ends inside record #{whole + 1} (at byte {at}), after {whole} whole records "
                               f"({end - at} of the record's {starts[whole + 1] - at} bytes are there)"), end


def test_framing_problem_names_the_record_whose_crc_does_not_match(tmp_path):
    from albert_tf.data.tfrecord import cut_short, framing_problem

    path, starts = _written(tmp_path, [10, 20, 30])
    data = bytearray(path.read_bytes())
    data[starts[1] + 12 + 5] ^= 1  # in record #2's data
    path.write_bytes(data)
    assert not cut_short(path)  # its length is whole
    assert framing_problem(path) == f"the data of record #2 (at byte {starts[1]}) does not match its CRC"
    assert framing_problem(path, check_data=False) is None
    # The first records only: a fault past them is not read.
    assert framing_problem(path, records=1) is None
    assert framing_problem(path, records=2) == framing_problem(path)
    data[starts[2] + 3] ^= 1  # in record #3's length
    path.write_bytes(data)
    assert framing_problem(path, check_data=False) == (f"the header of record #3 (at byte {starts[2]}) does not "
                                                       f"match its CRC")
