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


# Another run (another process) asking for the cache at a path: prints its error's one line and exits 3 when refused.
_OTHER_RUN = """
import sys
from albert_tf.data.feature_cache import cached_records
from albert_tf.data.records import RecordSchema
from albert_tf.errors import RunError
SCHEMA = RecordSchema("toy", 1, (("x", "int64", None),))
def build(write):
    for v in (4, 5, 6):
        write(SCHEMA.serialize({"x": v}))
    return {"num_examples": 3}
try:
    print("reused" if cached_records(sys.argv[1], SCHEMA, {"data": sys.argv[2]}, build).reused else "built")
except RunError as e:
    print(e)
    sys.exit(3)
"""


def _other_run(path, data):
    import os
    import pathlib
    import subprocess
    import sys

    repo = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(repo), TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, "-c", _OTHER_RUN, path, data], capture_output=True, text=True,
                          env=env, timeout=120)


def _refused(other, path):
    """``other`` stopped with one line naming the cache and this process as the holder."""
    import os

    assert other.returncode == 3, (other.stdout, other.stderr[-2000:])
    line = other.stdout.strip()
    assert "\n" not in line and f"the feature cache {path} is in use by another run" in line, line
    assert f"pid {os.getpid()}," in line, line


def test_two_builds_of_one_cache_at_once_do_not_mix(tmp_path, monkeypatch):
    """Two runs building one cache path (two SQuAD runs sharing --train_feature_file with other lengths):
    another run's whole build between this one's side file and its records' rename left this run's records
    beside the other run's side file, which the next run with the other settings reused (records made from
    settings that were not its own).  Now the other run stops with one line naming the cache and the holder."""
    import albert_tf.data.feature_cache as feature_cache

    path, calls, others = str(tmp_path / "c.tf_record"), [], []

    def side_then_other_run(target, text):
        write(target, text)
        others.append(_other_run(path, "b"))  # deterministic: between our side file and our records' rename

    write = feature_cache.atomic_write_text
    monkeypatch.setattr(feature_cache, "atomic_write_text", side_then_other_run)
    mine = cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))
    monkeypatch.undo()
    side = json.loads((tmp_path / "c.tf_record.json").read_text())
    assert (side["settings"], _read(path)) == ({"data": "a"}, [1, 2, 3])  # one run's records and side file
    assert side["key"] == mine.side["key"]
    _refused(others[0], path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tf_record", "c.tf_record.json"]  # lock released
    theirs = cached_records(path, SCHEMA, {"data": "b"}, _builder(calls, (4, 5, 6)))
    assert not theirs.reused and _read(path) == [4, 5, 6]


@pytest.mark.parametrize("data", ["other settings", "same settings"])
def test_a_run_holds_its_cache_until_it_ends(tmp_path, data):
    """A run reads its records long after building them (every epoch; prediction after training, paired with
    the side file's feature metadata it holds in memory): another run with other settings replaced them
    meanwhile, and one with the same settings read them unlocked (a third run could replace them under it).
    Now both stop with one line while this run lasts, and run once it has ended."""
    from albert_tf.run_lock import output_dir_lock

    path = str(tmp_path / "shared" / "c.tf_record")
    other = "a" if data == "same settings" else "b"
    with output_dir_lock(str(tmp_path / "out")):
        cached_records(path, SCHEMA, {"data": "a"}, _builder([]))
        assert cached_records(path, SCHEMA, {"data": "a"}, _builder([])).reused  # this run's own lock is shared
        _refused(_other_run(path, other), path)
        assert _read(path) == [1, 2, 3]
    assert not (tmp_path / "shared" / "c.tf_record.lock").exists()
    after = _other_run(path, other)
    assert after.returncode == 0 and after.stdout.strip() == ("reused" if other == "a" else "built"), after.stderr
    assert _read(path) == ([1, 2, 3] if other == "a" else [4, 5, 6])


def test_a_finished_cache_in_a_folder_that_cannot_be_locked_is_read(tmp_path, monkeypatch):
    """A cache in a folder this user may only read (a shared, prepared one) was reused before the lock; it
    still is, with a warning. One that would have to be built there stops with the error, as before."""
    import errno
    import os

    import albert_tf.data.feature_cache as feature_cache

    path = str(tmp_path / "c.tf_record")
    cached_records(path, SCHEMA, {"data": "a"}, _builder([]))
    open_ = os.open

    def read_only(file, flags, *args, **kwargs):
        if str(file).startswith(path) and flags & os.O_CREAT:
            raise PermissionError(errno.EACCES, "Permission denied", file)
        return open_(file, flags, *args, **kwargs)

    warnings = []
    monkeypatch.setattr(os, "open", read_only)
    monkeypatch.setattr(feature_cache.logging, "warning", lambda *a: warnings.append(a[0] % a[1:]))
    assert cached_records(path, SCHEMA, {"data": "a"}, _builder([])).reused and _read(path) == [1, 2, 3]
    assert any("Cannot lock the feature cache" in w and path in w for w in warnings), warnings
    with pytest.raises(PermissionError):
        cached_records(path, SCHEMA, {"data": "b"}, _builder([]))


@pytest.mark.parametrize("in_run", [False, True])
@pytest.mark.parametrize("outcome", ["build fails", "lock refused"])
def test_a_failed_or_refused_run_leaves_no_folder_it_made_for_the_cache(tmp_path, monkeypatch, in_run, outcome):
    """--train_feature_file=<new folders>/train.tf_record: a run whose build failed (a bad data file, Ctrl-C) or
    that was refused by the cache's lock left the folders it had made for the cache behind, empty. Now they go
    (once the lock is released: at the run's end for a run's caches); folders that were there stay."""
    import contextlib

    import albert_tf.data.feature_cache as feature_cache
    from albert_tf.run_lock import RunLockedError, output_dir_lock

    (tmp_path / "there").mkdir()
    path = str(tmp_path / "there" / "new" / "sub" / "c.tf_record")

    def broken(write):
        write(SCHEMA.serialize({"x": 9}))
        raise RuntimeError("tokenizer failed")

    def refused(*args):
        raise RunLockedError("the feature cache is in use by another run")

    if outcome == "lock refused":  # another run took the folder's lock between our making it and our look
        monkeypatch.setattr(feature_cache, "_take_lock", refused)
    run = output_dir_lock(str(tmp_path / "there" / "out")) if in_run else contextlib.nullcontext()
    with pytest.raises(RuntimeError if outcome == "build fails" else RunLockedError):
        with run:
            cached_records(path, SCHEMA, {"data": "a"}, broken)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["there"]
    monkeypatch.undo()
    built = cached_records(path, SCHEMA, {"data": "a"}, _builder([]))  # a good run still makes them
    assert not built.reused and _read(path) == [1, 2, 3]


def test_a_full_disk_while_building_names_the_cache_not_its_temporary(tmp_path, monkeypatch):
    """TensorFlow's record writer names the file it writes: on a full disk the one line named the temporary
    ('<cache>.tmp-q1g8ap2q.tmp; No space left on device', as a tmpfs showed), a file already removed. It names the
    cache now; the finished cache of other settings is left whole."""
    path, calls = str(tmp_path / "c.tf_record"), []
    cached_records(path, SCHEMA, {"data": "a"}, _builder(calls))
    real_writer = tf.io.TFRecordWriter

    class FullDisk(real_writer):
        def write(self, record):
            raise tf.errors.ResourceExhaustedError(None, None, f"{self.path}; No space left on device")

        def __init__(self, path, options=None):
            super().__init__(path, options)
            self.path = path

    monkeypatch.setattr(tf.io, "TFRecordWriter", FullDisk)
    with pytest.raises(tf.errors.ResourceExhaustedError) as err:
        cached_records(path, SCHEMA, {"data": "b"}, _builder(calls))
    monkeypatch.undo()
    assert err.value.message == f"{path}; No space left on device"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.tf_record", "c.tf_record.json"]
    assert cached_records(path, SCHEMA, {"data": "a"}, _builder(calls)).reused and _read(path) == [1, 2, 3]


def test_a_cache_folder_that_cannot_be_made_leaves_no_parent_it_made(tmp_path):
    """--train_feature_file=there/new/<a name too long>/train.tf_record: making the folders failed after
    ``there/new`` was made (as an inode quota would), which stayed, empty."""
    import errno

    (tmp_path / "there").mkdir()
    path = str(tmp_path / "there" / "new" / ("x" * 300) / "c.tf_record")
    with pytest.raises(OSError) as err:
        cached_records(path, SCHEMA, {"data": "a"}, _builder([]))
    assert err.value.errno == errno.ENAMETOOLONG
    assert list((tmp_path / "there").iterdir()) == []
