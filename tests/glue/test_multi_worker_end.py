"""A two-worker fine-tuning job that succeeds ends without error records: the chief predicting alone for a
while (worker 1 has finished training) and worker 1 slow to exit (a slow teardown) used to leave TensorFlow's
coordination-service errors on one side, "The following tasks are unhealthy" on the chief or "Failed to send
RPC to coordination service" on worker 1, under the common TF_CPP_MIN_LOG_LEVEL=2."""
import json
import os
import pathlib
import socket
import subprocess
import sys

from albert_tf.training.distribution import make_tf_config

from .conftest import TINY_CONFIG

REPO = pathlib.Path(__file__).resolve().parents[2]
# The chief's prediction is paused longer than the coordination service's heartbeat timeout (10 s), and worker
# 1 lingers after its main returned longer than the heartbeat interval: each exposed one of the two errors.
_WORKER = r"""
import os, runpy, sys, time
import albert_tf.drivers  # the drivers' quiet start, before TensorFlow is imported
from albert_tf.finetuning import runner
predict = runner._Runner.predict
def slow_predict(self, *args, **kwargs):
    time.sleep(float(os.environ["PAUSE_BEFORE_PREDICT"]))
    return predict(self, *args, **kwargs)
runner._Runner.predict = slow_predict
sys.argv = sys.argv[1:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    time.sleep(float(os.environ["LINGER_AFTER_MAIN"]))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_two_worker_job_ends_without_coordination_errors(glue_slices, spm_model, tmp_path):
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    out = tmp_path / "out"
    command = [sys.executable, "-c", _WORKER, str(REPO / "run_classifier.py"), "--task_name=mrpc",
               f"--data_dir={glue_slices}", f"--albert_config_file={config}", f"--spm_model_file={spm_model}",
               f"--output_dir={out}", "--do_train", "--do_predict", "--max_seq_length=32", "--train_batch_size=8",
               "--predict_batch_size=8", "--train_step=2", "--save_checkpoints_steps=2",
               "--distribution_strategy=multi_worker_mirrored"]
    addresses = [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
                                     "TF_CONFIG": make_tf_config(addresses, index),
                                     "PAUSE_BEFORE_PREDICT": "25", "LINGER_AFTER_MAIN": "0" if index == 0 else "8"})
               for index in range(2)]
    logs = [worker.communicate(timeout=400) for worker in workers]
    for index, (worker, (stdout, stderr)) in enumerate(zip(workers, logs)):
        assert worker.returncode == 0, stderr[-3000:]
        errors = [line for line in stderr.splitlines() if line.startswith("E") and "cuInit" not in line]
        assert errors == [], (index, errors)
    assert "run_classifier.py: done" in logs[0][0] and (out / "test_results.tsv").exists()


def test_an_evaluation_and_prediction_only_two_worker_job_ends(glue_slices, spm_model, tmp_path):
    """Without --do_train the chief evaluates and predicts alone while worker 1 waits for the job's end: the
    chief's model was made in the strategy's scope, a collective worker 1 never joined, and the job hung."""
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps(TINY_CONFIG))
    out = tmp_path / "out"
    command = [sys.executable, str(REPO / "run_classifier.py"), "--task_name=mrpc", f"--data_dir={glue_slices}",
               f"--albert_config_file={config}", f"--spm_model_file={spm_model}", f"--output_dir={out}",
               "--max_seq_length=32", "--train_batch_size=8", "--eval_batch_size=8", "--predict_batch_size=8"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2"}
    trained = subprocess.run(command + ["--do_train", "--train_step=1", "--save_checkpoints_steps=1"], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=300)
    assert trained.returncode == 0, trained.stderr[-3000:]
    addresses = [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]
    workers = [subprocess.Popen(command + ["--nodo_train", "--do_eval", "--do_predict",
                                           "--distribution_strategy=multi_worker_mirrored"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                env={**env, "TF_CONFIG": make_tf_config(addresses, index)})
               for index in range(2)]
    try:
        logs = [worker.communicate(timeout=300) for worker in workers]  # the old code never ended
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.communicate()
    for worker, (_, stderr) in zip(workers, logs):
        assert worker.returncode == 0, stderr[-3000:]
    assert "eval_accuracy" in (out / "eval_results.txt").read_text()
    assert len((out / "test_results.tsv").read_text().splitlines()) == 12  # MRPC's 12 test rows: one line each
