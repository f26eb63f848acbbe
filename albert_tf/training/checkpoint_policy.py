"""The training run's checkpoint policy: when it saves, what it keeps, how it resumes,
and what happens after a save (evaluation, the best checkpoint).

The files themselves (atomic prefixes, the ``checkpoint`` state file) are written by
``albert_tf.weights.files``; this module decides:

- interval: every ``save_checkpoints_steps`` steps, at the last step, and when a signal
  stops the run;
- retention: the newest ``keep_checkpoint_max`` checkpoints, each with its input
  positions (``model.ckpt-<step>.input-<worker>.*``, saved with the topology they were
  saved under); ``model.ckpt-best`` is never pruned;
- resume: from the newest checkpoint that reads back completely (``resume_point``), restoring
  the input position when the topology is the same, else fast-forwarding the input stream by
  the checkpoint's step count.  The state file is not trusted for this (a lost or
  half-synced file, a save killed before it was updated): every ``model.ckpt-<step>`` on
  disk or in the state file is a candidate, newest first; damaged ones are skipped with a
  warning; when there are checkpoints but none is intact the run stops (never from step 0);
- after each save, the Trainer calls its save hooks. ``CheckpointEvaluator`` is the hook
  the drivers use: it evaluates each checkpoint once, before pruning can delete it, keeps
  the best by one metric as ``model.ckpt-best`` (``best_trial.txt``) and adds a block to
  ``eval_results.txt``. So pretraining and GLUE evaluate after each save the same way.
"""
from __future__ import annotations

import os
import re
from typing import Any, Callable, Mapping

import tensorflow as tf
from absl import logging
from google.protobuf import text_format

from albert_tf.fileio import atomic_write_text, read_text
from albert_tf.training import faults
from albert_tf.training.distribution import WorkerInfo
from albert_tf.training.results import EVAL_RESULTS_FILE, ResultsLayout, write_eval_results
from albert_tf.weights import files
from albert_tf.weights.errors import CheckpointError

BEST_TRIAL_FILENAME = "best_trial.txt"
# The key of the [workers, local replicas, global batch] an input position was saved under.
TOPOLOGY_KEY = "topology/.ATTRIBUTES/VARIABLE_VALUE"
_GLOBAL_STEP_KEY = "global_step/.ATTRIBUTES/VARIABLE_VALUE"


# What reading a garbled state file raises.
_STATE_FILE_ERRORS = (tf.errors.OpError, text_format.ParseError)


def input_state_prefix(checkpoint_path: str, worker_index: int | str) -> str:
    """Where worker ``worker_index`` keeps its input position for a checkpoint."""
    return f"{checkpoint_path}.input-{worker_index}"


def _saved_topology(prefix: str) -> list[int]:
    """The [workers, local replicas, global batch] an input state was saved under ([0] if not recorded)."""
    if TOPOLOGY_KEY not in {name for name, _ in tf.train.list_variables(prefix)}:
        return [0]
    return tf.train.load_variable(prefix, TOPOLOGY_KEY).tolist()


def checkpoint_candidates(output_dir: str) -> list[str]:
    """Every ``model.ckpt-<step>`` with an index on disk or named by the state file, newest first
    (data shards without an index are an interrupted save, not a checkpoint)."""
    pattern = re.compile(re.escape(files.CHECKPOINT_BASENAME) + r"-(\d+)\.index$")
    found = {os.path.join(output_dir, name[: -len(".index")])
             for name in tf.io.gfile.listdir(output_dir) if pattern.match(name)}
    try:
        listed = files.all_checkpoints(output_dir)
    except _STATE_FILE_ERRORS as e:
        logging.warning("%s is unreadable (%s): looking for checkpoints on disk only.",
                        os.path.join(output_dir, files.STATE_FILENAME), e)
        listed = []
    found.update(p for p in listed if files.step_of(p) is not None)
    return sorted(found, key=lambda p: files.step_of(p), reverse=True)


def newest_intact_weights(output_dir: str) -> str | None:
    """The newest checkpoint of ``output_dir`` whose model weights read back completely (what predict
    and export use; the input state does not matter to them), warning about the damaged ones skipped."""
    if not tf.io.gfile.isdir(output_dir):
        return None
    damaged = []
    for prefix in checkpoint_candidates(output_dir):
        reason = files.checkpoint_damage(prefix)
        if reason is None:
            if damaged:
                logging.warning("Skipping damaged checkpoint(s): %s. Using %s.", "; ".join(damaged), prefix)
            return prefix
        damaged.append(reason)
    return None


class CheckpointPolicy:
    """Saves, prunes and finds the checkpoints of one run in ``output_dir``.

    ``barrier`` blocks until every worker reaches it (a no-op with one worker): the
    state file is updated only once every worker has written its part.
    """

    def __init__(self, output_dir: str, save_checkpoints_steps: int, keep_checkpoint_max: int,
                 worker: WorkerInfo, barrier: Callable[[], None] = lambda: None,
                 size_estimate: Callable[[], int] = lambda: 0, gather: Callable[[int], list[int]] | None = None):
        self.output_dir = output_dir
        self.size_estimate = size_estimate
        self.gather = gather  # every worker's value of an int (multi-worker)  # bytes of one checkpoint (for the disk-full message)
        self.last_written: str | None = None  # what a rerun would resume from: resumed or saved
        self.save_checkpoints_steps = save_checkpoints_steps
        self.keep_checkpoint_max = keep_checkpoint_max
        self.worker = worker
        self.barrier = barrier

    def is_due(self, step: int, last_step: int, stopped: bool = False) -> bool:
        return stopped or step % self.save_checkpoints_steps == 0 or step == last_step

    def steps_to_next_save(self, step: int) -> int:
        return self.save_checkpoints_steps - step % self.save_checkpoints_steps

    def latest(self) -> str | None:
        """The checkpoint to resume from (the chief first removes what crashed saves left):
        ``resume_point``."""
        if self.worker.is_chief:
            files.remove_stale_temporaries(self.output_dir)
        self.last_written = self.resume_point()
        self._check_workers_agree(self.last_written)
        return self.last_written

    def _check_workers_agree(self, latest: str | None) -> None:
        """Multi-worker: every worker must resume from the same step (shared output_dir)."""
        if self.worker.num_workers <= 1 or self.gather is None:
            return
        steps = sorted(set(self.gather(-1 if latest is None else (files.step_of(latest) or 0))))
        if len(steps) > 1:
            raise ValueError(
                f"workers see different latest checkpoints in --output_dir (steps {steps}, -1 = none): "
                f"for multi-worker training output_dir must be on storage shared by all workers "
                f"(e.g. GCS or NFS)")

    def candidates(self) -> list[str]:
        """``checkpoint_candidates`` of this run's output_dir."""
        return checkpoint_candidates(self.output_dir)

    def damage(self, prefix: str) -> str | None:
        """Why ``prefix`` cannot be resumed from (naming the file), None if it can: its model
        state and every worker's input state it was saved with read back completely."""
        reason = files.checkpoint_damage(prefix)
        if reason is not None:
            return reason
        # Input states are saved before the model: any file of one says a worker saved its part,
        # and any readable one how many workers did (a checkpoint with none fast-forwards instead).
        found = {int(m.group(1)) for f in tf.io.gfile.glob(input_state_prefix(prefix, "*") + ".*")
                 if (m := re.search(r"\.input-(\d+)\.", f[len(prefix):]))}
        damages = {i: files.checkpoint_damage(input_state_prefix(prefix, i)) for i in sorted(found)}
        workers = max([max(found, default=-1) + 1,
                       *(_saved_topology(input_state_prefix(prefix, i))[0] for i, d in damages.items() if d is None)])
        for worker_index in range(workers):
            if worker_index not in damages:
                return f"{input_state_prefix(prefix, worker_index)}.index is missing"
            if damages[worker_index] is not None:
                return damages[worker_index]
        return None

    def last_intact(self) -> str | None:
        """``resume_point`` for a message: None instead of an error."""
        try:
            return self.resume_point()
        except CheckpointError:
            return None

    def resume_point(self) -> str | None:
        """The newest checkpoint that reads back completely; None when there is no checkpoint.
        Raises ``CheckpointError`` when there are checkpoints but none is intact."""
        if not tf.io.gfile.isdir(self.output_dir):
            return None
        damaged: list[str] = []
        for prefix in self.candidates():
            reason = self.damage(prefix)
            if reason is None:
                if damaged:
                    logging.warning("Skipping damaged checkpoint(s): %s. Resuming from %s, the newest intact "
                                    "one.", "; ".join(damaged), prefix)
                return prefix
            damaged.append(reason)
        if damaged:
            raise CheckpointError(
                f"no intact checkpoint in {self.output_dir} to resume from ({'; '.join(damaged)}); not "
                f"training from step 0 over them: restore the files, or move them away to start over")
        return None

    def input_resume_plan(self, latest: str | None, topology: list[int]) -> tuple[int, str | None]:
        """(global batches to skip, saved input position to restore) for resuming from ``latest``.

        A position saved under this topology is restored as it is (instant); otherwise (another
        worker/replica count or batch size, or none saved) the input stream is rebuilt and
        fast-forwarded by the checkpoint's step count in global batches, which reads, but does
        not parse, the records already trained on.
        """
        if latest is None:
            return 0, None
        prefix = input_state_prefix(latest, self.worker.worker_index)
        saved = None
        if tf.io.gfile.exists(prefix + ".index"):
            saved = _saved_topology(prefix)
            saved = None if saved == [0] else saved
        if saved == topology:
            return 0, prefix
        step = int(tf.train.load_variable(latest, _GLOBAL_STEP_KEY))
        logging.warning(
            "%s: no input position saved for this topology (saved [workers, local replicas, batch] = %s, "
            "this run %s): fast-forwarding the input by %d global batches of %d examples.",
            latest, saved, topology, step, topology[-1])
        return step, None

    def save(self, step: int, model_checkpoint: tf.train.Checkpoint,
             input_checkpoint: tf.train.Checkpoint | None = None) -> str:
        """Writes ``model.ckpt-<step>`` (the chief's copy) and this worker's input position,
        then records it in the state file and prunes what falls out of retention.  A full disk
        raises ``faults.DiskFullError`` (one line: the path, the space needed); what was written
        of this checkpoint is removed and the previous one stays the resume point.  So is it on the
        chief when another worker is lost before its part is written."""
        prefix = files.checkpoint_prefix(self.output_dir, step)
        try:
            self._write(prefix, model_checkpoint, input_checkpoint)
        except (tf.errors.OpError, OSError) as e:
            if self.worker.is_chief and faults.is_lost_peer(e) and self.worker.num_workers > 1 \
                    and self.last_written != prefix and self.damage(prefix) is not None:
                files.delete_checkpoint(prefix)  # a worker was lost before writing its part: no checkpoint
            if not faults.is_disk_full(e):
                raise
            if self.last_written != prefix:  # what was written of this one goes; the previous stays
                files.delete_checkpoint(prefix)
            raise faults.disk_full_error(prefix, self.size_estimate(), self.last_written) from e
        self.last_written = prefix
        return prefix

    def _write(self, prefix: str, model_checkpoint: tf.train.Checkpoint,
               input_checkpoint: tf.train.Checkpoint | None) -> None:
        if input_checkpoint is not None:
            files.write_checkpoint_atomically(input_checkpoint,
                                              input_state_prefix(prefix, self.worker.worker_index))
        if self.worker.is_chief:
            files.write_checkpoint_atomically(model_checkpoint, prefix)
        else:
            # Every worker takes part in writing (variables may need collectives to read);
            # only the chief's copy is kept.
            scratch = os.path.join(self.output_dir, f".tmp-worker{self.worker.worker_index}")
            model_checkpoint.write(os.path.join(scratch, files.CHECKPOINT_BASENAME))
            tf.io.gfile.rmtree(scratch)
        self.barrier()
        if self.worker.is_chief:
            files.update_state_file(self.output_dir, prefix, self.keep_checkpoint_max)
        else:
            self._prune_own_input_states()

    def _prune_own_input_states(self) -> None:
        """A non-chief worker's input positions follow the chief's retention."""
        keep = self.keep_checkpoint_max
        if keep <= 0:
            return
        suffix = f".input-{self.worker.worker_index}.index"
        pattern = os.path.join(self.output_dir, f"{files.CHECKPOINT_BASENAME}-*{suffix}")
        indexes = sorted(tf.io.gfile.glob(pattern), key=lambda f: files.step_of(f[: -len(suffix)]) or 0)
        for index in indexes[:-keep]:
            files.delete_checkpoint(index[: -len(".index")])  # the chief's pruning may remove them meanwhile


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

    def read(self) -> tuple[int, int, float | None]:
        """(last evaluated step, best step, best value); (-1, -1, None) before any."""
        text = read_text(self.info_path)
        if text is None:
            return -1, -1, None
        last, best_step, value = text.strip().split(":")
        return int(last), int(best_step), float(value)

    def update(self, checkpoint_path: str, results: Mapping[str, Any]) -> bool:
        """Records an evaluation; copies the checkpoint to ``model.ckpt-best`` if it is the
        best so far.  Returns whether it was."""
        if self.metric not in results:
            raise KeyError(f"eval results have no {self.metric!r} (got {', '.join(sorted(results))})")
        value = float(results[self.metric])
        step = files.step_of(checkpoint_path)
        step = -1 if step is None else step
        _, best_step, best = self.read()
        better = best is None or (value > best if self.higher_is_better else value < best)
        if better:
            files.copy_checkpoint(checkpoint_path, self.best_prefix)
            best_step, best = step, value
            logging.info("New best %s = %s at step %d: copied to %s", self.metric, value, step, self.best_prefix)
        atomic_write_text(self.info_path, f"{step}:{best_step}:{best}")
        return better


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
        self.results_path = os.path.join(output_dir, EVAL_RESULTS_FILE)

    def pending(self) -> list[str]:
        """Checkpoints in the state file that no evaluation has seen yet, oldest first."""
        last, _, _ = self.keeper.read()
        found = [p for p in files.all_checkpoints(self.output_dir)
                 if files.step_of(p) is not None and tf.io.gfile.exists(p + ".index")]
        return sorted((p for p in found if files.step_of(p) > last), key=files.step_of)

    def evaluate_pending(self) -> int:
        """Evaluates each not-yet-evaluated checkpoint (left by an interrupted run, or an
        eval-only run's); returns how many."""
        paths = self.pending()
        for path in paths:
            if self.load is not None:
                self.load(path)
            self._record(path, self.evaluate(path))
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

    def _record(self, path: str, results: Mapping[str, Any]) -> None:
        if not self.writes:
            return
        self.keeper.update(path, results)
        _, _, best = self.keeper.read()
        write_eval_results(self.results_path, results, self.layout, best)
