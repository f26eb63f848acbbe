"""run_glue.sh passes the original's per-task settings and gathers GLUE submission files."""
import os
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parents[2]

# Stands in for python: records the arguments, writes the files run_classifier.py would.
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$@" >> "$CALLS"
for a in "$@"; do case "$a" in --output_dir=*) out="${a#--output_dir=}";; --task_name=*) t="${a#--task_name=}";; esac; done
mkdir -p "$out"; printf 'index\\tprediction\\n0\\t%s\\n' "$t" > "$out/submit_results.tsv"
"""


def _run(tmp_path, tasks, extra_env=None):
    fake = tmp_path / "fake_python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    calls = tmp_path / "calls.txt"
    env = dict(os.environ, PYTHON=str(fake), CALLS=str(calls), TASKS=tasks, ALBERT_ROOT=str(tmp_path / "root"),
               OUTPUT_DIR=str(tmp_path / "out"), EXTRA_ARGS="--mixed_precision=bf16", **(extra_env or {}))
    proc = subprocess.run(["bash", str(REPO / "run_glue.sh")], env=env, capture_output=True, text=True, timeout=60)
    lines = calls.read_text().splitlines() if calls.exists() else []
    return proc, lines


def test_per_task_settings_and_submission_files(tmp_path):
    proc, calls = _run(tmp_path, "MNLI STS-B")
    assert proc.returncode == 0, proc.stderr
    mnli, mismnli, ax, stsb = calls
    root = tmp_path / "root"
    for flag in ("--task_name=MNLI", "--warmup_step=1000", "--learning_rate=3e-5", "--train_step=10000",
                 "--save_checkpoints_steps=100", "--train_batch_size=128", "--max_seq_length=512",
                 "--optimizer=adamw", "--do_lower_case", "--do_train", "--do_eval", "--do_predict",
                 f"--data_dir={root}/glue", f"--spm_model_file={root}/30k-clean.model",
                 f"--init_checkpoint={root}/model.ckpt-best", "--mixed_precision=bf16"):
        assert flag in mnli.split(), flag
    best_mnli = f"--init_checkpoint={tmp_path}/out/MNLI/model.ckpt-best"
    assert "--task_name=MISMNLI" in mismnli and best_mnli in mismnli.split() and "--do_train" not in mismnli
    assert "--task_name=AX" in ax and best_mnli in ax.split() and "--do_eval" not in ax
    for flag in ("--warmup_step=214", "--learning_rate=2e-5", "--train_step=3598", "--train_batch_size=16"):
        assert flag in stsb.split()
    submission = tmp_path / "out" / "glue_submission"
    assert sorted(os.listdir(submission)) == ["AX.tsv", "MNLI-m.tsv", "MNLI-mm.tsv", "STS-B.tsv"]
    assert (submission / "MNLI-mm.tsv").read_text().endswith("0\tMISMNLI\n")


def test_unknown_task_fails(tmp_path):
    proc, calls = _run(tmp_path, "MRPC SST2")
    assert proc.returncode == 2 and "no settings for task 'SST2'" in proc.stderr
    assert calls == []  # names are checked before anything runs
