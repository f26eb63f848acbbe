"""The one feature cache: reused while the settings hold, rebuilt when they or the format change,
nothing half-written when a build fails."""
import json

import pytest
import tensorflow as tf

from albert_tf.data.feature_cache import cached_records
from albert_tf.data.records import RecordSchema

SCHEMA = RecordSchema("toy", 1, (("x", "int64", None),))


def _builder(calls, values=(1, 2, 3)):
    def build(write):
        calls.append(1)
        for v in values:
            write(SCHEMA.serialize({"x": v}))
        return {"num_examples": len(values)}
    return build


def _read(path):
    return [int(SCHEMA.parse(r)["x"]) for r in tf.data.TFRecordDataset(path)]


def test_reuse_and_rebuild(tmp_path):
    path, calls = str(tmp_path / "c.tf_record"), []
    first = cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))
    assert not first.reused and calls == [1] and _read(path) == [1, 2, 3]
    side = json.loads((tmp_path / "c.tf_record.json").read_text())
    assert side["settings"] == {"data": "a"} and side["num_examples"] == 3 and side["key"] == first.side["key"]
    again = cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))
    assert again.reused and calls == [1] and again.side == first.side
    cached_records(path, SCHEMA, {"data": "b"}, _builder(calls, (7,)))
    assert calls == [1, 1] and _read(path) == [7]
    newer = RecordSchema("toy", 2, SCHEMA.features)  # a new format version rebuilds too
    cached_records(path, newer, {"data": "b"}, _builder(calls, (8,)))
    assert calls == [1, 1, 1] and _read(path) == [8]


def test_failed_build_leaves_the_old_cache(tmp_path):
    path, calls = str(tmp_path / "c.tf_record"), []
    cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))

    def broken(write):
        write(SCHEMA.serialize({"x": 9}))
        raise RuntimeError("tokenizer failed")

    with pytest.raises(RuntimeError):
        cached_records(path, SCHEMA, {"data": "b"}, broken)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tf_record", "c.tf_record.json"]
    assert cached_records(path, SCHEMA, {"data": "a"}, _builder(calls)).reused and _read(path) == [1, 2, 3]


def test_remote_cache_is_built_reused_and_left_whole(tmp_path):
    """gs:// caches go through tf.io.gfile; TensorFlow's ram:// filesystem stands in for a bucket."""
    import hashlib
    import uuid

    from albert_tf.fileio import file_sha256

    folder, calls = f"ram://cache-{uuid.uuid4().hex}/features", []
    path = f"{folder}/c.tf_record"
    first = cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))
    assert not first.reused and _read(path) == [1, 2, 3]
    assert json.loads(tf.io.gfile.GFile(path + ".json").read())["key"] == first.side["key"]
    assert cached_records(path, SCHEMA, {"data": "a"}, _builder(calls)).reused and calls == [1]

    def broken(write):
        write(SCHEMA.serialize({"x": 9}))
        raise RuntimeError("tokenizer failed")

    with pytest.raises(RuntimeError):
        cached_records(path, SCHEMA, {"data": "b"}, broken)
    assert sorted(tf.io.gfile.listdir(folder)) == ["c.tf_record", "c.tf_record.json"] and _read(path) == [1, 2, 3]
    data = f"{folder}/input.json"
    with tf.io.gfile.GFile(data, "wb") as f:
        f.write(b"x" * 3000000)
    assert file_sha256(data) == hashlib.sha256(b"x" * 3000000).hexdigest()


@pytest.mark.parametrize("damage", ["truncated_records", "garbage_side_file", "side_file_not_an_object"])
def test_a_damaged_cache_is_rebuilt_with_a_warning(tmp_path, damage, caplog):
    path, calls = str(tmp_path / "c.tf_record"), []
    cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))
    if damage == "truncated_records":  # a crash or a full disk while copying it; side file intact
        with open(path, "r+b") as f:
            f.truncate(len(open(path, "rb").read()) - 5)
    else:
        (tmp_path / "c.tf_record.json").write_text("{not json" if damage == "garbage_side_file" else "[1, 2]")
    with caplog.at_level("WARNING"):
        again = cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))
    assert not again.reused and calls == [1, 1] and _read(path) == [1, 2, 3]
    assert any("rebuilding" in r.getMessage() and "c.tf_record" in r.getMessage() for r in caplog.records)
    assert cached_records(path, SCHEMA, {"data": "a"}, _builder(calls)).reused and calls == [1, 1]
