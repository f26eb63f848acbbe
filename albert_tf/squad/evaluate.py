"""SQuAD evaluation giving the official scripts' numbers (evaluate-v1.1, evaluate-v2.0).

Usage::

    python -m albert_tf.squad.evaluate DATA_JSON PRED_JSON [--na-prob-file NA_JSON]
        [--na-prob-thresh 1.0] [--squad-version auto|1.1|2.0]

prints one JSON object: for 1.1 data ``exact_match``, ``f1``; for 2.0 data
``exact``, ``f1``, ``total``, ``HasAns_*``, ``NoAns_*`` and, with a na-prob file,
``best_exact``, ``best_exact_thresh``, ``best_f1``, ``best_f1_thresh``.
1.1 vs 2.0 is decided from the data (``albert_tf.squad.data.is_version_2``:
the ``version`` key, else the presence of ``is_impossible``).

Facts of the official scripts reproduced here: answers are compared after
lower-casing, removing ASCII punctuation (``string.punctuation``), the words
a/an/the and runs of whitespace; a question scores the max over its gold
answers; F1 is over bag-of-token overlap. 1.1: an empty answer never scores
(F1 0 when nothing overlaps). 2.0: a question whose gold answers all normalise
to "" has the single gold answer "" and F1/EM are 1 exactly when both sides are
empty; a question is predicted unanswerable when its na-prob exceeds the
threshold (strictly greater); best thresholds sweep the na-probs in ascending
(stable) order.

Where the official scripts are undefined we choose: a question without a
prediction scores 0 in every figure and counts in every total (1.1 does this;
2.0 crashes). A na-prob file must cover every predicted question.
"""
from __future__ import annotations

import argparse
import collections
import json
import re
import string
import sys
from typing import Iterable, Mapping, Sequence

from albert_tf.squad import data

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop a/an/the, collapse whitespace (official order)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _overlap_f1(pred_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    common = collections.Counter(pred_tokens) & collections.Counter(gold_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(pred_tokens)
    recall = num_same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# --- SQuAD 1.1 --------------------------------------------------------------

def exact_match_v1(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_v1(prediction: str, gold: str) -> float:
    return _overlap_f1(normalize_answer(prediction).split(), normalize_answer(gold).split())


def evaluate_v1(dataset: dict, predictions: Mapping[str, str], source: str = "<dataset>") -> dict:
    """{'exact_match', 'f1'} in percent over every question of the data."""
    exact = f1 = 0.0
    total = 0
    for _, _, qa in data.iter_questions(dataset, source):
        total += 1
        qid = qa["id"]
        if qid not in predictions:
            print(f"Unanswered question {qid} will receive score 0.", file=sys.stderr)
            continue
        golds = data.answer_texts(qa, source)
        if not golds:
            raise data.SquadFormatError(f"{source}: question id {qid!r} has no gold answers "
                                        "(SQuAD 1.1 data needs at least one)")
        prediction = predictions[qid]
        exact += max(exact_match_v1(prediction, g) for g in golds)
        f1 += max(f1_v1(prediction, g) for g in golds)
    if total == 0:
        raise data.SquadFormatError(f"{source}: no questions")
    return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


# --- SQuAD 2.0 --------------------------------------------------------------

def _tokens_v2(text: str) -> list[str]:
    return normalize_answer(text).split() if text else []


def exact_v2(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_v2(gold: str, prediction: str) -> float:
    gold_tokens, pred_tokens = _tokens_v2(gold), _tokens_v2(prediction)
    if not gold_tokens or not pred_tokens:
        # No-answer on either side: right exactly when both are no-answer.
        return float(gold_tokens == pred_tokens)
    return _overlap_f1(pred_tokens, gold_tokens)


def _mean_percent(scores: Mapping[str, float], qids: Iterable[str]) -> tuple[float, int]:
    qids = list(qids)
    return 100.0 * sum(scores[q] for q in qids) / len(qids), len(qids)


def _best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                    na_probs: Mapping[str, float], has_answer: Mapping[str, bool]
                    ) -> tuple[float, float]:
    """Best score over na-prob thresholds, and the threshold (official sweep).

    Start with every question predicted unanswerable, then answer questions in
    ascending na-prob order, keeping the best running total.
    """
    score = sum(1 for q, has in has_answer.items() if not has and q in predictions)
    best, best_thresh = score, 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores or qid not in predictions:
            continue
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best:
            best, best_thresh = score, na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def evaluate_v2(dataset: dict, predictions: Mapping[str, str],
                na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0,
                source: str = "<dataset>") -> dict:
    """The official 2.0 result dict; best thresholds are added when ``na_probs`` is given."""
    has_answer: dict[str, bool] = {}
    exact_raw: dict[str, float] = {}
    f1_raw: dict[str, float] = {}
    for _, _, qa in data.iter_questions(dataset, source):
        qid = qa["id"]
        all_golds = data.answer_texts(qa, source)
        has_answer[qid] = bool(all_golds)
        golds = [g for g in all_golds if normalize_answer(g)] or [""]
        if qid not in predictions:
            print(f"Missing prediction for {qid}: scored 0.", file=sys.stderr)
            exact_raw[qid] = f1_raw[qid] = 0.0
            continue
        prediction = predictions[qid]
        exact_raw[qid] = max(exact_v2(g, prediction) for g in golds)
        f1_raw[qid] = max(f1_v2(g, prediction) for g in golds)
    if not has_answer:
        raise data.SquadFormatError(f"{source}: no questions")

    probs = {q: 0.0 for q in predictions} if na_probs is None else na_probs
    for qid in has_answer:
        if qid in predictions and qid not in probs:
            raise data.SquadFormatError(f"na-prob file has no entry for question id {qid!r}")

    def thresholded(raw: Mapping[str, float]) -> dict[str, float]:
        out = {}
        for qid, score in raw.items():
            if qid in predictions and probs[qid] > na_prob_thresh:
                score = float(not has_answer[qid])
            out[qid] = score
        return out

    exact, f1 = thresholded(exact_raw), thresholded(f1_raw)
    result = {}
    for prefix, qids in (("", list(has_answer)),
                         ("HasAns_", [q for q, h in has_answer.items() if h]),
                         ("NoAns_", [q for q, h in has_answer.items() if not h])):
        if not qids:
            continue
        result[prefix + "exact"], total = _mean_percent(exact, qids)
        result[prefix + "f1"], _ = _mean_percent(f1, qids)
        result[prefix + "total"] = total
    if na_probs is not None:
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(
            predictions, exact_raw, na_probs, has_answer)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(
            predictions, f1_raw, na_probs, has_answer)
    return result


# --- entry points -----------------------------------------------------------

def evaluate(dataset: dict, predictions: Mapping[str, str],
             na_probs: Mapping[str, float] | None = None, na_prob_thresh: float = 1.0,
             version: str | None = None, source: str = "<dataset>") -> dict:
    """Evaluates with the official script matching the data (or ``version`` '1.1'/'2.0')."""
    v2 = data.is_version_2(dataset) if version in (None, "auto") else version.startswith("2")
    if not v2:
        if na_probs is not None:
            raise data.SquadFormatError("a na-prob file applies to SQuAD 2.0 data only")
        return evaluate_v1(dataset, predictions, source)
    return evaluate_v2(dataset, predictions, na_probs, na_prob_thresh, source)


def load_predictions(path: str) -> dict[str, str]:
    """Reads {question id: answer text}; anything else raises SquadFormatError."""
    predictions = data.load_json(path, "prediction file")
    if not isinstance(predictions, dict):
        raise data.SquadFormatError(f"prediction file {path}: expected a JSON object id -> answer")
    for qid, text in predictions.items():
        if not isinstance(text, str):
            raise data.SquadFormatError(
                f"prediction file {path}: answer for question id {qid!r} is not a string: {text!r}")
    return predictions


def load_na_probs(path: str) -> dict[str, float]:
    """Reads {question id: no-answer score}; scores must be numbers."""
    probs = data.load_json(path, "na-prob file")
    if not isinstance(probs, dict):
        raise data.SquadFormatError(f"na-prob file {path}: expected a JSON object id -> number")
    for qid, value in probs.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise data.SquadFormatError(
                f"na-prob file {path}: value for question id {qid!r} is not a number: {value!r}")
    return probs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m albert_tf.squad.evaluate",
        description="SQuAD 1.1/2.0 evaluation with the official scripts' definitions.")
    parser.add_argument("data_file", metavar="DATA_JSON")
    parser.add_argument("pred_file", metavar="PRED_JSON")
    parser.add_argument("--na-prob-file", "-n", default=None,
                        help="2.0: JSON id -> no-answer score (e.g. null_odds.json)")
    parser.add_argument("--na-prob-thresh", "-t", type=float, default=1.0,
                        help="2.0: predict no-answer when the score exceeds this (default 1.0)")
    parser.add_argument("--squad-version", choices=("auto", "1.1", "2.0"), default="auto",
                        help="override the version read from the data")
    args = parser.parse_args(argv)
    try:
        dataset = data.load_squad(args.data_file)
        predictions = load_predictions(args.pred_file)
        na_probs = load_na_probs(args.na_prob_file) if args.na_prob_file else None
        result = evaluate(dataset, predictions, na_probs, args.na_prob_thresh,
                          args.squad_version, source=args.data_file)
    except data.SquadFormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
