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
- after each save, the Trainer calls its save hooks (``checkpoint_evaluation.CheckpointEvaluator``
  is the one the drivers use).

The state file is never trusted: every ``model.ckpt-<step>`` on disk counts for resume and
retention whatever it says, and when it is missing, empty, garbled, not UTF-8 or names missing
checkpoints, the chief rewrites it from what is there when the run resumes.
"""
from __future__ import annotations

import os
import re
from typing import Callable

import tensorflow as tf
from absl import logging

from albert_tf.training import faults
from albert_tf.training.distribution import WorkerInfo
from albert_tf.weights import files
from albert_tf.weights.errors import CheckpointError

# The key of the [workers, local replicas, global batch] an input position was saved under.
TOPOLOGY_KEY = "topology/.ATTRIBUTES/VARIABLE_VALUE"
DATA_KEY = "data/.ATTRIBUTES/VARIABLE_VALUE"  # which training files a position is in
_GLOBAL_STEP_KEY = "global_step/.ATTRIBUTES/VARIABLE_VALUE"


def input_state_prefix(checkpoint_path: str, worker_index: int | str) -> str:
    """Where worker ``worker_index`` keeps its input position for a checkpoint."""
    return f"{checkpoint_path}.input-{worker_index}"


def _saved_data_fingerprint(prefix: str) -> int | None:
    """The training files' fingerprint an input state was saved with (None if not recorded)."""
    if DATA_KEY not in {name for name, _ in tf.train.list_variables(prefix)}:
        return None
    return int(tf.train.load_variable(prefix, DATA_KEY))


def _saved_topology(prefix: str) -> list[int]:
    """The [workers, local replicas, global batch] an input state was saved under ([0] if not recorded)."""
    if TOPOLOGY_KEY not in {name for name, _ in tf.train.list_variables(prefix)}:
        return [0]
    return tf.train.load_variable(prefix, TOPOLOGY_KEY).tolist()


def checkpoint_candidates(output_dir: str) -> list[str]:
    """Every ``model.ckpt-<step>`` with an index on disk or named by the state file, newest first
    (data shards without an index are an interrupted save, not a checkpoint)."""
    found = set(files.checkpoints_on_disk(output_dir))
    found.update(p for p in files.all_checkpoints(output_dir) if files.step_of(p) is not None)
    return sorted(found, key=lambda p: files.step_of(p), reverse=True)


def is_original_checkpoint(checkpoint_path: str) -> bool:
    """Whether a checkpoint has TF1 names (the original's Estimator wrote it, or it is a converted or
    released model) rather than this loop's object graph."""
    return "_CHECKPOINTABLE_OBJECT_GRAPH" not in tf.train.load_checkpoint(checkpoint_path).get_variable_to_shape_map()


def refuse_resuming_the_original(output_dir: str) -> None:
    """Refuses to train on in a folder whose newest readable checkpoint has TF1 names: the original's
    Estimator's (no input position, other slot names), or a converted or released model copied in (no
    ``global_step`` either: no run's checkpoint). Only reads, so a driver calls it before any work
    (evaluating the folder's checkpoints, repairing its state file), and a refused run changes nothing."""
    for prefix in checkpoint_candidates(output_dir):
        try:
            names = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
        except (tf.errors.OpError, RuntimeError):
            continue  # an unreadable one: the resume point skips it, naming it
        if "_CHECKPOINTABLE_OBJECT_GRAPH" in names:
            return
        if "global_step" not in names:
            raise ValueError(
                f"checkpoint {prefix} is in TF1 format without global_step, which no training run leaves (a "
                f"converted or released model?): train on from its weights with --init_checkpoint={prefix} and a "
                f"new --output_dir")
        raise ValueError(
            f"{prefix} was written by the original (TF1) code, which this loop does not resume: continue "
            f"from its weights with --init_checkpoint={prefix} and a new --output_dir (the optimizer's "
            f"moments and the step start over)")


def newest_intact_weights(output_dir: str) -> str | None:
    """The newest checkpoint of ``output_dir`` whose model weights read back completely (what predict
    and export use; the input state does not matter to them), warning about the damaged ones skipped;
    None when there is no checkpoint.  Raises ``CheckpointError`` when there are checkpoints but none
    is intact: predicting from other weights (``--init_checkpoint``) would pass for the run's."""
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
    if damaged:
        raise CheckpointError(
            f"no intact checkpoint in {output_dir} to evaluate, predict or export with ({'; '.join(damaged)}); "
            f"not falling back to --init_checkpoint: restore the files, or train again with --do_train")
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
        if self.worker.is_chief and self.last_written is not None:
            self._repair_state_file(self.last_written)
        self._check_workers_agree(self.last_written)
        return self.last_written

    def _repair_state_file(self, latest: str) -> None:
        """Rewrites the state file from the checkpoints on disk, ``latest`` (the resume point) last,
        when it does not read, names missing checkpoints or names another latest one."""
        problem = files.state_file_problem(self.output_dir)
        if problem is None and files.latest_checkpoint(self.output_dir) == latest:
            return
        older = [p for p in files.known_checkpoints(self.output_dir)
                 if (files.step_of(p) or 0) < (files.step_of(latest) or 0)]
        logging.warning("%s: rewriting it from the checkpoints on disk (%d, the latest %s).",
                        problem or f"{os.path.join(self.output_dir, files.STATE_FILENAME)} names a damaged latest checkpoint", len(older) + 1,
                        latest)
        files.write_state_file(self.output_dir, latest, older + [latest])

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
        found = {int(m.group(1)) for f in files.files_extending(prefix, ".input-*.*")
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

    def input_resume_plan(self, latest: str | None, topology: list[int],
                          data_fingerprint: int = 0) -> tuple[int, str | None]:
        """(global batches to skip, saved input position to restore) for resuming from ``latest``.

        A position saved under this topology, in the same training files (``data_fingerprint``, 0:
        not tracked), is restored as it is (instant); otherwise (another worker/replica count or
        batch size, other files, or none saved) the input stream is rebuilt and fast-forwarded by
        the checkpoint's step count in global batches, which reads, but does not parse, the records
        already trained on.
        """
        if latest is None:
            return 0, None
        prefix = input_state_prefix(latest, self.worker.worker_index)
        saved = None
        if tf.io.gfile.exists(prefix + ".index"):
            saved = _saved_topology(prefix)
            saved = None if saved == [0] else saved
        if saved == topology and data_fingerprint and _saved_data_fingerprint(prefix) != data_fingerprint:
            step = int(tf.train.load_variable(latest, _GLOBAL_STEP_KEY))
            logging.warning("%s: its input position is in other training files than this run's: fast-forwarding "
                            "the input by %d global batches of %d examples.", latest, step, topology[-1])
            return step, None
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
            reason = faults.disk_full_reason(e)
            if reason is None:
                raise
            if self.last_written != prefix:  # what was written of this one goes; the previous stays
                files.delete_checkpoint(prefix)
            raise faults.disk_full_error(prefix, self.size_estimate(), self.last_written, reason) from e
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
        prefix = os.path.join(self.output_dir, files.CHECKPOINT_BASENAME)
        indexes = sorted(files.files_extending(prefix, f"-*{suffix}"),
                         key=lambda f: files.step_of(f[: -len(suffix)]) or 0)
        for index in indexes[:-keep]:
            files.delete_checkpoint(index[: -len(".index")])  # the chief's pruning may remove them meanwhile
