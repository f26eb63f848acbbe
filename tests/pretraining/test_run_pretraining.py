"""run_pretraining.py end to end on real text: loss falls, eval files, exact resume after SIGKILL."""
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data.books import write_book_as_sentences

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ, PRED = 64, 10
TINY = {"vocab_size": 30000, "embedding_size": 32, "hidden_size": 64, "num_hidden_layers": 2,
        "num_hidden_groups": 1, "inner_group_num": 1, "num_attention_heads": 4, "intermediate_size": 128,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": SEQ, "type_vocab_size": 2, "initializer_range": 0.02}


def _python(script, *flags, **kwargs):
    return [sys.executable, os.path.join(REPO, script), *flags]


@pytest.fixture(scope="module")
def data(tmp_path_factory, shared):
    book, sample = shared("data", "corpus", "botchan.txt"), shared("data", "corpus", "sample_text.txt")
    spm = shared("data", "spm", "30k-clean.model")
    folder = tmp_path_factory.mktemp("pretraining")
    book_sentences = write_book_as_sentences(book, folder / "botchan_sentences.txt")
    records = folder / "train.tfrecord"
    done = subprocess.run(_python(
        "create_pretraining_data.py", f"--input_file={sample},{book_sentences}", f"--output_file={records}",
        f"--spm_model_file={spm}", f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}",
        "--dupe_factor=1", "--num_workers=1"), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    config = folder / "albert_config.json"
    config.write_text(json.dumps(TINY))
    return {"records": str(records), "config": str(config)}


def _pretrain_flags(data, output_dir, steps, **extra):
    flags = {"albert_config_file": data["config"], "input_file": data["records"], "output_dir": output_dir,
             "max_seq_length": SEQ, "max_predictions_per_seq": PRED, "train_batch_size": 16,
             "eval_batch_size": 16, "num_train_steps": steps, "num_warmup_steps": 10,
             "learning_rate": 0.005, "save_checkpoints_steps": 50, "iterations_per_loop": 10,
             "log_steps": 10, "seed": 7}
    flags.update(extra)
    return [f"--{k}={v}" for k, v in flags.items()]


def _losses(log: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r"step (\d+)/\d+: loss = ([0-9.]+)", log)}


def test_pretraining_learns_and_evaluates(data, tmp_path):
    out = str(tmp_path / "run")
    done = subprocess.run(_python("run_pretraining.py", *_pretrain_flags(data, out, 200), "--do_eval",
                                  "--max_eval_steps=4"), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    losses = _losses(done.stderr)
    first, last = losses[10], losses[200]
    print(f"loss at step 10: {first:.3f}, at step 200: {last:.3f}")
    assert last < first - 2.0, losses  # the tiny model learns the frequent pieces quickly
    results = dict(line.split(" = ") for line in open(os.path.join(out, "eval_results.txt")).read().splitlines())
    for key in ("loss", "masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy", "sentence_order_loss"):
        assert results[key] == str(np.float32(results[key])), key  # the original's float32 print, not 16 digits
    best = open(os.path.join(out, "best_trial.txt")).read().split(":")[2]
    assert best == str(np.float32(best))
    assert os.path.exists(os.path.join(out, "model.ckpt-best.index"))
    assert tf.train.latest_checkpoint(out).endswith("model.ckpt-200")


def _weights(prefix):
    reader = tf.train.load_checkpoint(prefix)
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith("model/") and "OPTIMIZER_SLOT" not in k}


def test_resume_after_sigkill_is_exact(data, tmp_path):
    steps = 100
    straight = str(tmp_path / "straight")
    done = subprocess.run(_python("run_pretraining.py", *_pretrain_flags(data, straight, steps)),
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]

    killed = str(tmp_path / "killed")
    command = _python("run_pretraining.py", *_pretrain_flags(data, killed, steps))
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    # Killed once the checkpoint state names step 50 (what a restart resumes from; its index
    # file alone appears before the state is written, and a kill in between restarts from 0).
    while not (tf.train.latest_checkpoint(killed) or "").endswith("model.ckpt-50") and time.time() < deadline:
        assert process.poll() is None, "training ended before it could be killed"
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not os.path.exists(os.path.join(killed, "model.ckpt-100.index"))
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Resumed from" in done.stderr
    a, b = _weights(os.path.join(straight, "model.ckpt-100")), _weights(os.path.join(killed, "model.ckpt-100"))
    assert set(a) == set(b) and a
    worst = max(float(np.abs(a[k] - b[k]).max()) for k in a)
    assert worst <= 1e-6, worst


# flags -> the one line that refuses them, before anything is read or written
FLAG_ERRORS = {
    "lr_negative": (["--learning_rate=-0.1"], "--learning_rate must be >= 0, got -0.1"),  # gradient ascent
    "eval_steps_0": (["--do_eval", "--max_eval_steps=0"], "--max_eval_steps must be >= 1, got 0"),  # NaN results
    "eval_steps_negative": (["--do_eval", "--max_eval_steps=-3"], "--max_eval_steps must be >= 1, got -3"),
    # named batch_size_per_replica, num_train_steps, num_warmup_steps (no flag)
    "eval_batch_0": (["--do_eval", "--eval_batch_size=0"], "--eval_batch_size must be >= 1, got 0"),
    "train_batch_0": (["--train_batch_size=0"], "--train_batch_size must be >= 1, got 0"),
    "warmup_negative": (["--num_warmup_steps=-1"], "--num_warmup_steps must be >= 0, got -1"),
    # an eval-only run builds the same loop, which refused these after the records were read, naming its fields
    "eval_only_train_batch_0": (["--nodo_train", "--do_eval", "--train_batch_size=0"],
                                "--train_batch_size must be >= 1, got 0"),
    "eval_only_save_every_0": (["--nodo_train", "--do_eval", "--save_checkpoints_steps=0"],
                               "--save_checkpoints_steps must be >= 1, got 0"),
}


def test_flag_errors_are_one_line_before_any_work(tmp_path, driver_cases):
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps(TINY))
    common = [f"--albert_config_file={config}", f"--input_file={tmp_path / 'none.tfrecord'}"]
    cases = {name: [*common, f"--output_dir={tmp_path / name}", *extra] for name, (extra, _) in FLAG_ERRORS.items()}
    # accepted, as the original, with a warning; stopped by the missing input
    cases["warmup_longer"] = [*common, f"--output_dir={tmp_path / 'w'}", "--num_warmup_steps=10", "--num_train_steps=4"]
    results = driver_cases("run_pretraining", cases)
    assert ("--num_warmup_steps=10 is longer than --num_train_steps=4: the learning rate never reaches "
            "--learning_rate") in results["warmup_longer"]["warnings"]
    assert results["warmup_longer"]["code"] == 1 and not (tmp_path / "w").exists()
    for name, (_, message) in FLAG_ERRORS.items():
        assert results[name]["code"] == 1, (name, results[name])
        assert results[name]["stderr"] == f"run_pretraining.py: error: {message}\n", name
        assert not (tmp_path / name).exists(), name
