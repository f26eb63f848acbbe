"""GLUE metrics in plain numpy (float64), computed once over the whole eval set.

The original streams TF1 metrics and reports accuracy + loss, Matthews correlation
for CoLA, Pearson + MSE for STS-B. Users also want F1 (MRPC, QQP) and Spearman
(STS-B), the official GLUE metrics; they are added here. Names of the original's
keys are kept (`eval_accuracy`, `eval_loss`, `matthew_corr`, `pearson`, `MSE`) so
scripts that parse `eval_results.txt` keep working.

Which metrics a task reports is data: its `TaskSpec.metrics` names entries of
`METRICS` below (checked at import), so adding a task or a metric changes no code here.

Degenerate inputs (a constant prediction column) give 0.0 for correlations, as the
original's `div_no_nan`, rather than NaN: model selection must be able to compare.
"""
from __future__ import annotations

import numpy as np

from albert_tf.glue.processors import TASKS, TaskSpec, get_task_spec


def _as_1d(x, dtype=np.float64) -> np.ndarray:
    return np.asarray(x, dtype=dtype).reshape(-1)


def accuracy(labels, predictions) -> float:
    labels, predictions = _as_1d(labels, np.int64), _as_1d(predictions, np.int64)
    if labels.size == 0:
        return 0.0
    return float(np.mean(labels == predictions))


def confusion_counts(labels, predictions, positive: int = 1) -> tuple[int, int, int, int]:
    """(tp, tn, fp, fn) of a binary task, `positive` being the positive class id."""
    labels, predictions = _as_1d(labels, np.int64), _as_1d(predictions, np.int64)
    true_pos, pred_pos = labels == positive, predictions == positive
    tp = int(np.sum(true_pos & pred_pos))
    tn = int(np.sum(~true_pos & ~pred_pos))
    fp = int(np.sum(~true_pos & pred_pos))
    fn = int(np.sum(true_pos & ~pred_pos))
    return tp, tn, fp, fn


def f1_score(labels, predictions, positive: int = 1) -> float:
    """F1 of the positive class: 2tp / (2tp + fp + fn); 0 when there is nothing to score."""
    tp, _, fp, fn = confusion_counts(labels, predictions, positive)
    denominator = 2 * tp + fp + fn
    return 0.0 if denominator == 0 else 2.0 * tp / denominator


def matthews_corrcoef(labels, predictions, positive: int = 1) -> float:
    """Binary Matthews correlation (tp·tn − fp·fn) / √((tp+fp)(tp+fn)(tn+fp)(tn+fn)) (the same whichever
    class is positive: swapping them swaps tp with tn and fp with fn)."""
    tp, tn, fp, fn = (float(c) for c in confusion_counts(labels, predictions, positive))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return 0.0 if denominator == 0 else float((tp * tn - fp * fn) / denominator)


def pearson_corr(x, y) -> float:
    x, y = _as_1d(x), _as_1d(y)
    if x.size < 2:
        return 0.0
    dx, dy = x - x.mean(), y - y.mean()
    denominator = np.sqrt(np.sum(dx * dx) * np.sum(dy * dy))
    return 0.0 if denominator == 0 else float(np.sum(dx * dy) / denominator)


def average_ranks(x) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they span."""
    x = _as_1d(x)
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    # Start index of each run of equal values in sorted order.
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], x.size]
    run_rank = (starts + 1 + ends) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(x.size, dtype=np.float64)
    ranks[order] = np.repeat(run_rank, ends - starts)
    return ranks


def spearman_corr(x, y) -> float:
    """Spearman's rho: Pearson correlation of the average ranks (handles ties)."""
    return pearson_corr(average_ranks(x), average_ranks(y))


def mean_squared_error(labels, predictions) -> float:
    labels, predictions = _as_1d(labels), _as_1d(predictions)
    return 0.0 if labels.size == 0 else float(np.mean((labels - predictions) ** 2))


def log_softmax(logits) -> np.ndarray:
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=-1, keepdims=True))


# Metric name -> fn(gold, predicted, positive): predicted is the class id for classification
# (F1 of the positive class id `positive`, TaskSpec.positive_id; binary Matthews correlation), the
# score for regression.
METRICS = {
    "eval_accuracy": lambda gold, predicted, positive: accuracy(gold, predicted),
    "f1": lambda gold, predicted, positive: f1_score(gold, predicted, positive),
    "matthew_corr": lambda gold, predicted, positive: matthews_corrcoef(gold, predicted, positive),
    "pearson": lambda gold, predicted, positive: pearson_corr(predicted, gold),
    "spearman": lambda gold, predicted, positive: spearman_corr(predicted, gold),
    "MSE": lambda gold, predicted, positive: mean_squared_error(gold, predicted),
}
for _spec in TASKS.values():
    _unknown = [m for m in _spec.metrics if m not in METRICS]
    if _unknown:
        raise ValueError(f"GLUE task {_spec.name} lists metrics {_unknown} that albert_tf.glue.metrics does not "
                         f"compute (known: {', '.join(METRICS)})")


def key_metric(task_name: str) -> str:
    """The metric that selects the best checkpoint (the original's choice)."""
    return get_task_spec(task_name).key_metric


def compute_glue_metrics(task_name: str, labels, logits, is_real_example=None) -> dict[str, float]:
    """``compute_metrics`` of a GLUE task by name."""
    return compute_metrics(get_task_spec(task_name), labels, logits, is_real_example)


def compute_metrics(spec: TaskSpec, labels, logits, is_real_example=None) -> dict[str, float]:
    """All eval metrics of a task from model outputs.

    Args:
      spec: the task (a GLUE task's, or a user's classification data's).
      labels: [N] class ids, or float scores for STS-B.
      logits: [N, num_labels] logits, or [N] (or [N, 1]) scores for STS-B.
      is_real_example: optional [N] 0/1; rows with 0 (batch padding) are ignored.

    Returns keys (sorted in `eval_results.txt`): `eval_loss` (mean cross-entropy,
    or mean squared error for STS-B) and `num_examples` for every task, and the
    task's `TaskSpec.metrics` (e.g. `eval_accuracy` and `f1` for MRPC; `pearson`,
    `spearman`, `MSE` for STS-B).
    """
    logits = np.asarray(logits, dtype=np.float64)
    keep = slice(None) if is_real_example is None else _as_1d(is_real_example) > 0
    if spec.is_regression:
        predicted = logits.reshape(-1)[keep]
        gold = _as_1d(labels)[keep]
        loss = mean_squared_error(gold, predicted)
    else:
        logits = logits.reshape(-1, spec.num_labels)[keep]
        gold = _as_1d(labels, np.int64)[keep]
        predicted = np.argmax(logits, axis=-1)
        nll = -log_softmax(logits)[np.arange(gold.size), gold]
        loss = float(nll.mean()) if gold.size else 0.0
    results: dict[str, float] = {"eval_loss": loss}
    positive = None if spec.is_regression else spec.positive_id
    results.update({name: METRICS[name](gold, predicted, positive) for name in spec.metrics})
    results["num_examples"] = int(gold.size)
    return results
