"""Pretraining data that cannot be read stops run_pretraining.py with one line naming --input_file
and what is wrong (not a TensorFlow graph traceback); empty input stops it at once (a repeated
dataset of no records would spin forever)."""
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SEQ, PRED = 32, 5
TINY = {"vocab_size": 30000, "embedding_size": 8, "hidden_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 64}


@pytest.fixture(scope="module")
def records(make_pretraining_data):
    return make_pretraining_data("damaged_input", TINY, SEQ, PRED)


def _record_starts(data):
    """Each record's byte offset in TFRecord bytes, and the end: read from the framing here (uint64 length,
    4 bytes of its CRC, the data, 4 bytes of the data's CRC)."""
    import struct

    starts = [0]
    while starts[-1] < len(data):
        starts.append(starts[-1] + 16 + struct.unpack_from("<Q", data, starts[-1])[0])
    assert starts[-1] == len(data)
    return starts


def _truncated_words(data, end):
    """What the one line says of `data` cut to `end` bytes (inside a record's data)."""
    starts = _record_starts(data)
    whole = sum(stop <= end for stop in starts[1:])
    at = starts[whole]
    return (f"truncated: it ends inside record #{whole + 1} (at byte {at}), after {whole} whole records "
            f"({end - at} of the record's {starts[whole + 1] - at} bytes are there); copy it again, or make it "
            f"again with create_pretraining_data.py")


def _pretrain(config, output_dir, input_file, seq=SEQ):
    done = subprocess.run(
        [sys.executable, str(REPO / "run_pretraining.py"), f"--albert_config_file={config}",
         f"--input_file={input_file}", f"--output_dir={output_dir}", f"--max_seq_length={seq}",
         f"--max_predictions_per_seq={PRED}", "--train_batch_size=4", "--num_train_steps=400",
         "--iterations_per_loop=400"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    tail = done.stderr[done.stderr.find("run_pretraining.py: error:"):]
    return done.returncode, tail


def test_unreadable_pretraining_data_is_one_line(records, tmp_path):
    path, config = records
    empty = tmp_path / "empty.tfrecord"
    empty.write_bytes(b"")
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(path.read_bytes()[:3000])  # cut inside the first few records
    copy = tmp_path / "copied.tfrecord"  # no summary beside it: found while reading
    copy.write_bytes(path.read_bytes())
    cases = [
        (empty, SEQ, f"every input file is empty (0 bytes), so there are no records to read: {empty}"),
        (truncated, SEQ, f"--input_file: {truncated}: {_truncated_words(path.read_bytes(), 3000)}"),
        (copy, 2 * SEQ, f"--input_file: {copy}: its records were made with --max_seq_length={SEQ} but this run "
                        f"has --max_seq_length={2 * SEQ}"),  # other --max_seq_length: before any work
        (path, 2 * SEQ, f"{path} was made with --max_seq_length={SEQ} ({path}.summary.json) but this run has "
                        f"--max_seq_length={2 * SEQ}"),  # its summary says so: before any work
    ]
    for input_file, seq, want in cases:
        code, tail = _pretrain(config, tmp_path / f"out_{input_file.stem}_{seq}", input_file, seq)
        assert code == 1 and tail.startswith(f"run_pretraining.py: error: {want}"), (input_file, tail[-2000:])
        assert tail.strip().count("\n") == 0 and "Graph execution" not in tail, tail  # one line
        assert not (tmp_path / f"out_{input_file.stem}_{seq}").exists() or input_file == empty


def test_records_of_other_lengths_in_a_list_name_the_file_before_any_work(records, tmp_path):
    """Files without a summary (the original's tool writes none): the first record of each file is read
    before any work, so records of another --max_seq_length or --max_predictions_per_seq, or a file that is
    no TFRecord (a glob that also matches a summary), are one line naming the file and both lengths; the run
    writes nothing (it failed after building the model, naming neither the file nor what was expected)."""
    path, config = records
    copy = tmp_path / "copied.tfrecord"
    copy.write_bytes(path.read_bytes())
    text = tmp_path / "notes.txt"
    text.write_text("not records\n" * 10)
    folder = tmp_path / "folder"
    folder.mkdir()
    cases = [  # (--input_file, --max_seq_length, --max_predictions_per_seq, expected message)
        (f"{path},{copy}", 2 * SEQ, PRED, None),  # path's summary already says so: checked first
        (f"{copy}", SEQ, PRED + 1,
         f"--input_file: {copy}: its records were made with --max_predictions_per_seq={PRED} but this run has "
         f"--max_predictions_per_seq={PRED + 1}: pass the data's values, or make the data again"),
        (f"{tmp_path}/*.tfrecord,{text}", SEQ, PRED, f"--input_file: {text}: not a readable TFRecord file ("),
        (f"{copy},{folder}", SEQ, PRED, f"--input_file: {folder}: not a readable TFRecord file ("),  # a traceback
    ]
    for index, (input_file, seq, pred, want) in enumerate(cases):
        output_dir = tmp_path / f"out{index}"
        done = subprocess.run(
            [sys.executable, str(REPO / "run_pretraining.py"), f"--albert_config_file={config}",
             f"--input_file={input_file}", f"--output_dir={output_dir}", f"--max_seq_length={seq}",
             f"--max_predictions_per_seq={pred}", "--train_batch_size=4", "--num_train_steps=2"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
        tail = done.stderr[done.stderr.find("run_pretraining.py: error:"):]
        assert done.returncode == 1 and tail.strip().count("\n") == 0, tail[-2000:]
        if want:
            assert tail.startswith(f"run_pretraining.py: error: {want}"), tail
        assert not output_dir.exists()


def _run(config, output_dir, input_file, *flags):
    done = subprocess.run(
        [sys.executable, str(REPO / "run_pretraining.py"), f"--albert_config_file={config}",
         f"--input_file={input_file}", f"--output_dir={output_dir}", f"--max_seq_length={SEQ}",
         f"--max_predictions_per_seq={PRED}", "--train_batch_size=4", "--eval_batch_size=4", *flags],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    return done.returncode, done.stderr[done.stderr.find("run_pretraining.py: error:"):]


def test_a_damaged_file_among_several_is_named_in_training_and_evaluation(records, tmp_path):
    """TensorFlow's read error names no file ("corrupted record at 1940"): with several files the one line
    names the damaged one and its record, in training and in evaluation (which printed TensorFlow's op error),
    and the checkpoints already there are left as they were. A truncated file is found before any work."""
    path, config = records
    data = path.read_bytes()
    corrupt = tmp_path / "corrupt.tfrecord"
    corrupt.write_bytes(data[:2000] + bytes([data[2000] ^ 0xFF]) + data[2001:])  # a flipped byte, same length
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(data[:3000])
    output_dir = tmp_path / "run"
    code, tail = _run(config, output_dir, path, "--num_train_steps=2", "--save_checkpoints_steps=2")
    assert code == 0, tail
    before = {f.name: f.read_bytes() for f in output_dir.iterdir() if f.is_file()}
    starts = _record_starts(data)
    damaged = sum(stop <= 2000 for stop in starts[1:])  # the record holding byte 2000
    words = (f"{corrupt}: damaged: the data of record #{damaged + 1} (at byte {starts[damaged]}) does not match its "
             f"CRC; copy it again, or make it again with create_pretraining_data.py")
    code, tail = _run(config, output_dir, f"{path},{corrupt}", "--num_train_steps=400", "--iterations_per_loop=400")
    assert tail == (f"run_pretraining.py: error: reading --input_file={path},{corrupt} failed after step 2: {words}; "
                    f"a rerun resumes from {output_dir}/model.ckpt-2\n") and code == 1, tail
    code, tail = _run(config, output_dir, f"{corrupt},{path}", "--do_train=false", "--do_eval", "--max_eval_steps=1000")
    assert tail == f"run_pretraining.py: error: reading the eval data failed: {words}\n" and code == 1, tail
    for flags in (["--num_train_steps=400"], ["--do_train=false", "--do_eval"]):
        code, tail = _run(config, output_dir, f"{path},{truncated}", *flags)
        assert tail == f"run_pretraining.py: error: --input_file: {truncated}: {_truncated_words(data, 3000)}\n", tail
        assert code == 1
    assert {f.name: f.read_bytes() for f in output_dir.iterdir() if f.is_file()} == before


@pytest.mark.parametrize("into", [5, 11, 12, 100, -1])
def test_a_file_cut_inside_a_record_is_one_line_before_any_work(records, tmp_path, into):
    """A file of create_pretraining_data.py cut in place (its summary beside it) inside record #8's header
    was read as 7 records, silently (training ended well); cut inside its data it failed at that record
    with TensorFlow's words ("truncated record at 2713' failed with Read less bytes than requested") and
    advice about the lengths. Now one line naming the file, the record and its offset, before any work,
    in training and in evaluation."""
    path, config = records
    folder = tmp_path / "data"
    folder.mkdir()
    cut = folder / path.name
    data = path.read_bytes()
    starts = _record_starts(data)
    end = starts[7] + into if into >= 0 else len(data) + into
    cut.write_bytes(data[:end])
    (folder / f"{path.name}.summary.json").write_text((path.parent / f"{path.name}.summary.json").read_text())
    whole = sum(stop <= end for stop in starts[1:])
    at = starts[whole]
    where = (f"it ends {end - at} bytes into the header of record #{whole + 1} (at byte {at}), after {whole} whole "
             f"records; copy it again, or make it again with create_pretraining_data.py"
             if end - at < 12 else _truncated_words(data, end)[len("truncated: "):])
    for flags in (["--num_train_steps=400"], ["--do_train=false", "--do_eval"]):
        code, tail = _run(config, tmp_path / "out", cut, *flags)
        assert (code, tail) == (1, f"run_pretraining.py: error: --input_file: {cut}: truncated: {where}\n"), tail
        assert not (tmp_path / "out").exists()


def _cut_between_records(data):
    """Where a copy cut between two records ends (the middle record boundary): TensorFlow reads such a file
    as a shorter whole one."""
    starts = _record_starts(data)
    return starts[len(starts) // 2]


def test_a_copy_cut_between_two_records_is_one_line_before_any_work(records, tmp_path):
    """A copy cut exactly between two records read as a shorter whole file: the run trained on fewer records,
    silently. create_pretraining_data.py records each output's size in its summary; a file of another size
    than its summary's (copied beside it) is one line naming both sizes and the summary, before any work."""
    import json

    path, config = records
    data = path.read_bytes()
    summary = json.loads((path.parent / f"{path.name}.summary.json").read_text())
    assert summary["output_sizes"] == [{"bytes": len(data), "records": len(_record_starts(data)) - 1}]
    folder = tmp_path / "data"
    folder.mkdir()
    copy = folder / path.name
    end = _cut_between_records(data)
    copy.write_bytes(data[:end])
    (folder / f"{path.name}.summary.json").write_text(json.dumps(summary))
    code, tail = _run(config, tmp_path / "out", copy, "--num_train_steps=400", "--iterations_per_loop=400")
    assert (code, tail) == (1, f"run_pretraining.py: error: --input_file: {copy} has {end} bytes but "
                               f"{folder}/{path.name}.summary.json records {len(data)} bytes for it (cut short "
                               f"since it was written): copy it again, or make it again with "
                               f"create_pretraining_data.py\n"), tail
    assert not (tmp_path / "out").exists()


def test_file_sizes_are_checked_against_summaries_local_and_remote(records, tmp_path):
    """The size check (one stat a file) also for gs:// files, through tf.io.gfile (TensorFlow's ram:// file
    system stands in for a bucket); summaries written before sizes were recorded, and files without a
    summary (the original's tool writes none), are accepted as before."""
    import json
    import uuid

    import tensorflow as tf

    from albert_tf.vocab_check import check_pretraining_data

    path, _ = records
    data = path.read_bytes()
    summary = json.loads((path.parent / f"{path.name}.summary.json").read_text())
    end = _cut_between_records(data)
    root = f"ram://sizes-{uuid.uuid4().hex}"
    remote = f"{root}/{path.name}"
    with tf.io.gfile.GFile(remote, "wb") as f:
        f.write(data[:end])
    remote_summary = {**summary, "output_files": [remote], "output_paths_from_summary": [remote]}  # as Beam's
    with tf.io.gfile.GFile(f"{remote}.summary.json", "w") as f:
        f.write(json.dumps(remote_summary))
    with pytest.raises(ValueError) as err:
        check_pretraining_data([remote], TINY["vocab_size"], "albert_config.json")
    assert str(err.value) == (f"--input_file: {remote} has {end} bytes but {remote}.summary.json records "
                              f"{len(data)} bytes for it (cut short since it was written): copy it again, or "
                              f"make it again with create_pretraining_data.py")
    tf.io.gfile.remove(remote)  # (ram:// appends to a file written again)
    with tf.io.gfile.GFile(remote, "wb") as f:
        f.write(data)
    check_pretraining_data([remote], TINY["vocab_size"], "albert_config.json")  # whole again: accepted

    folder = tmp_path / "data"
    folder.mkdir()
    copy = folder / path.name
    copy.write_bytes(data[:end])
    check_pretraining_data([str(copy)], TINY["vocab_size"], "albert_config.json")  # no summary: as before
    older = {key: value for key, value in summary.items() if key != "output_sizes"}
    (folder / f"{path.name}.summary.json").write_text(json.dumps(older))
    check_pretraining_data([str(copy)], TINY["vocab_size"], "albert_config.json")  # a summary without sizes
    (folder / f"{path.name}.summary.json").write_text(json.dumps(summary))
    with pytest.raises(ValueError, match=f"^--input_file: {copy} has {end} bytes but "):
        check_pretraining_data([str(copy)], TINY["vocab_size"], "albert_config.json")


def test_a_glob_over_the_records_skips_what_the_data_tool_writes_beside_them(records, tmp_path):
    """`--input_file=train.tfrecord*` (the shards train.tfrecord-0000i-of-0000N) also matches
    train.tfrecord.summary.json, which the original's tool never wrote: it was read as records and the
    run stopped. The tool's summary, lock and part files are left out of a glob (a name given as such is
    still refused)."""
    path, config = records
    assert (path.parent / f"{path.name}.summary.json").exists()
    code, tail = _run(config, tmp_path / "run", f"{path}*", "--num_train_steps=2")
    assert code == 0, tail
    assert (tmp_path / "run" / "model.ckpt-2.index").exists()

    from albert_tf.pretraining import pretraining_files

    shards = [tmp_path / f"train.tfrecord-0000{i}-of-00002" for i in range(2)]
    beside = [tmp_path / name for name in ("train.tfrecord.summary.json", "train.tfrecord.lock",
                                           "train.tfrecord-00001-of-00002.tmp-" + "0" * 32 + ".part")]
    for file in shards + beside:
        file.write_bytes(b"")
    assert pretraining_files(f"{tmp_path}/train.tfrecord*") == [str(f) for f in shards]
    assert pretraining_files(f"{shards[1]},{beside[0]}") == [str(shards[1]), str(beside[0])]  # named: kept
    with pytest.raises(ValueError, match="matches only what create_pretraining_data.py writes beside"):
        pretraining_files(f"{tmp_path}/*.json")


def test_naming_the_damaged_file_stops_at_its_time_limit(records, tmp_path, monkeypatch):
    """The search for the damaged file reads the data again after the run failed; on a large corpus it gives up
    at its time limit with TensorFlow's own words (and a warning) instead of keeping the user waiting."""
    import tensorflow as tf

    from albert_tf import pretraining

    path, _ = records
    data = path.read_bytes()
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(data[:3000])
    error = tf.errors.DataLossError(None, None, "truncated record at 2990")
    files = [str(path), str(truncated)]
    assert pretraining.locate_unreadable_file(files, error, SEQ, PRED) == f"{truncated}: {_truncated_words(data, 3000)}"
    warned = []
    monkeypatch.setattr("absl.logging.warning", lambda *args: warned.append(args[0] % args[1:]))
    assert pretraining.locate_unreadable_file(files, error, SEQ, PRED, seconds=0.0) == (
        "truncated record at 2990: a file is truncated or damaged; copy it again, or make it again with "
        "create_pretraining_data.py")
    assert warned == ["Stopped looking for the damaged input file after 0 s"]


def test_a_damaged_first_record_is_named_without_reading_the_rest(records, tmp_path):
    """The check of each file's first record before any work: a first record whose data does not match its CRC
    was "not a readable TFRecord file (corrupted record at 0)", after streaming the whole file for its framing
    alone (and a file also cut at its end was called truncated there, far from the fault). Now record #1 is
    named, as a damaged record is elsewhere, and the rest of the file is not read."""
    from albert_tf.pretraining import check_first_records

    path, _ = records
    data = path.read_bytes()
    flipped = data[:20] + bytes([data[20] ^ 0xFF]) + data[21:]  # inside record #1's data (it starts at byte 12)
    assert _record_starts(data)[1] > 21
    damaged = (f"damaged: the data of record #1 (at byte 0) does not match its CRC; copy it again, or make it "
               f"again with create_pretraining_data.py")
    for name, content in (("flipped.tfrecord", flipped), ("flipped_and_cut.tfrecord", flipped + data[:40])):
        bad = tmp_path / name
        bad.write_bytes(content)
        with pytest.raises(ValueError) as err:
            check_first_records([str(path), str(bad)], SEQ, PRED)
        assert str(err.value) == f"--input_file: {bad}: {damaged}"
