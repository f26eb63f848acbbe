"""RACE's metrics and output files.

Metrics are computed in numpy over the whole split from the gathered logits (padding
rows already removed): `eval_accuracy` and `eval_loss` (mean cross-entropy over the
four choices), the original's keys, plus `eval_accuracy_middle` / `eval_accuracy_high`
(each level's accuracy, when the split has it). `eval_accuracy` selects `model.ckpt-best`.

Files (atomic):
- `eval_results.txt`: per evaluated checkpoint, sorted `key = value` lines, `best = `
  and a rule of 50 `=`, as the original's run_race (its eval loop was run_classifier's);
- `predict_results.txt`: the original's header line `***** Predict results *****`, then
  the test split's metrics as sorted `key = value` lines;
- `test_predictions.jsonl`: one JSON line per question, in file order: `id`,
  `question_index`, `prediction` (the letter), `probabilities` (four floats).
"""
from __future__ import annotations

import json
import os
from typing import Sequence

import numpy as np

from albert_tf.fileio import atomic_write_text
from albert_tf.race.data import LETTERS, LEVELS, RaceExample
from albert_tf.training.results import ResultsLayout, format_eval_results

KEY_METRIC = "eval_accuracy"
RESULTS_LAYOUT = ResultsLayout(sort_keys=True, best_line=True, separator="=" * 50)
PREDICT_LAYOUT = ResultsLayout(sort_keys=True, append=False)
PREDICT_RESULTS_FILE = "predict_results.txt"
PREDICT_HEADER = "***** Predict results *****"  # the original's first line of predict_results.txt
PREDICTIONS_FILE = "test_predictions.jsonl"


def cross_entropy(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """[N] softmax cross-entropies of [N, 4] logits, computed stably in float64."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return -log_probs[np.arange(len(labels)), np.asarray(labels, np.int64)]


def compute_metrics(examples: Sequence[RaceExample], logits: np.ndarray) -> dict[str, float]:
    """The metrics of a split: `examples` and `logits` [N, 4] in the same order."""
    if len(examples) != len(logits):
        raise ValueError(f"{len(logits)} predictions for {len(examples)} RACE questions")
    labels = np.array([e.label for e in examples], np.int64)
    correct = np.argmax(logits, axis=-1) == labels
    results = {KEY_METRIC: float(correct.mean()), "eval_loss": float(cross_entropy(logits, labels).mean())}
    levels = np.array([e.level for e in examples])
    for level in LEVELS:
        chosen = levels == level
        if chosen.any():
            results[f"{KEY_METRIC}_{level}"] = float(correct[chosen].mean())
    return results


def write_predictions(output_dir: str, examples: Sequence[RaceExample], probabilities: np.ndarray) -> str:
    """`test_predictions.jsonl`: one line per question; returns its path."""
    if len(examples) != len(probabilities):
        raise ValueError(f"{len(probabilities)} predictions for {len(examples)} RACE questions")
    lines = [json.dumps({"id": e.id, "question_index": e.question_index,
                         "prediction": LETTERS[int(np.argmax(p))], "probabilities": [float(x) for x in p]})
             for e, p in zip(examples, probabilities)]
    return atomic_write_text(os.path.join(output_dir, PREDICTIONS_FILE), "".join(line + "\n" for line in lines))


def write_predict_results(output_dir: str, results: dict) -> str:
    return atomic_write_text(os.path.join(output_dir, PREDICT_RESULTS_FILE),
                             PREDICT_HEADER + "\n" + format_eval_results(results, PREDICT_LAYOUT))
