"""After each save: evaluate the checkpoint once, keep the best, write ``eval_results.txt``.

``CheckpointEvaluator`` is the save hook the drivers give the Trainer: it evaluates each
checkpoint once, before pruning can delete it, keeps the best by one metric as
``model.ckpt-best`` (``best_trial.txt``) and adds a block to ``eval_results.txt``. So
pretraining and GLUE evaluate after each save the same way. Checkpoints left by an earlier
run are found on disk (the state file is not trusted); damaged ones are skipped with a warning.
"""
from __future__ import annotations

import math
import os
from typing import Any, Callable, Mapping

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.errors import RunError
from albert_tf.fileio import atomic_write_text, is_remote
from albert_tf.training import faults
from albert_tf.training.results import (EVAL_RESULTS_FILE, ResultsLayout, format_eval_results, format_value,
                                       read_run_text, write_eval_results)
from albert_tf.weights import files

BEST_TRIAL_FILENAME = "best_trial.txt"


class BestCheckpointKeeper:
    """Keeps the best checkpoint by one eval metric as ``model.ckpt-best``.

    ``best_trial.txt`` holds ``<last evaluated step>:<best step>:<best value>``, the
    original run_classifier's format, so the choice survives reruns.
    """

    def __init__(self, output_dir: str, metric: str, higher_is_better: bool = True):
        self.output_dir = output_dir
        self.metric = metric
        self.higher_is_better = higher_is_better
        self.best_prefix = os.path.join(output_dir, files.BEST_BASENAME)
        self.info_path = os.path.join(output_dir, BEST_TRIAL_FILENAME)

    def check_ours(self) -> None:
        """Refuses (one line) a ``model.ckpt-best`` that no evaluation here wrote: ours always has
        ``best_trial.txt`` beside it (written before the first copy), as the original's has. Google's
        releases ship a ``model.ckpt-best``: an --output_dir holding one must not lose it."""
        if tf.io.gfile.exists(self.best_prefix + ".index") and not tf.io.gfile.exists(self.info_path):
            raise RunError(f"{self.best_prefix} is not from an evaluation in this folder (there is no "
                           f"{BEST_TRIAL_FILENAME} beside it): not replacing it; give another --output_dir, "
                           f"or move it away")

    def read(self) -> tuple[int, int, float | None]:
        """(last evaluated step, best step, best value); (-1, -1, None) before any."""
        text = read_run_text(self.info_path)
        if text is None:
            return -1, -1, None
        try:
            last, best_step, value = text.strip().split(":")
            last_step, best_step, best = int(last), int(best_step), float(value)
        except ValueError:
            # Deleting it would evaluate every checkpoint again and replace model.ckpt-best by the
            # best of those still on disk: the way out is to restore it.
            raise RunError(
                f"{self.info_path} holds {text.strip()[:80]!r}, not '<last evaluated step>:<best step>:"
                f"<best value>': write those back (the last block of eval_results.txt has them), or move it "
                f"and model.ckpt-best away to choose the best checkpoint again") from None
        return last_step, best_step, None if math.isnan(best) else best  # NaN: nothing best yet

    def update(self, checkpoint_path: str, results: Mapping[str, Any],
               before_recording: Callable[[float | None], None] | None = None) -> bool:
        """Records an evaluation; copies the checkpoint to ``model.ckpt-best`` if it is the
        best so far.  Returns whether it was. ``before_recording(best so far)`` runs (e.g. writes the
        results) after the copy and before ``best_trial.txt`` marks the step evaluated: when it fails, a
        rerun evaluates the step again (at worst a repeated results block, never a lost one)."""
        if self.metric not in results:
            raise KeyError(f"eval results have no {self.metric!r} (got {', '.join(sorted(results))})")
        # Both sides as this version writes them (float32 metrics print as the original's str(np.float32)),
        # so equal values stay equal: also a best that an earlier version wrote as a float64 repr
        # (0.6666666666666666, where the equal float32 prints 0.6666667).
        kind = type(results[self.metric]) if isinstance(results[self.metric], np.floating) else float
        value = _as_written(results[self.metric], kind)
        step = files.step_of(checkpoint_path)
        step = -1 if step is None else step
        _, best_step, best = self.read()
        best = None if best is None else _as_written(best, kind)
        # A NaN metric is never the best (and a NaN best could never be beaten: every comparison is False).
        better = not math.isnan(value) and (best is None or (value > best if self.higher_is_better
                                                               else value < best))
        if math.isnan(value):
            logging.warning("%s = nan at step %d: this checkpoint cannot be the best", self.metric, step)
        if better:
            self.check_ours()
            if not tf.io.gfile.exists(self.info_path):  # first: it marks the model.ckpt-best to come as ours
                atomic_write_text(self.info_path, "-1:-1:nan")  # nothing evaluated yet
            self._copy_to_best(checkpoint_path)
            best_step, best = step, value
            logging.info("New best %s = %s at step %d: copied to %s", self.metric, value, step, self.best_prefix)
        if before_recording is not None:
            before_recording(best)
        atomic_write_text(self.info_path, f"{step}:{best_step}:{float('nan') if best is None else best}")
        return better

    def _copy_to_best(self, checkpoint_path: str) -> None:
        """A full disk while copying is one line; the previous best stays whole (``files.copy_checkpoint``)."""
        try:
            files.copy_checkpoint(checkpoint_path, self.best_prefix)
        except (tf.errors.OpError, OSError) as e:
            reason = faults.disk_full_reason(e)
            if reason is None:
                raise
            raise faults.DiskFullError(
                f"{reason} copying {checkpoint_path} to {self.best_prefix} (the best so far): "
                f"the previous best is unchanged; free space and rerun to evaluate again") from e


def _mtime_ns(path: str) -> int:
    """A file's modification time: to the nanosecond on a local disk (the OS's), else as gfile has it."""
    return tf.io.gfile.stat(path).mtime_nsec if is_remote(path) else os.stat(path).st_mtime_ns


def _as_written(number: Any, kind: type) -> float:
    """``number`` as ``best_trial.txt`` holds a value of type ``kind`` (its ``format_value`` text)."""
    return float(format_value(kind(number)))


class CheckpointEvaluator:
    """Evaluates each checkpoint of a run once, in step order; keeps the best and writes
    ``eval_results.txt`` (in ``layout``).

    evaluate: ``evaluate(checkpoint_path) -> results``, run with the checkpoint's weights
      in the model (``after_save``: they are already; otherwise ``load`` puts them there,
      or ``evaluate`` reads them itself when ``load`` is None).
    writes: False on workers that take part in evaluation but write no file.
    """

    def __init__(self, output_dir: str, evaluate: Callable[[str], Mapping[str, Any]], key_metric: str,
                 layout: ResultsLayout, load: Callable[[str], None] | None = None,
                 higher_is_better: bool = True, writes: bool = True):
        self.output_dir = output_dir
        self.evaluate = evaluate
        self.load = load
        self.layout = layout
        self.writes = writes
        self.keeper = BestCheckpointKeeper(output_dir, key_metric, higher_is_better)
        self.damaged: list[str] = []  # why each checkpoint pending() left out is damaged
        if writes:
            self.keeper.check_ours()  # before any work
        self.results_path = os.path.join(output_dir, EVAL_RESULTS_FILE)

    def pending(self) -> list[str]:
        """The intact checkpoints (on disk or in the state file) that no evaluation has seen yet, oldest
        first; damaged ones are skipped with a warning naming them."""
        last, _, _ = self.keeper.read()
        fresh = [p for p in files.known_checkpoints(self.output_dir)
                 if files.step_of(p) is not None and files.step_of(p) > last]
        intact, damaged = [], []
        for prefix in fresh:
            reason = files.checkpoint_damage(prefix)
            if reason is None:
                intact.append(prefix)
            else:
                damaged.append(reason)
        if damaged:
            logging.warning("Not evaluating damaged checkpoint(s): %s.", "; ".join(damaged))
        self.damaged = damaged
        return intact

    def evaluate_pending(self, on_schedule: Callable[[int], bool] | None = None, eval_only: bool = False) -> int:
        """Evaluates each not-yet-evaluated checkpoint (left by an interrupted run, or an
        eval-only run's); returns how many. ``on_schedule(step)`` False: a resumed training run's
        checkpoint saved when it was stopped, off the --save_checkpoints_steps schedule. It is not a
        candidate for the best: an uninterrupted run has no such checkpoint. ``eval_only``: a run that
        only evaluates stops (one line) when every checkpoint it should evaluate is damaged, rather
        than end as if it had evaluated something."""
        paths = self.pending()
        if eval_only and not paths and self.damaged:
            raise RunError(f"no intact checkpoint to evaluate in {self.output_dir}: {'; '.join(self.damaged)}")
        if on_schedule is not None:
            off = [p for p in paths if not on_schedule(files.step_of(p))]
            if off:
                logging.info("Not evaluating %s: saved when the run was stopped, off the checkpoint schedule.",
                             ", ".join(off))
            paths = [p for p in paths if p not in off]
        for index, path in enumerate(paths):
            if self.load is not None:
                self.load(path)
            # Only the first can be a checkpoint a killed run had written the block of (see `_write_block`).
            self._record(path, self.evaluate(path), maybe_recorded=index == 0)
        return len(paths)

    def after_save(self, checkpoint_path: str) -> Mapping[str, Any]:
        """The Trainer's save hook: the model holds the checkpoint's weights."""
        results = self.evaluate(checkpoint_path)
        self._record(checkpoint_path, results)
        return results

    def evaluate_external(self, path: str) -> Mapping[str, Any]:
        """Evaluates a checkpoint from outside output_dir (e.g. --init_checkpoint): written,
        but never the best of this run."""
        if self.load is not None:
            self.load(path)
        results = self.evaluate(path)
        if self.writes:
            write_eval_results(self.results_path, results, self.layout)
        return results

    def _record(self, path: str, results: Mapping[str, Any], maybe_recorded: bool = False) -> None:
        if not self.writes:
            return
        # eval_results.txt first: a failed write leaves the step unrecorded, so a rerun evaluates it again.
        self.keeper.update(path, results, lambda best: self._write_block(path, results, best, maybe_recorded))

    def _written_since(self, checkpoint_path: str) -> bool:
        """Whether eval_results.txt was written after the checkpoint was saved (so it may hold its block).
        Equal times say no: at worst a block repeated, never one lost (gfile's times are whole seconds)."""
        try:
            return _mtime_ns(self.results_path) > _mtime_ns(checkpoint_path + ".index")
        except (tf.errors.OpError, OSError):
            return False

    def _write_block(self, checkpoint_path: str, results: Mapping[str, Any], best: float | None,
                     maybe_recorded: bool) -> None:
        """Adds the block of ``results`` to eval_results.txt, unless a run killed after writing it and before
        ``best_trial.txt`` recorded the step left it there: the rerun evaluates that checkpoint again (the same
        numbers: resume is exact), and appending it again repeated the block, which an uninterrupted run's file
        does not have. That is the first checkpoint a rerun evaluates (``maybe_recorded``), the file ending with
        that very block, written after the checkpoint was saved. Not any block equal to the last one: SQuAD's
        blocks have no step, and two checkpoints scoring the same (every answer empty, early in 2.0's training)
        wrote one block for both, the second step's evaluation logged and missing from the file."""
        block = format_eval_results(results, self.layout, best)
        if self.layout.append and maybe_recorded and self._written_since(checkpoint_path):
            previous = read_run_text(self.results_path) or ""
            if previous == block or previous.endswith("\n" + block):
                logging.info("%s already ends with this evaluation's block (a run stopped before recording "
                             "it): not adding it again.", self.results_path)
                return
        write_eval_results(self.results_path, results, self.layout, best)
