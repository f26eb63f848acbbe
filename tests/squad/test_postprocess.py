"""Post-processing: oracle outputs recover the gold answers for every dev question;
span validity rules; the v1 fallback; output files; the 2.0 threshold."""
import json

import numpy as np
import pytest

from albert_tf.squad import data, evaluate, postprocess
from albert_tf.squad.records import FeatureMeta
from albert_tf.training.results import format_eval_results

DEV1 = "dev-v1.1.Super_Bowl_50.json"
DEV2 = "dev-v2.0.first5articles.json"
S = 384


def _meta(f):
    return FeatureMeta(f.unique_id, f.example_index, f.doc_span_index, f.doc_offset,
                       f.tok_start_to_orig_index, f.tok_end_to_orig_index, f.token_is_max_context)


def test_v1_oracle_logits_answer_every_question(convert, shared, tmp_path):
    # Training-mode conversion of the dev file labels the first gold answer in each window.
    examples, feats, _ = convert(DEV1, True)
    rng = np.random.default_rng(0)
    results = {}
    for f in feats:
        start, end = rng.normal(size=S), rng.normal(size=S)
        if not f.is_impossible:
            start[f.start_position] += 20
            end[f.end_position] += 20
        results[f.unique_id] = postprocess.RawResultV1(f.unique_id, start, end)
    out = postprocess.predict_v1(examples, [_meta(f) for f in feats], results, 20, 30)
    assert list(out.predictions) == [e.qas_id for e in examples] and len(out.predictions) == 810
    assert all(out.predictions.values())
    nb = out.nbest[examples[0].qas_id]
    assert list(nb[0]) == ["text", "probability", "start_log_prob", "end_log_prob"]
    assert 1 < len(nb) <= 20 and sum(e["probability"] for e in nb) == pytest.approx(1.0)
    dataset = data.load_squad(shared("data", "squad", DEV1))
    metrics = postprocess.evaluate_predictions(dataset, out)
    # 17 of 810 gold answers are parts of a piece ("gold" in "▁golden", "2" in "2½"):
    # no span of pieces gives them, here or in the original.
    assert metrics["exact_match"] > 97.5, metrics
    paths = postprocess.write_prediction_files(str(tmp_path), out)
    assert [p.split("/")[-1] for p in paths] == ["predictions.json", "nbest_predictions.json"]
    assert json.load(open(paths[0])) == out.predictions
    # The original's bytes: json.dumps(..., indent=4) + "\n", non-ASCII answers ("2½") as \u escapes.
    assert any(not text.isascii() for text in out.predictions.values())
    for path, payload in zip(paths, (out.predictions, out.nbest)):
        assert open(path, "rb").read() == (json.dumps(payload, indent=4) + "\n").encode("ascii")


def _beam(f, rng, k1=5, k2=5):
    start_idx = rng.choice(np.arange(f.doc_offset, f.doc_offset + len(f.tok_start_to_orig_index)), k1)
    end_idx = np.minimum(start_idx.repeat(k2) + rng.integers(0, 4, k1 * k2), S - 1)
    start_lp = np.sort(-rng.uniform(1, 5, k1))[::-1]
    end_lp = -rng.uniform(1, 5, k1 * k2)
    if not f.is_impossible:
        start_idx[0], end_idx[0], start_lp[0], end_lp[0] = f.start_position, f.end_position, -0.01, -0.01
    return postprocess.RawResultV2(f.unique_id, start_lp, start_idx, end_lp, end_idx,
                                   5.0 if f.is_impossible else -5.0)


def test_v2_oracle_beam_threshold_and_null_odds(convert, shared, tmp_path):
    examples, feats, _ = convert(DEV2, True)
    rng = np.random.default_rng(1)
    results = {f.unique_id: _beam(f, rng) for f in feats}
    metas = [_meta(f) for f in feats]
    out = postprocess.predict_v2(examples, metas, results, 20, 30, null_score_diff_threshold=0.0)
    assert len(out.predictions) == len(out.null_odds) == 1407
    dataset = data.load_squad(shared("data", "squad", DEV2))
    metrics = postprocess.evaluate_predictions(dataset, out, 0.0)
    assert metrics["HasAns_exact"] > 98.0 and metrics["NoAns_exact"] == 100.0, metrics
    assert metrics["best_f1"] >= metrics["f1"] and metrics["null_score_diff_threshold"] == 0.0
    # The reported figures are those of the written predictions.json.
    assert evaluate.evaluate(dataset, out.predictions)["exact"] == pytest.approx(metrics["exact"], abs=1e-9)
    # A threshold above every null score answers everything.
    everything = postprocess.predict_v2(examples, metas, results, null_score_diff_threshold=10.0)
    assert all(everything.predictions.values())
    text = format_eval_results(metrics, postprocess.RESULTS_LAYOUT)
    assert text.index("exact = ") < text.index("# tuned on this data") < text.index("best_f1 = ")
    names = [p.split("/")[-1] for p in postprocess.write_prediction_files(str(tmp_path), out)]
    assert names == ["predictions.json", "nbest_predictions.json", "null_odds.json"]


def _toy():
    # [CLS] q q [SEP] d0 d1 d2 d3 [SEP] pad; context pieces map to words of "aa bb cc dd".
    context = "aa bb cc dd"
    example = data.SquadExample("toy", "q?", context)
    meta = FeatureMeta(1000000000, 0, 0, 4, [0, 3, 6, 9], [1, 4, 7, 10], [True, True, False, True])
    return example, meta


def test_span_rules_and_v1_fallback():
    example, meta = _toy()
    start, end = np.zeros(10), np.zeros(10)
    start[1] = end[2] = 50          # inside the question: invalid
    start[6] = 40                   # d2: not its max-context window
    start[4], end[7] = 30, 30       # d0..d3: 4 pieces
    start[5], end[5] = 20, 20       # d1..d1
    results = {meta.unique_id: postprocess.RawResultV1(meta.unique_id, start, end)}
    out = postprocess.predict_v1([example], [meta], results, n_best_size=3, max_answer_length=3)
    texts = [e["text"] for e in out.nbest["toy"]]
    assert texts == ["aa bb"] and out.predictions["toy"] == "aa bb"   # d0..d3 too long
    # With n_best_size=1 only invalid positions are in the grid: the fallback searches all.
    out = postprocess.predict_v1([example], [meta], results, n_best_size=1, max_answer_length=3)
    assert out.predictions["toy"] == "aa bb" and len(out.nbest["toy"]) == 1
    with pytest.raises(ValueError, match="'toy'.*no model output"):
        postprocess.predict_v1([example], [meta], {}, 3, 3)


def test_probabilities_add_up_left_to_right_as_the_original():
    """The original's _compute_softmax adds the exponentials one by one; Python 3.12's sum() of floats
    is compensated and can differ in the last bit (this guards interpreters from 3.12 on)."""
    import math

    scores = [0.0, -2.7, -1.5, -0.8, -2.3, -1.9]
    exps = [math.exp(s - max(scores)) for s in scores]
    total = 0.0
    for e in exps:
        total += e
    assert total != math.fsum(exps)  # the correctly rounded sum differs in the last bit here
    assert postprocess._softmax(scores) == [e / total for e in exps]


def test_v2_without_valid_candidates_predicts_null():
    example, meta = _toy()
    bad = postprocess.RawResultV2(meta.unique_id, np.array([-0.1]), np.array([1]),
                                  np.array([-0.1]), np.array([2]), -3.0)
    out = postprocess.predict_v2([example], [meta], {meta.unique_id: bad})
    assert out.predictions == {"toy": ""} and out.null_odds == {"toy": -3.0}


def _v2_dataset(questions):
    qas = [{"id": qid, "question": "?", "is_impossible": not gold,
            "answers": [{"text": gold, "answer_start": 0}] if gold else []} for qid, gold in questions]
    return {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{"context": "Denver won it.", "qas": qas}]}]}


@pytest.mark.parametrize("case", ["threshold_question_left_unanswered", "null_scores_above_1_are_no_answers"])
def test_the_original_v2_f1_remakes_predictions_at_the_best_threshold(case):
    """original_exact / original_f1 are what run_squad_v2.py reported as exact / f1 (worked by hand from
    its evaluate_v2: answer where the null score is < best_f1_thresh, then the official script at
    na_prob_thresh 1.0), which selects model.ckpt-best; best_f1 can differ."""
    if case == "threshold_question_left_unanswered":
        # q1 answerable, answered right, null score -1; q2 unanswerable, answered "x", null score 0.5.
        # The sweep's best is to answer q1 only: best_f1 = 100 at threshold -1. The original then
        # answers where the null score is below -1: nowhere; q1 scores 0, q2 1.
        golds, answers, null = [("q1", "Denver"), ("q2", None)], {"q1": "Denver", "q2": "x"}, {"q1": -1.0, "q2": 0.5}
        best_f1, thresh, original = 100.0, -1.0, 50.0
    else:
        # Three answerable questions answered right, null scores 1.5, 2, 3: answering all is best
        # (threshold 3). Remade at 3, q1 and q2 are answered; then null scores above 1.0 count as
        # no-answer in the official script: both score 0, and q3 is unanswered (3 >= 3): all 0.
        golds = [("q1", "Denver"), ("q2", "Denver"), ("q3", "Denver")]
        answers, null = {q: "Denver" for q, _ in golds}, {"q1": 1.5, "q2": 2.0, "q3": 3.0}
        best_f1, thresh, original = 100.0, 3.0, 0.0
    result = postprocess.SquadPredictions(predictions={}, nbest={}, null_odds=null, best_non_null=answers)
    metrics = postprocess.evaluate_predictions(_v2_dataset(golds), result, 0.0)
    assert (metrics["best_f1"], metrics["best_f1_thresh"]) == (best_f1, thresh)
    assert metrics["original_f1"] == metrics["original_exact"] == original
    assert postprocess.key_metric(True) == "original_f1" and postprocess.key_metric(False) == "f1"


def test_choosing_the_answers_logs_progress(monkeypatch):
    """Choosing the answers of the full 2.0 dev set takes about 30 s, and printed nothing."""
    from albert_tf import progress

    example, meta = _toy()
    start, end = np.zeros(10), np.zeros(10)
    start[5], end[5] = 20, 20
    results = {meta.unique_id: postprocess.RawResultV1(meta.unique_id, start, end)}
    said = []
    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)
    monkeypatch.setattr(progress.logging, "info", lambda message, *args: said.append(message % args))
    postprocess.predict_v1([example], [meta], results, n_best_size=3, max_answer_length=3)
    assert said == ["SQuAD answers: question 1/1"]
