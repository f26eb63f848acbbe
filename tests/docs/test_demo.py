"""`make demo`'s pipeline, in its --quick form: every step runs and the summary is printed.

It uses nothing from ../shared (the demo must work on a fresh machine without it)."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_quick_demo_runs_every_step(tmp_path):
    env = dict(os.environ, ALBERT_TF_SHARED=str(tmp_path / "no_shared_here"), TF_CPP_MIN_LOG_LEVEL="2")
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "albert_tf.demo", "--quick", f"--output_dir={out}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "[9/9" in done.stdout and "== results" in done.stdout
    for relative in ("data/spm.model", "pretraining/eval_results.txt", "google_format/model.ckpt.index",
                     "classifier/submit_results.tsv", "squad/predictions.json",
                     "race/test_predictions.jsonl", "race/model.ckpt-best.index", "hub_export/saved_model.pb"):
        assert (out / relative).exists(), relative
    losses = [line for line in done.stdout.splitlines() if "pretraining loss (first -> last logged)" in line]
    assert losses and "?" not in losses[0]
    race = [line for line in done.stdout.splitlines() if "RACE-format dev accuracy" in line]
    assert race, "the results table has no RACE row"
    accuracy = float(race[0].split()[-1])  # reported as a number, not "?"
    assert 0.0 <= accuracy <= 1.0
