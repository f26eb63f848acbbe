"""The one feature cache: reused while the settings hold, rebuilt when they or the format change,
nothing half-written when a build fails."""
import json

import pytest
import tensorflow as tf

from albert_tf.data.feature_cache import FeatureCacheError, cached_records, check_distinct_caches
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


def test_truncated_records_of_a_cache_are_rebuilt_with_a_warning(tmp_path, caplog):
    path, calls = str(tmp_path / "c.tf_record"), []
    cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))
    with open(path, "r+b") as f:  # a crash or a full disk while copying it; side file intact
        f.truncate(len(open(path, "rb").read()) - 5)
    with caplog.at_level("WARNING"):
        again = cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))
    assert not again.reused and calls == [1, 1] and _read(path) == [1, 2, 3]
    assert any("rebuilding" in r.getMessage() and "c.tf_record" in r.getMessage() for r in caplog.records)
    assert cached_records(path, SCHEMA, {"data": "a"}, _builder(calls)).reused and calls == [1, 1]


THEIRS = {  # (record file bytes or None, side file bytes or None): files at a cache's paths it did not write
    "records_without_side_file": (b"the original's train.tf_record", None),
    "original_pickle_as_side_file": (b"the original's eval.tf_record", b"\x80\x04\x95pickled features"),
    "side_file_not_an_object": (None, b"[1, 2]"),
    "side_file_without_a_key": (b"records", b'{"version": "v1.1", "data": []}'),  # a SQuAD file, say
}


@pytest.mark.parametrize("kind", sorted(THEIRS))
def test_files_the_cache_did_not_write_are_refused_and_left_as_they_are(tmp_path, kind):
    """Never overwritten: the original's feature files passed to the same flags, a data file named as a
    side file.  One line naming the files; a new cache elsewhere works."""
    record, side = THEIRS[kind]
    path, calls = tmp_path / "c.tf_record", []
    for file, content in ((path, record), (tmp_path / "c.tf_record.json", side)):
        if content is not None:
            file.write_bytes(content)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(FeatureCacheError) as err:
        cached_records(str(path), SCHEMA, {"data": "a"}, _builder(calls))
    message = str(err.value)
    assert "\n" not in message and "not overwriting" in message and str(path) in message
    assert calls == [] and {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_a_kill_between_side_file_and_records_rebuilds(tmp_path, monkeypatch):
    """The side file is written before the records are renamed into place: a kill in between leaves
    the new side file beside the old records, which the next run rebuilds rather than refuses."""
    import albert_tf.data.feature_cache as feature_cache

    path, calls = str(tmp_path / "c.tf_record"), []
    cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))

    def write_then_die(target, text):
        write(target, text)
        raise KeyboardInterrupt  # stands in for the kill: nothing after the side file runs

    write = feature_cache.atomic_write_text
    monkeypatch.setattr(feature_cache, "atomic_write_text", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        cached_records(path, SCHEMA, {"data": "b"}, _builder(calls, (7, 8, 9, 10)))
    monkeypatch.undo()
    assert _read(path) == [1, 2, 3]  # the old records, the new side file
    again = cached_records(path, SCHEMA, {"data": "b"}, _builder(calls, (7, 8, 9, 10)))
    assert not again.reused and _read(path) == [7, 8, 9, 10] and calls == [1, 1, 1]


def test_two_splits_cannot_share_a_feature_file(tmp_path):
    """By any spelling of the path, a record file or a side file (SQuAD's --predict_feature_left_file)."""
    a, b = str(tmp_path / "a.tf_record"), str(tmp_path / "b.tf_record")
    check_distinct_caches({"--train_feature_file": a, "--predict_feature_file": b})
    with pytest.raises(ValueError, match="--train_feature_file and --predict_feature_file are the same file"):
        check_distinct_caches({"--train_feature_file": a, "--predict_feature_file": str(tmp_path / "." / "a.tf_record")})
    with pytest.raises(ValueError, match="--train_feature_file's side file and --predict_feature_file's side file"):
        check_distinct_caches({"--train_feature_file": a, "--predict_feature_file": b},
                              {"--predict_feature_file": a + ".json"})


def test_a_build_starts_with_a_line_naming_what_it_converts(tmp_path, caplog):
    """Converting a large split printed nothing until it ended (a minute for MNLI): a start line now."""
    path, calls = str(tmp_path / "c.tf_record"), []
    with caplog.at_level("INFO"), caplog.at_level("INFO", logger="absl"):
        cached_records(path, SCHEMA, {"data": "a"}, _builder(calls), source="train.tsv (mrpc train)")
        assert f"Converting train.tsv (mrpc train) to features: {path}" in caplog.messages
        caplog.clear()
        assert cached_records(path, SCHEMA, {"data": "a"}, _builder(calls), source="train.tsv").reused
    assert not any(message.startswith("Converting") for message in caplog.messages)  # nothing to convert
