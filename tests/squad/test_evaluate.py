"""The evaluator against the official scripts' figures (../shared/reference/README.md) and edge cases."""
import collections
import json
import random
import re
import string
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
    # Informative but noisy no-answer scores, distinct so the sweep has no ties; noisy
    # enough that the best cut answers many questions predicted "".
    return {q: (0.3 if preds[q] == "" else 0.0) + rng.random() for q in qids}


# --- evaluate-v2.0's best-threshold search, re-derived here (not albert_tf's scoring) ---

def _official_normalize(text):
    text = "".join(ch for ch in text.lower() if ch not in string.punctuation)
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _official_raw_scores(qa, prediction):
    """(exact, f1) of one question: gold answers normalising to "" are dropped, and a
    question left without any has the single gold answer ""."""
    golds = [a["text"] for a in qa["answers"] if _official_normalize(a["text"])] or [""]

    def tokens(text):
        return _official_normalize(text).split() if text else []

    def f1(gold):
        gold_tokens, pred_tokens = tokens(gold), tokens(prediction)
        if not gold_tokens or not pred_tokens:
            return float(gold_tokens == pred_tokens)
        same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
        if same == 0:
            return 0.0
        precision, recall = same / len(pred_tokens), same / len(gold_tokens)
        return 2 * precision * recall / (precision + recall)

    exact = max(float(_official_normalize(g) == _official_normalize(prediction)) for g in golds)
    return exact, max(f1(g) for g in golds)


def _brute_force_best(dataset, predictions, na_probs):
    """{key: (best score, threshold)} as evaluate-v2.0 defines them, by scoring every cut
    from scratch.  Cut k answers the k questions of lowest na-prob and predicts no-answer
    for the rest.  Cut 0 (everything no-answer) is labelled threshold 0.0, cut k >= 1 the
    k-th na-prob; ties go to the earliest cut.  Answering an unanswerable question costs
    its point unless the prediction string is empty — the raw string, so a prediction such
    as "The" (which normalises to "") still costs it."""
    questions = [qa for _, _, qa in data.iter_questions(dataset, "x")]
    order = sorted(questions, key=lambda qa: na_probs[qa["id"]])
    best = {}
    for column, key in ((0, "exact"), (1, "f1")):
        # What each question scores when answered and when predicted unanswerable.
        if_answered, if_null = [], []
        for qa in order:
            prediction = predictions[qa["id"]]
            if qa["answers"]:
                if_answered.append(_official_raw_scores(qa, prediction)[column])
                if_null.append(0.0)
            else:
                if_answered.append(1.0 if prediction == "" else 0.0)
                if_null.append(1.0)
        cuts = []
        for k in range(len(order) + 1):
            total = sum(if_answered[:k]) + sum(if_null[k:])
            cuts.append((100.0 * total / len(questions), na_probs[order[k - 1]["id"]] if k else 0.0))
        best[key] = max(cuts, key=lambda cut: cut[0])  # max() keeps the first of equals
    return best


def test_v2_best_threshold_equals_brute_force(shared):
    dataset = data.load_squad(shared("data", "squad", "dev-v2.0.first5articles.json"))
    preds = evaluate.load_predictions(str(shared("data", "squad", "predictions-v2.0.bert_single.json")))
    probs = _v2_probs(dataset, preds)
    # Keep the empty predictions (702 no-answer questions, many predicted ""), and give a few
    # unanswerable questions a non-empty prediction that normalises to "".
    qids = [qa["id"] for _, _, qa in data.iter_questions(dataset, "x")]
    no_answer = [qa["id"] for _, _, qa in data.iter_questions(dataset, "x") if not qa["answers"]]
    preds = {q: preds[q] for q in qids}
    with_the = dict(preds, **{q: "The" for q in no_answer[::50]})
    assert sum(p == "" for p in preds.values()) > 100 and sum(p == "The" for p in with_the.values()) >= 10
    for predictions in (preds, with_the):
        result = evaluate.evaluate(dataset, predictions, na_probs=probs)
        assert list(result)[-4:] == ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
        for key, (best, thresh) in _brute_force_best(dataset, predictions, probs).items():
            assert result["best_" + key] == pytest.approx(best, abs=1e-9), key
            assert result[f"best_{key}_thresh"] == thresh, key
    # At a threshold the result equals scoring predictions nulled above it.  (Not with the
    # "The" predictions: the official script scores them 1 at a fixed threshold but charges
    # them a point in the sweep.)
    result = evaluate.evaluate(dataset, preds, na_probs=probs)
    t = result["best_f1_thresh"]
    nulled = {q: ("" if probs.get(q, 0) > t else a) for q, a in preds.items()}
    at_t = evaluate.evaluate(dataset, preds, probs, t)
    plain = evaluate.evaluate(dataset, nulled)
    for key in V2_EXPECTED:
        assert at_t[key] == pytest.approx(plain[key], abs=1e-9)
    assert at_t["f1"] == pytest.approx(result["best_f1"], abs=1e-9)


def test_v2_best_threshold_when_no_answer_everywhere_is_best():
    # Every prediction is wrong: answering nothing is best, which the official script
    # reports as threshold 0.0 (whatever the na-probs, negative ones included).
    dataset = _tiny(impossible_key=True)
    qa3 = {"id": "q3", "question": "Why?", "answers": [], "is_impossible": True}
    dataset["data"][0]["paragraphs"][0]["qas"].append(qa3)
    preds = {"q1": "sat", "q2": "cat", "q3": "an"}
    probs = {"q1": -3.0, "q2": -2.0, "q3": -1.0}
    result = evaluate.evaluate(dataset, preds, na_probs=probs)
    want = _brute_force_best(dataset, preds, probs)
    assert want == {"exact": (200 / 3, 0.0), "f1": (200 / 3, 0.0)}
    for key, (best, thresh) in want.items():
        assert result["best_" + key] == pytest.approx(best, abs=1e-9)
        assert result[f"best_{key}_thresh"] == thresh


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
