"""Checkpoint files in ``output_dir``, written so that a crash never leaves a bad state.

Layout (as the original's Estimator): ``model.ckpt-<step>.index`` and
``model.ckpt-<step>.data-*`` plus a ``checkpoint`` state file that
``tf.train.latest_checkpoint`` reads.  Per-worker input positions live beside
them as ``model.ckpt-<step>.input-<worker>.*``; the best checkpoint by an eval
metric is copied to ``model.ckpt-best.*`` with ``best_trial.txt``.

Atomicity: a checkpoint is written under a temporary prefix, its files renamed
to the final prefix (data first, index last: the index is what makes it
loadable), and only then is the state file replaced (write temp + rename).  An
interrupted save leaves the state file pointing at the previous checkpoint.
"""
from __future__ import annotations

import os
import re
import uuid
from typing import Any, Mapping

import tensorflow as tf
from absl import logging

CHECKPOINT_BASENAME = "model.ckpt"
BEST_BASENAME = "model.ckpt-best"
STATE_FILENAME = "checkpoint"
BEST_TRIAL_FILENAME = "best_trial.txt"
_TMP_MARK = ".tmp-"


def checkpoint_prefix(output_dir: str, step: int) -> str:
    return os.path.join(output_dir, f"{CHECKPOINT_BASENAME}-{int(step)}")


def input_state_prefix(checkpoint_path: str, worker_index: int) -> str:
    """Where worker ``worker_index`` keeps its input position for a checkpoint."""
    return f"{checkpoint_path}.input-{worker_index}"


def step_of(checkpoint_path: str) -> int | None:
    """The step number of ``.../model.ckpt-<step>``, None for other names."""
    match = re.search(r"-(\d+)$", checkpoint_path)
    return int(match.group(1)) if match else None


def _files_of(prefix: str) -> list[str]:
    """The files of one checkpoint prefix (its index and data shards, nothing else)."""
    files = tf.io.gfile.glob(prefix + ".data-*") + tf.io.gfile.glob(prefix + ".index")
    return sorted(files)


def _move_checkpoint_files(src_prefix: str, dst_prefix: str, copy: bool = False) -> None:
    """Renames (or copies) a checkpoint's files to a new prefix, the index last."""
    files = _files_of(src_prefix)
    if not any(f.endswith(".index") for f in files):
        raise FileNotFoundError(f"no checkpoint at {src_prefix} (missing {src_prefix}.index)")
    # Remove an older checkpoint of the same name, index first (so it is never half-replaced).
    for old in sorted(_files_of(dst_prefix), key=lambda f: not f.endswith(".index")):
        tf.io.gfile.remove(old)
    data = [f for f in files if not f.endswith(".index")]
    index = [f for f in files if f.endswith(".index")]
    for src in data + index:
        dst = dst_prefix + src[len(src_prefix):]
        if copy:
            tmp = f"{dst}{_TMP_MARK}{uuid.uuid4().hex}"
            tf.io.gfile.copy(src, tmp, overwrite=True)
            tf.io.gfile.rename(tmp, dst, overwrite=True)
        else:
            tf.io.gfile.rename(src, dst, overwrite=True)


def write_checkpoint_atomically(checkpoint: tf.train.Checkpoint, prefix: str) -> str:
    """``checkpoint.write`` to a temporary prefix, then rename its files to ``prefix``."""
    directory, base = os.path.split(prefix)
    tmp_prefix = os.path.join(directory, f"{_TMP_MARK}{uuid.uuid4().hex}-{base}")
    checkpoint.write(tmp_prefix)
    _move_checkpoint_files(tmp_prefix, prefix)
    return prefix


def _atomic_write_text(path: str, text: str) -> None:
    tmp = f"{path}{_TMP_MARK}{uuid.uuid4().hex}"
    with tf.io.gfile.GFile(tmp, "w") as f:
        f.write(text)
    tf.io.gfile.rename(tmp, path, overwrite=True)


def all_checkpoints(output_dir: str) -> list[str]:
    """The checkpoints the state file lists, oldest first, as paths usable from here
    (tf.train.get_checkpoint_state already puts ``output_dir`` before relative entries)."""
    state = tf.train.get_checkpoint_state(output_dir)
    if state is None:
        return []
    return list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]


def update_state_file(output_dir: str, checkpoint_path: str, keep_checkpoint_max: int) -> list[str]:
    """Makes ``checkpoint_path`` the latest; drops (and deletes) all but the newest
    ``keep_checkpoint_max`` (0 or less: keep all).  Returns the deleted prefixes."""
    kept = [p for p in all_checkpoints(output_dir) if p != checkpoint_path] + [checkpoint_path]
    removed: list[str] = []
    if keep_checkpoint_max > 0 and len(kept) > keep_checkpoint_max:
        removed, kept = kept[:-keep_checkpoint_max], kept[-keep_checkpoint_max:]
    rel = lambda p: os.path.relpath(p, output_dir) if p.startswith(output_dir) else p  # noqa: E731
    lines = [f'model_checkpoint_path: "{rel(checkpoint_path)}"']
    lines += [f'all_model_checkpoint_paths: "{rel(p)}"' for p in kept]
    _atomic_write_text(os.path.join(output_dir, STATE_FILENAME), "\n".join(lines) + "\n")
    for prefix in removed:
        delete_checkpoint(prefix)
    return removed


def delete_checkpoint(prefix: str) -> None:
    """Deletes a checkpoint and its per-worker input states (never ``model.ckpt-best``)."""
    if prefix.endswith(BEST_BASENAME):
        return
    for f in tf.io.gfile.glob(prefix + ".*"):
        if f.startswith(prefix + ".index") or f.startswith(prefix + ".data-") or f.startswith(prefix + ".input-"):
            tf.io.gfile.remove(f)


def remove_stale_temporaries(output_dir: str) -> None:
    """Deletes leftovers of saves interrupted by a crash (temporary prefixes and files)."""
    for f in tf.io.gfile.glob(os.path.join(output_dir, f"*{_TMP_MARK}*")):
        if tf.io.gfile.isdir(f):
            tf.io.gfile.rmtree(f)
        else:
            tf.io.gfile.remove(f)


def copy_checkpoint(src_prefix: str, dst_prefix: str) -> None:
    """Copies a checkpoint's files (index last, each via a temporary name)."""
    _move_checkpoint_files(src_prefix, dst_prefix, copy=True)


def write_eval_results(path: str, results: Mapping[str, Any], append: bool = False) -> None:
    """Writes ``key = value`` lines (sorted keys), as the original's ``eval_results.txt``."""
    text = "".join(f"{key} = {results[key]}\n" for key in sorted(results))
    if append and tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            text = f.read() + text
    _atomic_write_text(path, text)


def read_eval_results(path: str) -> dict[str, str]:
    """Parses an ``eval_results.txt`` (last value of each key wins)."""
    results = {}
    with tf.io.gfile.GFile(path) as f:
        for line in f:
            if " = " in line:
                key, value = line.rstrip("\n").split(" = ", 1)
                results[key] = value
    return results


class BestCheckpointKeeper:
    """Keeps the best checkpoint by one eval metric as ``model.ckpt-best``.

    ``best_trial.txt`` holds ``<last evaluated step>:<best step>:<best value>``, the
    original run_classifier's format, so the choice survives reruns.
    """

    def __init__(self, output_dir: str, metric: str, higher_is_better: bool = True):
        self.output_dir = output_dir
        self.metric = metric
        self.higher_is_better = higher_is_better
        self.best_prefix = os.path.join(output_dir, BEST_BASENAME)
        self.info_path = os.path.join(output_dir, BEST_TRIAL_FILENAME)

    def read(self) -> tuple[int, int, float | None]:
        """(last evaluated step, best step, best value); (-1, -1, None) before any."""
        if not tf.io.gfile.exists(self.info_path):
            return -1, -1, None
        with tf.io.gfile.GFile(self.info_path) as f:
            last, best_step, value = f.read().strip().split(":")
        return int(last), int(best_step), float(value)

    def update(self, checkpoint_path: str, results: Mapping[str, Any]) -> bool:
        """Records an evaluation; copies the checkpoint to ``model.ckpt-best`` if it is the
        best so far.  Returns whether it was."""
        if self.metric not in results:
            raise KeyError(f"eval results have no {self.metric!r} (got {', '.join(sorted(results))})")
        value = float(results[self.metric])
        step = step_of(checkpoint_path)
        step = -1 if step is None else step
        _, best_step, best = self.read()
        better = best is None or (value > best if self.higher_is_better else value < best)
        if better:
            copy_checkpoint(checkpoint_path, self.best_prefix)
            best_step, best = step, value
            logging.info("New best %s = %s at step %d: copied to %s", self.metric, value, step, self.best_prefix)
        _atomic_write_text(self.info_path, f"{step}:{best_step}:{best}")
        return better
