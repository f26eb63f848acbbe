"""The evaluator against the official scripts' figures (../shared/reference/README.md) and edge cases."""
import json
import random
import subprocess
import sys

import pytest

from albert_tf.squad import data, evaluate

V1_EXPECTED = {"exact_match": 89.75308641975309, "f1": 92.47033830367158}
V2_EXPECTED = {
    "exact": 75.55081734186211, "f1": 78.83251404548824, "total": 1407,
    "HasAns_exact": 70.35460992907801, "HasAns_f1": 76.9040386695064, "HasAns_total": 705,
    "NoAns_exact": 80.76923076923077, "NoAns_f1": 80.76923076923077, "NoAns_total": 702,
}


def _close(result, expected):
    assert list(result)[:len(expected)] == list(expected)
    for key, value in expected.items():
        assert result[key] == pytest.approx(value, abs=1e-9), key


def test_v1_reference_table(shared):
    dataset = data.load_squad(shared("data", "squad", "dev-v1.1.Super_Bowl_50.json"))
    preds = evaluate.load_predictions(str(shared("data", "squad", "predictions-v1.1.bert_ensemble.json")))
    result = evaluate.evaluate(dataset, preds)
    assert set(result) == set(V1_EXPECTED)
    _close(result, V1_EXPECTED)


def test_v2_reference_table(shared):
    dataset = data.load_squad(shared("data", "squad", "dev-v2.0.first5articles.json"))
    preds = evaluate.load_predictions(str(shared("data", "squad", "predictions-v2.0.bert_single.json")))
    result = evaluate.evaluate(dataset, preds)
    assert set(result) == set(V2_EXPECTED)
    _close(result, V2_EXPECTED)


def test_cli_prints_one_json_object(shared, tmp_path):
    squad = shared("data", "squad")
    out = subprocess.run(
        [sys.executable, "-m", "albert_tf.squad.evaluate", str(squad / "dev-v1.1.Super_Bowl_50.json"),
         str(squad / "predictions-v1.1.bert_ensemble.json")], capture_output=True, text=True, check=True)
    _close(json.loads(out.stdout), V1_EXPECTED)


def _v2_probs(dataset, preds, seed=0):
    rng = random.Random(seed)
    qids = [qa["id"] for _, _, qa in data.iter_questions(dataset, "x")]
    # Informative but noisy no-answer scores, distinct so the sweep has no ties.
    return {q: (1.0 if preds[q] == "" else 0.0) + rng.random() for q in qids}


def test_v2_best_threshold_equals_brute_force(shared):
    dataset = data.load_squad(shared("data", "squad", "dev-v2.0.first5articles.json"))
    preds = evaluate.load_predictions(str(shared("data", "squad", "predictions-v2.0.bert_single.json")))
    # Best thresholds assume non-null predictions; give every question some text.
    answered = {q: (t or "the Normans") for q, t in preds.items()}
    probs = _v2_probs(dataset, preds)
    result = evaluate.evaluate(dataset, answered, na_probs=probs)
    assert list(result)[-4:] == ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
    # Brute force: per-question scores once, then every threshold (null when prob > t).
    rows = []
    for _, _, qa in data.iter_questions(dataset, "x"):
        golds = [a["text"] for a in qa["answers"] if evaluate.normalize_answer(a["text"])] or [""]
        pred = answered[qa["id"]]
        rows.append((bool(qa["answers"]), probs[qa["id"]],
                     max(evaluate.exact_v2(g, pred) for g in golds),
                     max(evaluate.f1_v2(g, pred) for g in golds)))
    for key, col in (("exact", 2), ("f1", 3)):
        scored = []
        for t in [-1.0] + sorted(probs.values()):
            total = sum((0.0 if has else 1.0) if p > t else r[col]
                        for r in rows for has, p in [(r[0], r[1])])
            scored.append((100.0 * total / len(rows), t))
        best, thresh = max(scored, key=lambda s: s[0])
        assert result["best_" + key] == pytest.approx(best, abs=1e-9)
        assert result[f"best_{key}_thresh"] == thresh
    # At a threshold the result equals scoring predictions nulled above it.
    t = result["best_f1_thresh"]
    nulled = {q: ("" if probs.get(q, 0) > t else a) for q, a in answered.items()}
    at_t = evaluate.evaluate(dataset, answered, probs, t)
    plain = evaluate.evaluate(dataset, nulled)
    for key in V2_EXPECTED:
        assert at_t[key] == pytest.approx(plain[key], abs=1e-9)
    assert at_t["f1"] == pytest.approx(result["best_f1"], abs=1e-9)


def _tiny(version=None, impossible_key=False):
    qa1 = {"id": "q1", "question": "Who?", "answers": [{"text": "The Cat", "answer_start": 0}]}
    qa2 = {"id": "q2", "question": "What?", "answers": []}
    if impossible_key:
        qa1["is_impossible"], qa2["is_impossible"] = False, True
    d = {"data": [{"title": "t", "paragraphs": [{"context": "The Cat sat.", "qas": [qa1, qa2]}]}]}
    if version:
        d["version"] = version
    return d


def test_version_detection():
    assert not data.is_version_2(_tiny())
    assert data.is_version_2(_tiny(impossible_key=True))
    assert data.is_version_2(_tiny(version="v2.0"))
    assert not data.is_version_2(_tiny(version="1.1", impossible_key=True))


def test_normalization_facts():
    assert evaluate.normalize_answer("  The  Denver, Broncos! ") == "denver broncos"
    assert evaluate.normalize_answer("an apple a day") == "apple day"
    assert evaluate.normalize_answer("theater") == "theater"   # articles only as words
    assert evaluate.normalize_answer("“quoted”") == "“quoted”"  # only ASCII punctuation goes
    assert evaluate.f1_v1("", "") == 0.0                        # 1.1: empty never scores
    assert evaluate.f1_v2("", "") == 1.0 and evaluate.exact_v2("", "a") == 1   # 2.0: "a" -> ""
    assert evaluate.f1_v1("denver broncos team", "Denver Broncos") == pytest.approx(0.8)


def test_missing_prediction_scores_zero_in_both_versions(capsys):
    r1 = evaluate.evaluate(_tiny(), {"q1": "cat"})
    assert r1 == {"exact_match": 50.0, "f1": 50.0}
    # q2 has no gold answer in 1.1 data: an error naming it rather than a silent score.
    with pytest.raises(data.SquadFormatError, match="q2"):
        evaluate.evaluate(_tiny(), {"q1": "cat", "q2": "x"})
    r2 = evaluate.evaluate(_tiny(impossible_key=True), {"q1": "the cat"})
    assert r2["total"] == 2 and r2["exact"] == 50.0 and r2["NoAns_exact"] == 0.0
    assert "q2" in capsys.readouterr().err


def test_na_prob_file_must_cover_predictions():
    with pytest.raises(data.SquadFormatError, match="'q2'"):
        evaluate.evaluate(_tiny(impossible_key=True), {"q1": "cat", "q2": ""}, na_probs={"q1": 0.5})


def test_cli_errors(tmp_path, shared):
    squad = shared("data", "squad")
    bad = tmp_path / "preds.json"
    bad.write_text(json.dumps({"56be4db0acb8001400a502ec": 3}))
    cases = [
        ([str(tmp_path / "nope.json"), str(bad)], "not found"),
        ([str(squad / "dev-v1.1.Super_Bowl_50.json"), str(bad)], "56be4db0acb8001400a502ec"),
    ]
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [')
    cases.append(([str(broken), str(bad)], "line 1"))
    for argv, message in cases:
        out = subprocess.run([sys.executable, "-m", "albert_tf.squad.evaluate", *argv],
                             capture_output=True, text=True)
        assert out.returncode == 2 and message in out.stderr, (argv, out.stderr)
