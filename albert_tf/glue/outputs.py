"""The original's GLUE output files, written atomically (temp name + os.replace).

- `eval_results.txt`: per evaluated checkpoint, sorted `key = value` lines, then
  `best = <best key metric so far>` and a line of 50 `=`, as the original writes it.
  (`best_trial.txt` and `model.ckpt-best` are kept by the training package's
  `BestCheckpointKeeper`.)
- `test_results.tsv`: one line per test example: class probabilities tab-separated,
  or the predicted score for STS-B.
- `submit_results.tsv`: `index<TAB>prediction` header, then the example's guid (the
  GLUE test index) and the predicted label string (the score for STS-B): the file
  the GLUE server takes once renamed to `TaskSpec.submission_file` (e.g. MNLI-mm.tsv).
"""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

from albert_tf.fileio import atomic_write_text
from albert_tf.glue.processors import InputExample, TaskSpec

EVAL_RESULTS_FILE = "eval_results.txt"
TEST_RESULTS_FILE = "test_results.tsv"
SUBMIT_RESULTS_FILE = "submit_results.tsv"


def format_value(value) -> str:
    """Shortest text that reads back to the same number, in the value's own precision
    (float32 probabilities print as the original's str(np.float32) did)."""
    if isinstance(value, np.floating):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (np.integer, int)):
        return str(int(value))
    return str(value)


def format_eval_block(results: Mapping[str, object], best: float | None = None) -> str:
    lines = [f"{key} = {format_value(results[key])}" for key in sorted(results)]
    if best is not None:
        lines.append(f"best = {format_value(best)}")
    lines.append("=" * 50)
    return "\n".join(lines) + "\n"


def append_eval_block(path: str | os.PathLike, block: str) -> None:
    """Adds one checkpoint's block to eval_results.txt (rewritten atomically)."""
    previous = ""
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            previous = f.read()
    atomic_write_text(path, previous + block)


def write_predictions(
    output_dir: str | os.PathLike,
    spec: TaskSpec,
    examples: Sequence[InputExample],
    outputs: np.ndarray,
    predictions: np.ndarray | None = None,
) -> tuple[str, str]:
    """Writes test_results.tsv and submit_results.tsv; returns their paths.

    Args:
      output_dir: where to write.
      spec: the task (label strings; regression or not).
      examples: the test examples in file order (their guids index the submission).
      outputs: [N, num_labels] probabilities, or [N] scores for STS-B; padding rows
        must already be removed.
      predictions: optional [N] class ids (e.g. after a decision threshold);
        default argmax of `outputs`.
    """
    outputs = np.asarray(outputs)
    if outputs.shape[0] != len(examples):
        raise ValueError(
            f"{len(examples)} test examples but {outputs.shape[0]} predictions: every "
            f"example must get exactly one prediction"
        )
    if spec.is_regression:
        scores = outputs.reshape(-1)
        result_lines = [format_value(s) for s in scores]
        submit = [format_value(s) for s in scores]
    else:
        probs = outputs.reshape(len(examples), spec.num_labels)
        ids = np.argmax(probs, axis=-1) if predictions is None else np.asarray(predictions)
        result_lines = ["\t".join(format_value(p) for p in row) for row in probs]
        submit = [spec.labels[int(i)] for i in ids]
    test_results = os.path.join(output_dir, TEST_RESULTS_FILE)
    submit_results = os.path.join(output_dir, SUBMIT_RESULTS_FILE)
    atomic_write_text(test_results, "".join(line + "\n" for line in result_lines))
    atomic_write_text(
        submit_results,
        "index\tprediction\n" + "".join(f"{e.guid}\t{p}\n" for e, p in zip(examples, submit)),
    )
    return test_results, submit_results
