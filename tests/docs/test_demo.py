"""`make demo`'s pipeline, in its --quick form: every step runs, the summary is printed,
and its figures are checked against the outputs, recomputed here where they can be.

It uses nothing from ../shared (the demo must work on a fresh machine without it)."""
import collections
import json
import os
import re
import string
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("demo")
    env = dict(os.environ, ALBERT_TF_SHARED=str(tmp_path / "no_shared_here"), TF_CPP_MIN_LOG_LEVEL="2")
    out = tmp_path / "demo"
    done = subprocess.run([sys.executable, "-m", "albert_tf.demo", "--quick", f"--output_dir={out}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = done.stdout.split("== results")[-1]
    return out, done.stdout, table


def _row(table: str, name: str) -> str:
    (line,) = [line for line in table.splitlines() if line.strip().startswith(name)]
    return line.strip()[len(name):].strip()


def _blocks(path) -> list[dict[str, float]]:
    """run_classifier's eval_results.txt: `key = value` blocks ended by a line of '='."""
    blocks, current = [], {}
    for line in path.read_text().splitlines():
        if line.startswith("====="):
            blocks.append(current)
            current = {}
        else:
            key, value = line.split(" = ")
            current[key] = float(value)
    return blocks


def test_quick_demo_runs_every_step(demo):
    out, stdout, _ = demo
    assert "[9/9" in stdout and "== results" in stdout
    for relative in ("data/spm.model", "pretraining/eval_results.txt", "google_format/model.ckpt.index",
                     "classifier/submit_results.tsv", "squad/predictions.json",
                     "race/test_predictions.jsonl", "race/model.ckpt-best.index", "hub_export/saved_model.pb"):
        assert (out / relative).exists(), relative


def test_pretraining_loss_falls(demo):
    out, _, table = demo
    log = (out / "logs" / "run_pretraining.log").read_text()
    losses = [float(v) for v in re.findall(r"step \d+/\d+: loss = ([0-9.]+)", log)]
    assert len(losses) >= 3
    assert _row(table, "pretraining loss (first -> last logged)") == f"{losses[0]:.3f} -> {losses[-1]:.3f}"
    assert losses[-1] < losses[0] - 0.3, losses


def test_classifier_beats_the_majority_class(demo):
    """The table's dev accuracy is the best checkpoint's, over all 200 dev rows, and above the
    share of the dev set's most frequent label (counted here from dev.tsv)."""
    out, _, table = demo
    blocks = _blocks(out / "classifier" / "eval_results.txt")
    assert len(blocks) >= 2 and [b["num_examples"] for b in blocks] == [200] * len(blocks)
    best = max(b["eval_accuracy"] for b in blocks)
    assert float(_row(table, "sentiment dev accuracy (run_classifier, best checkpoint)")) == best
    dev_rows = (out / "data" / "glue" / "SST-2" / "dev.tsv").read_text().splitlines()[1:]
    assert len(dev_rows) == 200
    majority = max(collections.Counter(row.split("\t")[-1] for row in dev_rows).values()) / len(dev_rows)
    assert best > majority + 0.05, (best, majority)
    # Accuracies are multiples of 1/200 and the best one is kept as the export's model.
    for block in blocks:
        assert block["eval_accuracy"] * 200 == pytest.approx(round(block["eval_accuracy"] * 200), abs=1e-6)
    assert blocks[-1]["best"] == best


def _normalize(text: str) -> str:
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def test_squad_exact_match_above_zero_and_recomputed(demo):
    out, _, table = demo
    dev = json.loads((out / "data" / "squad_dev.json").read_text())
    predictions = json.loads((out / "squad" / "predictions.json").read_text())
    golds = {qa["id"]: [a["text"] for a in qa["answers"]]
             for article in dev["data"] for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    assert sorted(predictions) == sorted(golds)
    exact = 100.0 * sum(any(_normalize(predictions[q]) == _normalize(g) for g in answers)
                        for q, answers in golds.items()) / len(golds)
    # eval_results.txt: a block per checkpoint, then the best's results (the last key = value lines).
    reported = dict(line.split(" = ") for line in (out / "squad" / "eval_results.txt").read_text().splitlines()
                    if " = " in line)
    assert float(reported["exact_match"]) == pytest.approx(exact, abs=1e-9)
    assert _row(table, "demo-SQuAD exact / F1 (run_squad)") == (f"{float(reported['exact_match']):.2f} / "
                                                               f"{float(reported['f1']):.2f}")
    assert exact > 0.0
    assert len(collections.Counter(predictions.values())) > 1  # not one answer for every question


def test_race_step_reports_its_dev_accuracy(demo):
    """The multiple-choice step ran and its table row is the best checkpoint's accuracy (not asserted
    above chance: the quick run trains 300 of the full demo's 1500 steps, before the model starts to
    read; learning is asserted by tests/race/test_run_race.py)."""
    out, _, table = demo
    reported = float(_row(table, "RACE-format dev accuracy (run_race, best checkpoint)"))
    blocks = _blocks(out / "race" / "eval_results.txt")
    assert len(blocks) >= 2
    best = max(b["eval_accuracy"] for b in blocks)
    assert reported == best == blocks[-1]["best"]
    predictions = [json.loads(line) for line in (out / "race" / "test_predictions.jsonl").read_text().splitlines()]
    assert predictions and all(p["prediction"] in {"A", "B", "C", "D"} and len(p["probabilities"]) == 4
                               for p in predictions)
    # The test split's accuracy, recomputed from the predictions and the gold letters, is predict_results.txt's.
    gold = {}
    for path in sorted((out / "data" / "race" / "RACE" / "test").glob("*/*.txt")):
        for line in path.read_text().splitlines():
            record = json.loads(line)
            gold.update({(record["id"], i): answer for i, answer in enumerate(record["answers"])})
    assert sorted((p["id"], p["question_index"]) for p in predictions) == sorted(gold)
    correct = sum(p["prediction"] == gold[(p["id"], p["question_index"])] for p in predictions)
    results = dict(line.split(" = ") for line in (out / "race" / "predict_results.txt").read_text().splitlines()
                   if " = " in line)
    # float32, printed as the original's Estimator values were
    assert float(results["eval_accuracy"]) == pytest.approx(correct / len(predictions), rel=1e-6)


def test_a_second_demo_goes_to_a_fresh_folder(tmp_path):
    """A rerun into a folder with an earlier demo's outputs would resume its finished pretraining and meet
    its own converted checkpoint (convert_checkpoint.py replaces nothing): each run takes the first empty
    or new folder of <output_dir>, <output_dir>-2, ... and replaces nothing."""
    from albert_tf.demo import fresh_output_dir

    out = tmp_path / "demo_output"
    assert fresh_output_dir(str(out)) == str(out)
    out.mkdir()
    assert fresh_output_dir(str(out)) == str(out)  # empty: used
    (out / "albert_config.json").write_text("{}")
    assert fresh_output_dir(str(out)) == f"{out}-2"
    (tmp_path / "demo_output-2").write_text("a file, not a folder")
    assert fresh_output_dir(str(out)) == f"{out}-3"
    assert (out / "albert_config.json").read_text() == "{}"
