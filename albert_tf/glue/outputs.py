"""The original's GLUE output files, written atomically (temp name + os.replace).

- `eval_results.txt`: per evaluated checkpoint, sorted `key = value` lines, then
  `best = <best key metric so far>` and a line of 50 `=`, as the original writes it
  (`RESULTS_LAYOUT`; the training package's `CheckpointEvaluator` writes it and keeps
  `best_trial.txt` and `model.ckpt-best`).
- `test_results.tsv`: one line per test example: class probabilities tab-separated,
  or the predicted score for STS-B.
- `submit_results.tsv`: `index<TAB>prediction` header, then the example's guid (the
  GLUE test index) and the predicted label string (the score for STS-B): the file
  the GLUE server takes once renamed to `TaskSpec.submission_file` (e.g. MNLI-mm.tsv).
"""
from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from albert_tf.fileio import atomic_write_texts
from albert_tf.glue.processors import InputExample, TaskSpec
from albert_tf.training.results import ResultsLayout, format_value

TEST_RESULTS_FILE = "test_results.tsv"
SUBMIT_RESULTS_FILE = "submit_results.tsv"
# The original run_classifier's eval_results.txt: sorted keys, the best key metric so
# far, a rule after each evaluated checkpoint (written by albert_tf.training.results).
RESULTS_LAYOUT = ResultsLayout(sort_keys=True, best_line=True, separator="=" * 50)


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
    atomic_write_texts({  # together: a kill leaves both files of one run
        test_results: "".join(line + "\n" for line in result_lines),
        submit_results: "index\tprediction\n" + "".join(f"{e.guid}\t{p}\n" for e, p in zip(examples, submit)),
    })
    return test_results, submit_results
