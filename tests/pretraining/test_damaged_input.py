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
        (truncated, SEQ, f"reading --input_file={truncated} failed after step 0: truncated record at "),
        (copy, 2 * SEQ, f"reading --input_file={copy} failed after step 0: Key: "),  # other --max_seq_length
        (path, 2 * SEQ, f"{path} was made with --max_seq_length={SEQ} ({path}.summary.json) but this run has "
                        f"--max_seq_length={2 * SEQ}"),  # its summary says so: before any work
    ]
    for input_file, seq, want in cases:
        code, tail = _pretrain(config, tmp_path / f"out_{input_file.stem}_{seq}", input_file, seq)
        assert code == 1 and tail.startswith(f"run_pretraining.py: error: {want}"), (input_file, tail[-2000:])
        assert tail.strip().count("\n") == 0 and "Graph execution" not in tail, tail  # one line
        assert "no checkpoint was written yet" in tail or input_file in (empty, path)
