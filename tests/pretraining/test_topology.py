"""One-device semantics on every topology, with real pretraining: tiny ALBERT, dropout 0.1, LAMB.

One device, MirroredStrategy over 2 logical CPUs, MultiWorkerMirroredStrategy with 2 local
processes and --gradient_accumulation_steps=2 must give the same logged losses, the same
eval results and the same weights after 12 steps (<= 1e-5), and each run's log (and input
positions) must show the topology it ran on; a run checkpointed under 2 replicas must continue
on 1 device (and the other way round) to the weights of the same two-leg run on one device.
"""
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training.distribution import make_tf_config

REPO = pathlib.Path(__file__).resolve().parents[2]
SEQ, PRED, STEPS = 32, 5, 12
TINY = {"vocab_size": 30000, "embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
        "num_hidden_groups": 1, "inner_group_num": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": SEQ, "type_vocab_size": 2, "initializer_range": 0.02}


@pytest.fixture(scope="module")
def data(make_pretraining_data):
    records, config = make_pretraining_data("topology", TINY, SEQ, PRED, dupe_factor=3)
    return {"records": str(records), "config": str(config)}


def _command(data, output_dir, *extra, steps=STEPS, evaluate=True):
    flags = {"albert_config_file": data["config"], "input_file": data["records"], "output_dir": output_dir,
             "max_seq_length": SEQ, "max_predictions_per_seq": PRED, "train_batch_size": 8,
             "eval_batch_size": 8, "num_train_steps": steps, "num_warmup_steps": 2, "learning_rate": 0.01,
             "save_checkpoints_steps": 6, "iterations_per_loop": 3, "log_steps": 1, "seed": 11,
             "max_eval_steps": 3}
    return [sys.executable, str(REPO / "run_pretraining.py"), *[f"--{k}={v}" for k, v in flags.items()],
            f"--do_eval={evaluate}", *extra]


def _run(command, env=None):
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_two_workers(command) -> list[str]:
    addresses = [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]
    processes = [subprocess.Popen(command + ["--distribution_strategy=multi_worker_mirrored"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                  env={**os.environ, "TF_CONFIG": make_tf_config(addresses, index)})
                 for index in range(2)]
    logs = []
    for process in processes:
        _, err = process.communicate(timeout=600)
        assert process.returncode == 0, err[-3000:]
        logs.append(err)
    return logs


def _topology_line(workers: int, replicas: int, micro_batches: int) -> str:
    return (f"Topology: {workers} worker(s), {replicas} replica(s) in sync, {micro_batches} micro-batch(es) "
            f"per replica per step")


def _saved_topology(output_dir, worker: int) -> list[int]:
    """[workers, local replicas, global batch] of worker `worker`'s input position at the last step."""
    from albert_tf.training.checkpoint_policy import TOPOLOGY_KEY, input_state_prefix

    prefix = input_state_prefix(os.path.join(output_dir, f"model.ckpt-{STEPS}"), worker)
    return tf.train.load_variable(prefix, TOPOLOGY_KEY).tolist()


def _weights(output_dir):
    reader = tf.train.load_checkpoint(os.path.join(output_dir, f"model.ckpt-{STEPS}"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith("model/") and "OPTIMIZER_SLOT" not in k}


def _losses(output_dir):
    """{step: loss} from the run's TensorBoard events (float32, as logged)."""
    losses = {}
    for path in sorted(pathlib.Path(output_dir).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == "loss":
                    losses[event.step] = float(tf.make_ndarray(value.tensor))
    return losses


def _eval_results(output_dir):
    lines = pathlib.Path(output_dir, "eval_results.txt").read_text().splitlines()
    return [float(v) for line in lines for k, v in [line.split(" = ")]
            if k in ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy", "sentence_order_loss")]


@pytest.fixture(scope="module")
def one_device(data, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("one_device"))
    done = _run(_command(data, out))
    assert _topology_line(1, 1, 1) in done.stderr and _saved_topology(out, 0) == [1, 1, 8]
    return {"dir": out, "weights": _weights(out), "losses": _losses(out), "eval": _eval_results(out)}


def _assert_same_run(out, reference):
    got = _weights(out)
    assert set(got) == set(reference["weights"]) and got
    worst = max(float(np.abs(got[k] - reference["weights"][k]).max()) for k in got)
    assert worst <= 1e-5, worst
    # The weights moved: a run that trained nothing would not pass this by accident.
    losses = _losses(out)
    assert sorted(losses) == list(range(1, STEPS + 1))
    np.testing.assert_allclose([losses[s] for s in sorted(losses)],
                               [reference["losses"][s] for s in sorted(losses)], rtol=0, atol=1e-5)
    np.testing.assert_allclose(_eval_results(out), reference["eval"], rtol=0, atol=1e-5)


def test_reference_run_trains_with_dropout(one_device, data, tmp_path):
    """Dropout is live in the reference: the same run (seed, initial weights, data order) with
    dropout 0 ends elsewhere, so the other topologies' agreement includes their dropout masks."""
    losses = one_device["losses"]
    assert losses[STEPS] < losses[1]
    config = tmp_path / "no_dropout.json"
    config.write_text(json.dumps({**TINY, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}))
    out = str(tmp_path / "no_dropout")
    _run(_command({**data, "config": str(config)}, out, evaluate=False))
    other = _weights(out)
    assert set(other) == set(one_device["weights"])
    worst = max(float(np.abs(other[k] - one_device["weights"][k]).max()) for k in other)
    assert worst > 1e-3, worst


def test_mirrored_two_replicas(one_device, data, tmp_path):
    out = str(tmp_path / "mirrored")
    done = _run(_command(data, out, "--distribution_strategy=mirrored", "--num_gpus=2"))
    assert "2 logical CPU devices" in done.stderr
    assert _topology_line(1, 2, 1) in done.stderr and _saved_topology(out, 0) == [1, 2, 8]
    _assert_same_run(out, one_device)


def test_gradient_accumulation(one_device, data, tmp_path):
    out = str(tmp_path / "accumulation")
    done = _run(_command(data, out, "--gradient_accumulation_steps=2"))
    assert _topology_line(1, 1, 2) in done.stderr
    _assert_same_run(out, one_device)


def test_multi_worker_two_processes(one_device, data, tmp_path):
    out = str(tmp_path / "multi_worker")
    logs = _run_two_workers(_command(data, out))
    assert all(_topology_line(2, 2, 1) in log for log in logs)
    assert _saved_topology(out, 0) == _saved_topology(out, 1) == [2, 1, 8]
    _assert_same_run(out, one_device)


@pytest.fixture(scope="module")
def one_device_in_two_legs(data, tmp_path_factory):
    """6 steps, then the same command with num_train_steps 12 (the schedule changes between the
    legs, so the switch runs below are compared with this, not with the 12-step run)."""
    out = str(tmp_path_factory.mktemp("two_legs"))
    _run(_command(data, out, steps=6, evaluate=False))
    done = _run(_command(data, out, evaluate=False))
    assert "fast-forwarding" not in done.stderr  # same topology: the saved input position is restored
    return _weights(out)


@pytest.mark.parametrize("first,second", [
    (["--distribution_strategy=mirrored", "--num_gpus=2"], []),
    ([], ["--distribution_strategy=mirrored", "--num_gpus=2", "--gradient_accumulation_steps=2"]),
], ids=["2_replicas_then_1", "1_then_2_replicas"])
def test_resume_on_another_topology(one_device_in_two_legs, data, tmp_path, first, second):
    out = str(tmp_path / "switch")
    _run(_command(data, out, *first, steps=6, evaluate=False))
    done = _run(_command(data, out, *second, evaluate=False))
    assert "fast-forwarding the input by 6 global batches" in done.stderr
    got = _weights(out)
    worst = max(float(np.abs(got[k] - one_device_in_two_legs[k]).max()) for k in got)
    assert worst <= 1e-5, worst


def test_resume_with_other_training_files_fast_forwards(data, tmp_path):
    """The input position is saved with the training files' names: resumed with other files (here one
    more: restoring the old position failed on the new file count) the stream is fast-forwarded."""
    out = str(tmp_path / "more_files")
    _run(_command(data, out, steps=6, evaluate=False))
    more = tmp_path / "more.tfrecord"
    more.write_bytes(pathlib.Path(data["records"]).read_bytes())
    done = _run([*_command(data, out, evaluate=False), f"--input_file={data['records']},{more}"])
    assert "its input position is in other training files than this run's: fast-forwarding the input by 6 " \
           "global batches" in done.stderr
    assert "Resumed from" in done.stderr and os.path.exists(os.path.join(out, "model.ckpt-12.index"))
