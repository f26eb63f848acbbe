"""``eval_results.txt``: the one writer, with each driver's layout as data.

The original wrote ``key = value`` lines; each of its drivers added something:
run_classifier a ``best = <best so far>`` line and a rule of 50 ``=`` after each
evaluated checkpoint, run_squad keys in the evaluator's order. A ``ResultsLayout``
says which; ``format_eval_results`` and ``write_eval_results`` do the rest. The
layouts of our drivers live with them (``pretraining.RESULTS_LAYOUT``,
``glue.outputs.RESULTS_LAYOUT``, ``squad.postprocess.RESULTS_LAYOUT``).

Pure Python (no TensorFlow): the GLUE output writers import ``format_value``.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Mapping

import numpy as np

from albert_tf.errors import RunError
from albert_tf.fileio import atomic_write_text, read_text

EVAL_RESULTS_FILE = "eval_results.txt"


@dataclasses.dataclass(frozen=True)
class ResultsLayout:
    """How one driver writes its evaluations.

    sort_keys: keys in sorted order (the original's ``sorted(result.keys())``), else as given.
    best_line: add ``<best_label> = <value>`` (the best key metric so far) to each block.
    best_label: that line's name (run_classifier's "best", run_squad's "best f1").
    separator: a line closing each block ("" for none).
    tuned_keys / tuned_comment: keys written last, under a comment saying why.
    append: each evaluation adds a block (one per checkpoint) instead of replacing the file.
    """

    sort_keys: bool = True
    best_line: bool = False
    best_label: str = "best"
    separator: str = ""
    tuned_keys: tuple[str, ...] = ()
    tuned_comment: str = ""
    append: bool = True


def format_value(value) -> str:
    """Shortest text that reads back to the same number, in the value's own precision
    (float32 values print as the original's str(np.float32) did)."""
    if isinstance(value, np.floating):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (np.integer, int)):
        return str(int(value))
    return str(value)


def format_inline(results: Mapping[str, object]) -> str:
    """``key = value, ...`` in the given order, each value as the result files print it (``format_value``):
    a log line shows the digits eval_results.txt has, as the original's ``str(result[key])`` did."""
    return ", ".join(f"{key} = {format_value(value)}" for key, value in results.items())


def as_float32(results: Mapping[str, object]) -> dict[str, object]:
    """``results`` with each float as ``np.float32``, the type of the original Estimator's metrics, so
    that they print as its eval_results.txt did (``format_value``); the extra float64 digits are below
    the precision of the float32 model outputs. Integers (``global_step``) stay as they are."""
    return {k: np.float32(v) if isinstance(v, (float, np.floating)) else v for k, v in results.items()}


def format_eval_results(results: Mapping[str, object], layout: ResultsLayout, best: float | None = None) -> str:
    """One block of ``key = value`` lines as ``layout`` says."""
    keys = [k for k in results if k not in layout.tuned_keys]
    if layout.sort_keys:
        keys = sorted(keys)
    lines = [f"{key} = {format_value(results[key])}" for key in keys]
    tuned = [k for k in layout.tuned_keys if k in results]
    if tuned:
        lines.append(layout.tuned_comment)
        lines += [f"{key} = {format_value(results[key])}" for key in tuned]
    if layout.best_line and best is not None:
        lines.append(f"{layout.best_label} = {format_value(best)}")
    if layout.separator:
        lines.append(layout.separator)
    return "\n".join(lines) + "\n"


def write_eval_results(path: str | os.PathLike, results: Mapping[str, object], layout: ResultsLayout,
                       best: float | None = None) -> str:
    """Writes (or, with ``layout.append``, adds) one block to ``path`` atomically; local or remote."""
    block = format_eval_results(results, layout, best)
    previous = (read_run_text(path) or "") if layout.append else ""
    return atomic_write_text(path, previous + block)


def read_run_text(path: str | os.PathLike) -> str | None:
    """``read_text`` of a file a run keeps adding to or reads back (``eval_results.txt``,
    ``best_trial.txt``): bytes that are not UTF-8 (a hand edit, a damaged disk) are one line naming it."""
    try:
        return read_text(path)
    except UnicodeDecodeError as e:
        raise RunError(f"{os.fspath(path)} is not UTF-8 text (byte {e.start}); the run reads it back: "
                       f"fix it or move it away") from None


def read_eval_results(path: str | os.PathLike) -> dict[str, str]:
    """Parses an ``eval_results.txt`` (last value of each key wins; comments and rules skipped)."""
    results = {}
    for line in (read_run_text(path) or "").splitlines():
        if " = " in line and not line.startswith("#"):
            key, value = line.split(" = ", 1)
            results[key] = value
    return results
