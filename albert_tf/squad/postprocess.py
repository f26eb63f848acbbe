"""From per-window model outputs to answers: n-best lists, predictions and null odds.

As ALBERT's ``accumulate_predictions_v1/v2`` + ``write_predictions_v1/v2``:

- Candidates per window: v1 the best ``n_best_size`` starts × ends by logit;
  v2 the model's beam (``start_n_top`` × ``end_n_top``). A candidate is kept
  when start and end lie in the window's context, the window is the start
  piece's max-context window, end >= start and the span has at most
  ``max_answer_length`` pieces.
- Windows are combined as the original does: the candidates of all windows of a
  question form one list ranked by start + end score; the text of a span is
  the original context from its first piece's first character to its last
  piece's last character, stripped; repeated texts keep their best score; the
  first ``n_best_size`` texts form the n-best, with softmax probabilities.
- Empty texts are skipped (an empty span is no answer; 2.0 answers "no answer"
  through the threshold). If a 1.1 question has no candidate in the n-best
  grid, every start × end of its windows is searched (the original answered
  "empty"); a 2.0 question without candidates gets "" as the original.
- 2.0: the null score of a question is the minimum ``cls_logits`` over its
  windows (written to ``null_odds.json``); the prediction is "" when that
  score exceeds ``null_score_diff_threshold`` (strictly, the official
  evaluator's convention for na-probs), else the best non-null text.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
from typing import Mapping, Sequence

import numpy as np

from albert_tf.squad.data import SquadExample
from albert_tf.fileio import atomic_write_texts
from albert_tf.progress import Progress
from albert_tf.squad.records import FeatureMeta
from albert_tf.training.results import ResultsLayout, format_eval_results

PREDICTIONS_FILE = "predictions.json"
NBEST_FILE = "nbest_predictions.json"
NULL_ODDS_FILE = "null_odds.json"


@dataclasses.dataclass
class RawResultV1:
    unique_id: int
    start_logits: np.ndarray  # [S]
    end_logits: np.ndarray    # [S]


@dataclasses.dataclass
class RawResultV2:
    unique_id: int
    start_top_log_probs: np.ndarray  # [start_n_top]
    start_top_index: np.ndarray
    end_top_log_probs: np.ndarray    # [start_n_top * end_n_top]
    end_top_index: np.ndarray
    cls_logits: float


@dataclasses.dataclass
class Candidate:
    feature: FeatureMeta
    start: int  # piece index within the window's context
    end: int
    start_score: float
    end_score: float

    @property
    def score(self) -> float:
        return self.start_score + self.end_score


@dataclasses.dataclass
class SquadPredictions:
    predictions: dict[str, str]                 # what predictions.json holds
    nbest: dict[str, list[dict]]
    null_odds: dict[str, float] | None = None   # 2.0 only
    best_non_null: dict[str, str] | None = None  # 2.0: answers before the threshold


def _valid(meta: FeatureMeta, start: int, end: int, max_answer_length: int) -> bool:
    s, e = start - meta.doc_offset, end - meta.doc_offset
    n = len(meta.tok_start_to_orig_index)
    return (0 <= s < n and 0 <= e < n and meta.token_is_max_context[s]
            and e >= s and e - s + 1 <= max_answer_length)


def _top_indexes(scores: np.ndarray, n: int) -> np.ndarray:
    return np.argsort(-np.asarray(scores), kind="stable")[:n]


def v1_candidates(meta: FeatureMeta, result: RawResultV1, n_best_size: int,
                  max_answer_length: int) -> list[Candidate]:
    # Vectorised over the n × n grid (the rules of _valid); row-major order as the original.
    starts = _top_indexes(result.start_logits, n_best_size)
    ends = _top_indexes(result.end_logits, n_best_size)
    s = starts[:, None] - meta.doc_offset
    e = ends[None, :] - meta.doc_offset
    n = len(meta.tok_start_to_orig_index)
    max_context = np.asarray(meta.token_is_max_context, bool)
    ok = (s >= 0) & (s < n) & (e >= 0) & (e < n) & (e >= s) & (e - s + 1 <= max_answer_length)
    ok &= max_context[np.clip(s, 0, n - 1)]
    out = []
    for i, j in zip(*np.nonzero(ok)):
        start, end = int(starts[i]), int(ends[j])
        out.append(Candidate(meta, start - meta.doc_offset, end - meta.doc_offset,
                             float(result.start_logits[start]), float(result.end_logits[end])))
    return out


def v2_candidates(meta: FeatureMeta, result: RawResultV2, max_answer_length: int) -> list[Candidate]:
    k1 = len(result.start_top_index)
    k2 = len(result.end_top_index) // k1
    out = []
    for i in range(k1):
        start = int(result.start_top_index[i])
        for j in range(k2):
            end = int(result.end_top_index[i * k2 + j])
            if _valid(meta, start, end, max_answer_length):
                out.append(Candidate(meta, start - meta.doc_offset, end - meta.doc_offset,
                                     float(result.start_top_log_probs[i]),
                                     float(result.end_top_log_probs[i * k2 + j])))
    return out


def _softmax(scores: Sequence[float]) -> list[float]:
    top = max(scores)
    exps = [math.exp(s - top) for s in scores]
    total = 0.0
    for e in exps:  # left to right, as the original: sum() of floats is compensated from Python 3.12
        total += e
    return [e / total for e in exps]


def _nbest(example: SquadExample, candidates: list[Candidate], n_best_size: int) -> list[dict]:
    entries, seen = [], set()
    for cand in sorted(candidates, key=lambda c: c.score, reverse=True):
        if len(entries) >= n_best_size:
            break
        first = cand.feature.tok_start_to_orig_index[cand.start]
        last = cand.feature.tok_end_to_orig_index[cand.end]
        text = example.paragraph_text[first:last + 1].strip()
        if not text or text in seen:
            continue
        seen.add(text)
        entries.append({"text": text, "start_log_prob": cand.start_score,
                        "end_log_prob": cand.end_score})
    if entries:
        for entry, p in zip(entries, _softmax([e["start_log_prob"] + e["end_log_prob"] for e in entries])):
            entry["probability"] = p
    # The original's key order: text, probability, start_log_prob, end_log_prob.
    return [{"text": e["text"], "probability": e["probability"],
             "start_log_prob": e["start_log_prob"], "end_log_prob": e["end_log_prob"]} for e in entries]


def _group_features(examples: Sequence[SquadExample], metas: Sequence[FeatureMeta],
                    results: Mapping[int, object]) -> list[list[FeatureMeta]]:
    by_example: list[list[FeatureMeta]] = [[] for _ in examples]
    for meta in metas:
        by_example[meta.example_index].append(meta)
    for example, feats in zip(examples, by_example):
        if not feats:
            raise ValueError(f"question id {example.qas_id!r} has no features")
        missing = [m.unique_id for m in feats if m.unique_id not in results]
        if missing:
            raise ValueError(f"question id {example.qas_id!r}: no model output for feature(s) {missing}")
    return by_example


def _answers_progress(examples: Sequence[SquadExample]) -> Progress:
    """Progress lines while the answers are chosen (about 30 s for 2.0's 11,873 dev questions, after the
    prediction's own lines: nothing was printed then)."""
    return Progress("SQuAD answers", total_batches=len(examples), unit="question")


def predict_v1(examples: Sequence[SquadExample], metas: Sequence[FeatureMeta],
               results: Mapping[int, RawResultV1], n_best_size: int = 20,
               max_answer_length: int = 30) -> SquadPredictions:
    predictions, all_nbest = collections.OrderedDict(), collections.OrderedDict()
    progress = _answers_progress(examples)
    for example, feats in zip(examples, _group_features(examples, metas, results)):
        cands = [c for m in feats for c in v1_candidates(m, results[m.unique_id], n_best_size,
                                                          max_answer_length)]
        nbest = _nbest(example, cands, n_best_size)
        if not nbest:  # search the whole grid rather than answer nothing
            cands = [c for m in feats for c in v1_candidates(
                m, results[m.unique_id], len(results[m.unique_id].start_logits), max_answer_length)]
            nbest = _nbest(example, cands, n_best_size)
        if not nbest:
            nbest = [{"text": "", "probability": 1.0, "start_log_prob": 0.0, "end_log_prob": 0.0}]
        predictions[example.qas_id] = nbest[0]["text"]
        all_nbest[example.qas_id] = nbest
        progress.add(1, 1)
    return SquadPredictions(predictions, all_nbest)


def predict_v2(examples: Sequence[SquadExample], metas: Sequence[FeatureMeta],
               results: Mapping[int, RawResultV2], n_best_size: int = 20,
               max_answer_length: int = 30, null_score_diff_threshold: float = 0.0
               ) -> SquadPredictions:
    predictions, all_nbest = collections.OrderedDict(), collections.OrderedDict()
    null_odds, best_non_null = collections.OrderedDict(), collections.OrderedDict()
    progress = _answers_progress(examples)
    for example, feats in zip(examples, _group_features(examples, metas, results)):
        cands = [c for m in feats for c in v2_candidates(m, results[m.unique_id], max_answer_length)]
        nbest = _nbest(example, cands, n_best_size)
        if not nbest:
            nbest = [{"text": "", "probability": 1.0, "start_log_prob": -1e6, "end_log_prob": -1e6}]
        score_null = min(float(results[m.unique_id].cls_logits) for m in feats)
        null_odds[example.qas_id] = score_null
        best_non_null[example.qas_id] = nbest[0]["text"]
        predictions[example.qas_id] = "" if score_null > null_score_diff_threshold else nbest[0]["text"]
        all_nbest[example.qas_id] = nbest
        progress.add(1, 1)
    return SquadPredictions(predictions, all_nbest, null_odds, best_non_null)


def write_prediction_files(output_dir: str, result: SquadPredictions) -> list[str]:
    """predictions.json, nbest_predictions.json and (2.0) null_odds.json, atomically and together."""
    files = [(PREDICTIONS_FILE, result.predictions), (NBEST_FILE, result.nbest)]
    if result.null_odds is not None:
        files.append((NULL_ODDS_FILE, result.null_odds))
    # The original's bytes (non-ASCII as \u escapes); the files replaced together, so a kill leaves no mixed set.
    return atomic_write_texts({os.path.join(output_dir, name): json.dumps(payload, indent=4) + "\n"
                               for name, payload in files})


TUNED_KEYS = ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh", "original_exact", "original_f1")
# eval_results.txt of a run that scores no checkpoint (one set of weights answers once): the
# evaluator's keys in its order (the original's); for 2.0 the thresholds tuned on the evaluated data
# come last under a comment saying so. Each run adds a block closed by a rule, as every other
# eval_results.txt: a second run (another --null_score_diff_threshold) keeps the first's scores.
_TUNED_COMMENT = ("# tuned on this data (optimistic): the best null threshold chosen on the questions it is "
                  "scored on; use --null_score_diff_threshold for new data")
RESULTS_LAYOUT = ResultsLayout(sort_keys=False, separator="=" * 50, tuned_keys=TUNED_KEYS,
                               tuned_comment=_TUNED_COMMENT)


def key_metric(version_2: bool) -> str:
    """What selects model.ckpt-best, as the original: F1; for 2.0 the original's "f1", which we
    report as ``original_f1`` (``evaluate_predictions``)."""
    return "original_f1" if version_2 else "f1"


def checkpoint_layout(version_2: bool) -> ResultsLayout:
    """The original's blocks when every checkpoint is scored: sorted keys, ``best f1 = ``,
    a rule of 50 ``=``; one block per checkpoint."""
    return ResultsLayout(sort_keys=True, best_line=True, best_label=f"best {key_metric(version_2)}",
                         separator="=" * 50, tuned_keys=TUNED_KEYS, tuned_comment=_TUNED_COMMENT, append=True)


def final_block(metrics: dict, step: int, version_2: bool) -> str:
    """The block the original ended eval_results.txt with: the best checkpoint's results
    and the step it was saved at."""
    layout = ResultsLayout(sort_keys=True, tuned_keys=TUNED_KEYS, tuned_comment=_TUNED_COMMENT)
    return format_eval_results(metrics, layout) + f"best perf happened at step: {step}\n"


def evaluate_predictions(dataset: dict, result: SquadPredictions,
                         null_score_diff_threshold: float = 0.0) -> dict:
    """Official metrics of the written predictions. 2.0 adds the threshold used
    and the best thresholds (``TUNED_KEYS``), which are tuned on this data."""
    from albert_tf.squad import evaluate

    if result.null_odds is None:
        return evaluate.evaluate(dataset, result.predictions)
    metrics = evaluate.evaluate(dataset, result.best_non_null, na_probs=result.null_odds,
                                na_prob_thresh=null_score_diff_threshold, version="2.0")
    metrics["null_score_diff_threshold"] = null_score_diff_threshold
    metrics.update(original_v2_scores(dataset, result, metrics["best_f1_thresh"]))
    return metrics


def original_v2_scores(dataset: dict, result: SquadPredictions, best_f1_thresh: float) -> dict:
    """What the original run_squad_v2.py reported as "exact" and "f1" (and chose model.ckpt-best by):
    the predictions made again at ``best_f1_thresh``, answering only where the null score is below it,
    then scored by the official script at its default na_prob_thresh of 1.0.  Not ``best_f1``: the
    question whose null score sets the threshold is answered there and left unanswered here."""
    from albert_tf.squad import evaluate

    remade = {qid: "" if result.null_odds[qid] >= best_f1_thresh else text
              for qid, text in result.best_non_null.items()}
    scores = evaluate.evaluate(dataset, remade, na_probs=result.null_odds, na_prob_thresh=1.0, version="2.0")
    return {"original_exact": scores["exact"], "original_f1": scores["f1"]}
