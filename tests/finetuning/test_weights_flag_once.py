"""Whether --init_checkpoint (or --albert_hub_module_handle) is unused (the run has weights of its own in
--output_dir: drivers.finetuning.unused_weights_flag) is asked once a run and followed by the flag checks, the fit
check and the job alike: each asked again, looking into --output_dir three times."""
import json
import os
import subprocess
import sys

import pytest

from albert_tf import AlbertConfig

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = {"vocab_size": 30000, "embedding_size": 8, "hidden_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 64}

# A driver's flags, then its task and job, counting the looks into --output_dir for its own weights; for each
# command line of argv[2] (JSON), in one process (one TensorFlow start-up).
_TASK_AND_JOB = r"""
import importlib, json, sys
from absl import flags
from albert_tf.finetuning import runner
driver = importlib.import_module(f"albert_tf.drivers.{sys.argv[1]}")
looks = []
own = runner.own_weights_ahead_of_init
runner.own_weights_ahead_of_init = lambda *args: looks.append(args) or own(*args)
results = []
for argv in json.loads(sys.argv[2]):
    flags.FLAGS.unparse_flags()
    flags.FLAGS([f"{sys.argv[1]}.py", *argv])
    looks.clear()
    task, job = driver.task_and_job_from_flags()
    results.append({"looks": len(looks), "init_checkpoint": job.init_checkpoint})
print(json.dumps(results))
"""

_SQUAD = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{
    "context": "The cat sat on the mat.",
    "qas": [{"id": "q1", "question": "Where did the cat sit?", "answers": [{"text": "the mat", "answer_start": 15}]}]}]}]}


@pytest.mark.parametrize("driver", ["run_classifier", "run_squad"])
def test_the_weights_flag_is_decided_once_a_run(driver, tmp_path, shared, random_tf1_checkpoint):
    """A fresh run (its weights checked and used) and a resumed one (a checkpoint of its own in --output_dir:
    the flag's weights unused, as given). One subprocess a driver for both (TensorFlow starts once)."""
    config_file = tmp_path / "albert_config.json"
    config_file.write_text(json.dumps(TINY))
    init = tmp_path / "init" / "model.ckpt"
    init.parent.mkdir()
    random_tf1_checkpoint(AlbertConfig(**TINY), init)
    fresh, resumed = tmp_path / "fresh", tmp_path / "resumed"
    fresh.mkdir()
    resumed.mkdir()
    random_tf1_checkpoint(AlbertConfig(**TINY), resumed / "model.ckpt-3")
    spm = shared("data", "spm", "30k-clean.model")
    common = [f"--albert_config_file={config_file}", f"--spm_model_file={spm}", f"--init_checkpoint={init}",
              "--max_seq_length=32"]
    if driver == "run_classifier":
        common += ["--task_name=MRPC", f"--data_dir={tmp_path}", "--do_train"]
    else:
        (tmp_path / "dev.json").write_text(json.dumps(_SQUAD))
        common += ["--do_predict", f"--predict_file={tmp_path / 'dev.json'}", "--max_query_length=8",
                   "--doc_stride=16"]
    runs = [[*common, f"--output_dir={out}"] for out in (fresh, resumed)]
    done = subprocess.run([sys.executable, "-c", _TASK_AND_JOB, driver, json.dumps(runs)], capture_output=True,
                          text=True, cwd=REPO, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO))
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results == [{"looks": 1, "init_checkpoint": str(init)}] * 2, results
