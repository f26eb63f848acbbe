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
        (truncated, SEQ, f"reading --input_file={truncated} failed after step 0: {truncated}: truncated record at "),
        (copy, 2 * SEQ, f"--input_file: {copy}: its records were made with --max_seq_length={SEQ} but this run "
                        f"has --max_seq_length={2 * SEQ}"),  # other --max_seq_length: before any work
        (path, 2 * SEQ, f"{path} was made with --max_seq_length={SEQ} ({path}.summary.json) but this run has "
                        f"--max_seq_length={2 * SEQ}"),  # its summary says so: before any work
    ]
    for input_file, seq, want in cases:
        code, tail = _pretrain(config, tmp_path / f"out_{input_file.stem}_{seq}", input_file, seq)
        assert code == 1 and tail.startswith(f"run_pretraining.py: error: {want}"), (input_file, tail[-2000:])
        assert tail.strip().count("\n") == 0 and "Graph execution" not in tail, tail  # one line
        assert "no checkpoint was written yet" in tail or input_file in (empty, path, copy)


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
    """TensorFlow's read error names no file ("corrupted record at 2000"): with several files the one line
    names the damaged one, in training and in evaluation (which printed TensorFlow's op error), and the
    checkpoints already there are left as they were."""
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
    for bad, words in ((corrupt, "corrupted record at "), (truncated, "truncated record at ")):
        code, tail = _run(config, output_dir, f"{path},{bad}", "--num_train_steps=400", "--iterations_per_loop=400")
        assert code == 1 and tail.startswith(
            f"run_pretraining.py: error: reading --input_file={path},{bad} failed after step 2: {bad}: {words}"), tail
        assert tail.strip().count("\n") == 0 and tail.strip().endswith(f"a rerun resumes from {output_dir}/model.ckpt-2")
        code, tail = _run(config, output_dir, f"{bad},{path}", "--do_train=false", "--do_eval", "--max_eval_steps=1000")
        assert code == 1 and tail.startswith(f"run_pretraining.py: error: reading the eval data failed: {bad}: {words}"), tail
        assert tail.strip().count("\n") == 0
        assert {f.name: f.read_bytes() for f in output_dir.iterdir() if f.is_file()} == before


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
    assert pretraining.locate_unreadable_file(files, error, SEQ, PRED).startswith(f"{truncated}: truncated record")
    warned = []
    monkeypatch.setattr("absl.logging.warning", lambda *args: warned.append(args[0] % args[1:]))
    assert pretraining.locate_unreadable_file(files, error, SEQ, PRED, seconds=0.0) == "truncated record at 2990"
    assert warned == ["Stopped looking for the damaged input file after 0 s"]
