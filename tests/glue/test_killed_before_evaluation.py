"""run_classifier killed (SIGKILL) between saving a checkpoint and evaluating it: the rerun of the same command
evaluates that checkpoint first, then trains on, and ends with the uninterrupted run's weights and results.
(Its first evaluation made the model's weights outside the strategy's scope, and training then stopped with
"`colocate_vars_with` must only be passed a variable created in this tf.distribute.Strategy.scope()".)"""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import tensorflow as tf

from .conftest import TINY_CONFIG

REPO = pathlib.Path(__file__).resolve().parents[2]
# The kill: right after checkpoint 2 is written, before its evaluation (a preemption's SIGKILL, an OOM kill).
_KILLED_AFTER_SAVE_2 = r"""
import os, runpy, signal, sys
import albert_tf.drivers  # the drivers' quiet start, before TensorFlow is imported
from albert_tf.training.loop import Trainer
save = Trainer.save_checkpoint
def save_then_die(self, *args, **kwargs):
    path = save(self, *args, **kwargs)
    if path.endswith("model.ckpt-2"):
        os.kill(os.getpid(), signal.SIGKILL)
    return path
Trainer.save_checkpoint = save_then_die
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _weights(out):
    reader = tf.train.load_checkpoint(str(out / "model.ckpt-4"))
    return {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
            if k.startswith("model/") and "OPTIMIZER_SLOT" not in k}


def test_a_checkpoint_killed_before_its_evaluation_is_evaluated_and_training_goes_on(glue_slices, spm_model,
                                                                                      tmp_path):
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps({**TINY_CONFIG, "hidden_dropout_prob": 0.1}))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))

    def command(out):
        return [str(REPO / "run_classifier.py"), "--task_name=mrpc", f"--data_dir={glue_slices}",
                f"--albert_config_file={config}", f"--spm_model_file={spm_model}", f"--output_dir={out}",
                "--do_train", "--do_eval", "--max_seq_length=32", "--train_batch_size=8", "--eval_batch_size=8",
                "--train_step=4", "--save_checkpoints_steps=2", "--learning_rate=1e-3", "--seed=3"]

    def run(*args):
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=300, env=env,
                              cwd=REPO)

    reference, out = tmp_path / "uninterrupted", tmp_path / "killed"
    assert run(*command(reference)).returncode == 0
    killed = run("-c", _KILLED_AFTER_SAVE_2, *command(out))
    assert killed.returncode == -9 and (out / "model.ckpt-2.index").exists(), killed.stderr[-2000:]
    assert not (out / "eval_results.txt").exists()  # checkpoint 2 was not evaluated
    rerun = run(*command(out))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "Resumed from" in rerun.stderr
    assert (out / "eval_results.txt").read_text() == (reference / "eval_results.txt").read_text()
    got, expected = _weights(out), _weights(reference)
    assert set(got) == set(expected) and got
    assert max(float(np.abs(got[k] - expected[k]).max()) for k in got) == 0.0
