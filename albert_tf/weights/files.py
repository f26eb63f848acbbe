"""Checkpoint files in a folder, written so that a crash never leaves a bad state.

Layout (as the original's Estimator): ``model.ckpt-<step>.index`` and
``model.ckpt-<step>.data-*`` plus a ``checkpoint`` state file that
``tf.train.latest_checkpoint`` reads. A training run's input positions
(``model.ckpt-<step>.input-<worker>.index`` and ``.data-*``) belong to the checkpoint
and go when it goes; other files that share its name (a user's ``model.ckpt-6.notes``,
a TF1 Estimator's ``.meta``) are not this package's and stay.

Atomicity: a checkpoint is written under a temporary prefix, its files renamed to
the final prefix (data first, index last: the index is what makes it loadable), and
only then is the state file replaced (``albert_tf.fileio``). An interrupted save
leaves the state file pointing at the previous checkpoint. Both the converter
(``weights.saving``) and the training run (``training.checkpoint_policy``) write
through here; what a run saves and keeps is the policy's business.
"""
from __future__ import annotations

import contextlib
import fnmatch
import glob
import os
import re
import uuid
from typing import Callable, Iterator

import tensorflow as tf

from albert_tf.fileio import (TMP_MARK, atomic_write_text, is_remote, make_folders, signals_deferred, sync_to_disk,
                              umask_mode)

CHECKPOINT_BASENAME = "model.ckpt"
BEST_BASENAME = "model.ckpt-best"
STATE_FILENAME = "checkpoint"
# A --task_name=custom run's labels, beside its checkpoints (albert_tf.glue.custom writes and reads it).
LABELS_FILE = "labels.txt"


def checkpoint_prefix(output_dir: str, step: int) -> str:
    return os.path.join(output_dir, f"{CHECKPOINT_BASENAME}-{int(step)}")


def step_of(checkpoint_path: str) -> int | None:
    """The step number of ``.../model.ckpt-<step>``, None for other names."""
    match = re.search(r"-(\d+)$", checkpoint_path)
    return int(match.group(1)) if match else None


def names_in(folder: str) -> list[str]:
    """The names in ``folder`` (local or remote), none when it does not exist."""
    try:
        return [name.rstrip("/") for name in tf.io.gfile.listdir(folder or ".")]
    except tf.errors.NotFoundError:
        return []


def files_extending(prefix: str, *name_patterns: str) -> list[str]:
    """The files named ``<prefix's name><pattern>`` (fnmatch patterns) in the prefix's folder, from one
    listing. The prefix is taken literally: with tf.io.gfile.glob a folder like ``runs/exp[1]`` is a
    pattern that matches ``runs/exp1``, and its cleanup would delete that folder's files."""
    folder, base = os.path.split(prefix)
    patterns = [glob.escape(base) + pattern for pattern in name_patterns]
    return sorted(os.path.join(folder, name) for name in names_in(folder)
                  if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns))


_DATA_SHARD = ".data-?????-of-?????"  # TensorFlow's shard names: model.ckpt-6.data-00000-of-00001


def _files_of(prefix: str) -> list[str]:
    """The files of one checkpoint prefix (its index and data shards, nothing else)."""
    return files_extending(prefix, _DATA_SHARD, ".index")


def _remove_quietly(paths: list[str]) -> None:
    for path in paths:
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)


def _move_checkpoint_files(src_prefix: str, dst_prefix: str, copy: bool = False) -> None:
    """Renames (or copies) a checkpoint's files to a new prefix, replacing a checkpoint there.

    Copies are made under temporary names first: a failed copy (a full disk) removes them and
    leaves the old checkpoint whole.  Then the old index goes (it stops being loadable), the
    data shards and the index are renamed into place, the index last, and the old checkpoint's
    shards the new one does not have are removed: the old one is unloadable only for the
    instants of those renames."""
    files = _files_of(src_prefix)
    if not any(f.endswith(".index") for f in files):
        raise FileNotFoundError(f"no checkpoint at {src_prefix} (missing {src_prefix}.index)")
    files = sorted(files, key=lambda f: f.endswith(".index"))  # data first, the index last
    targets = [dst_prefix + f[len(src_prefix):] for f in files]
    if copy:
        token = uuid.uuid4().hex
        staged = [f"{dst}{TMP_MARK}{token}" for dst in targets]
        try:
            for src, tmp in zip(files, staged):
                tf.io.gfile.copy(src, tmp, overwrite=True)
                if not is_remote(tmp):  # a copy keeps its source's mode; a new file gets the umask's
                    os.chmod(tmp, umask_mode())
        except BaseException:
            _remove_quietly(staged)
            raise
        files = staged
    for src in files:
        if not is_remote(src):
            sync_to_disk(src)
    # Ctrl-C or SIGTERM between two renames left data shards without their index (a new conversion's
    # output the rerun refuses to replace, or a mix of two checkpoints): they act after the last one.
    with signals_deferred():
        old = _files_of(dst_prefix)
        _remove_quietly([f for f in old if f.endswith(".index")])
        for src, dst in zip(files, targets):
            tf.io.gfile.rename(src, dst, overwrite=True)
        _remove_quietly(sorted(set(old) - set(targets)))


# What reading a damaged checkpoint raises (a truncated shard gives IndexError, a garbage index
# an OpError without the file's name).
_READ_ERRORS = (tf.errors.OpError, IndexError, ValueError, RuntimeError, OSError)


def _short(err: BaseException) -> str:
    text = getattr(err, "message", None) or str(err) or type(err).__name__
    text = re.sub(r"\{\{[^}]*\}\}|\[Op:\w+\]", "", text)  # TensorFlow's node and op names
    return text.strip().splitlines()[0].strip()


def checkpoint_damage(prefix: str) -> str | None:
    """Why the checkpoint at ``prefix`` does not read back completely, naming the file; None when
    it does: the index parses, every data shard it names exists, and every tensor reads back
    (TensorFlow checks each one's size and checksum)."""
    index = prefix + ".index"
    if not tf.io.gfile.exists(index):
        return f"{index} is missing"
    try:
        dtypes = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()
        names = sorted(dtypes)
    except _READ_ERRORS as e:
        return f"{index} is damaged ({_short(e)})"
    shards = files_extending(prefix, ".data-*")
    match = re.search(r"-of-(\d+)$", shards[0]) if shards else None
    if names and match:
        count = int(match.group(1))
        for i in range(count):
            shard = f"{prefix}.data-{i:05d}-of-{count:05d}"
            if shard not in shards:
                return f"{shard} is missing"
    elif names:
        return f"{prefix}.data-00000-of-00001 is missing"
    for name in names:
        try:  # RestoreV2 reads any dtype (an input position is a variant), one tensor at a time
            tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[name], shape_and_slices=[""], dtypes=[dtypes[name]])
        except _READ_ERRORS as e:
            where = shards[0] if len(shards) == 1 else prefix + ".data-*"
            return f"{where} is damaged ({_short(e)} reading {name})"
    return None


@contextlib.contextmanager
def _temporary_prefix(prefix: str) -> Iterator[str]:
    """A temporary prefix beside ``prefix`` (its folder made if need be), whose files are removed on leaving."""
    directory, base = os.path.split(prefix)
    make_folders(directory or ".")
    tmp_prefix = os.path.join(directory, f"{TMP_MARK}{uuid.uuid4().hex}-{base}")
    try:
        yield tmp_prefix
    finally:
        for leftover in files_extending(tmp_prefix, "*"):  # also TensorFlow's own <prefix>_temp folder
            if tf.io.gfile.isdir(leftover):
                tf.io.gfile.rmtree(leftover)
            else:
                tf.io.gfile.remove(leftover)


def write_prefix_atomically(write: Callable[[str], object], prefix: str) -> str:
    """``write(tmp_prefix)`` to a temporary prefix beside ``prefix``, then renames its files
    to ``prefix``; a failed write removes the temporary files."""
    with _temporary_prefix(prefix) as tmp_prefix:
        write(tmp_prefix)
        _move_checkpoint_files(tmp_prefix, prefix)
    return prefix


def same_bytes(path: str, other: str, chunk: int = 1 << 24) -> bool:
    """Whether two files (local or remote) hold the same bytes."""
    if tf.io.gfile.stat(path).length != tf.io.gfile.stat(other).length:
        return False
    with tf.io.gfile.GFile(path, "rb") as a, tf.io.gfile.GFile(other, "rb") as b:
        while True:
            block = a.read(chunk)
            if block != b.read(chunk):
                return False
            if not block:
                return True


def holds_what_write_writes(write: Callable[[str], object], prefix: str) -> bool:
    """Whether the checkpoint at ``prefix`` is, file for file and byte for byte, what ``write(prefix)`` would
    write there (TensorFlow writes the same values the same way): ``write`` goes to a temporary prefix beside
    it, removed after the comparison."""
    with _temporary_prefix(prefix) as tmp_prefix:
        write(tmp_prefix)
        written = {f[len(tmp_prefix):]: f for f in _files_of(tmp_prefix)}
        there = {f[len(prefix):]: f for f in _files_of(prefix)}
        return sorted(written) == sorted(there) and all(same_bytes(written[k], there[k]) for k in written)


def write_checkpoint_atomically(checkpoint: tf.train.Checkpoint, prefix: str) -> str:
    """``checkpoint.write`` to ``prefix`` through a temporary prefix."""
    return write_prefix_atomically(checkpoint.write, prefix)


# What reading an untrustworthy state file raises: empty ("Invalid checkpoint state"), not UTF-8
# (a power loss, a bad copy), unreadable. A garbled one reads as None.
_STATE_READ_ERRORS = (ValueError, UnicodeDecodeError, tf.errors.OpError)
_STEP_INDEX = re.compile(re.escape(CHECKPOINT_BASENAME) + r"-(\d+)\.index$")


def read_state(output_dir: str):
    """The state file as TensorFlow reads it (a ``CheckpointState``); None when it is missing,
    empty, garbled or not UTF-8."""
    try:
        return tf.train.get_checkpoint_state(output_dir)
    except _STATE_READ_ERRORS:
        return None


def _listed(output_dir: str) -> list[str] | None:
    """The checkpoints the state file lists, oldest first; None when it is missing or unreadable."""
    state = read_state(output_dir)
    if state is None:
        return None
    return list(state.all_model_checkpoint_paths) or [state.model_checkpoint_path]


def all_checkpoints(output_dir: str) -> list[str]:
    """The checkpoints the state file lists, oldest first, as paths usable from here
    (tf.train.get_checkpoint_state already puts ``output_dir`` before relative entries); none
    when it is missing, empty, garbled or not UTF-8 (``state_file_problem`` says which)."""
    return _listed(output_dir) or []


def checkpoints_on_disk(output_dir: str) -> list[str]:
    """Every ``model.ckpt-<step>`` of ``output_dir`` with an index file, oldest first: what is there,
    whatever the state file says."""
    if not tf.io.gfile.isdir(output_dir):
        return []
    found = [os.path.join(output_dir, name[: -len(".index")])
             for name in tf.io.gfile.listdir(output_dir) if _STEP_INDEX.match(name)]
    return sorted(found, key=step_of)


def state_file_problem(output_dir: str) -> str | None:
    """Why ``output_dir``'s state file does not describe its checkpoints, naming it; None when it
    reads and names only checkpoints whose index is there (or when there is neither file nor checkpoint)."""
    path = os.path.join(output_dir, STATE_FILENAME)
    if not tf.io.gfile.exists(path):
        return f"{path} is missing" if checkpoints_on_disk(output_dir) else None
    try:
        state = tf.train.get_checkpoint_state(output_dir)
    except UnicodeDecodeError:
        return f"{path} is not UTF-8 text"
    except _STATE_READ_ERRORS as e:
        text = getattr(e, "message", None) or str(e)
        return f"{path} is empty" if "Invalid checkpoint state" in text else f"{path} is unreadable ({text})"
    if state is None:
        return f"{path} is garbled"
    missing = [p for p in _listed(output_dir) or [] if not tf.io.gfile.exists(p + ".index")]
    if missing:
        return f"{path} names missing checkpoint(s) {', '.join(os.path.basename(p) for p in missing)}"
    return None


def latest_checkpoint(output_dir: str) -> str | None:
    """The state file's latest checkpoint when it reads and its index is there, else the newest one
    on disk (``tf.train.latest_checkpoint`` with a state file that is not trusted)."""
    if tf.io.gfile.exists(os.path.join(output_dir, STATE_FILENAME)) and state_file_problem(output_dir) is None:
        state = tf.train.get_checkpoint_state(output_dir)
        if state is not None and tf.io.gfile.exists(state.model_checkpoint_path + ".index"):
            return state.model_checkpoint_path
    on_disk = checkpoints_on_disk(output_dir)
    return on_disk[-1] if on_disk else None


def write_state_file(output_dir: str, latest: str, checkpoints: list[str]) -> None:
    """Replaces the state file (atomically): ``latest`` first, then ``checkpoints`` oldest first."""
    rel = lambda p: os.path.relpath(p, output_dir) if p.startswith(output_dir) else p  # noqa: E731
    lines = [f'model_checkpoint_path: "{rel(latest)}"']
    lines += [f'all_model_checkpoint_paths: "{rel(p)}"' for p in checkpoints]
    atomic_write_text(os.path.join(output_dir, STATE_FILENAME), "\n".join(lines) + "\n")


def known_checkpoints(output_dir: str) -> list[str]:
    """The checkpoints of ``output_dir`` with an index, oldest first: those on disk and those the
    state file lists (which may sit elsewhere)."""
    found = {p for p in all_checkpoints(output_dir) if tf.io.gfile.exists(p + ".index")}
    found.update(checkpoints_on_disk(output_dir))
    return sorted(found, key=lambda p: (step_of(p) is not None, step_of(p) or 0))


def update_state_file(output_dir: str, checkpoint_path: str, keep_checkpoint_max: int) -> list[str]:
    """Makes ``checkpoint_path`` the latest; drops (and deletes) all but the newest
    ``keep_checkpoint_max`` (0 or less: keep all) of the run's own checkpoints, the
    ``model.ckpt-<step>`` on disk in ``output_dir`` whatever state the file was in.  Other
    checkpoints the state file lists (a converted ``model.ckpt`` a run started from, one in another
    folder) stay listed and are never deleted: this job did not write them.  Returns the deleted
    prefixes."""
    own = [p for p in checkpoints_on_disk(output_dir) if p != checkpoint_path] + [checkpoint_path]
    others = [p for p in known_checkpoints(output_dir) if p not in own]
    removed: list[str] = []
    if keep_checkpoint_max > 0 and len(own) > keep_checkpoint_max:
        removed, own = own[:-keep_checkpoint_max], own[-keep_checkpoint_max:]
    write_state_file(output_dir, checkpoint_path, others + own)
    for prefix in removed:
        delete_checkpoint(prefix)
    return removed


def delete_checkpoint(prefix: str) -> None:
    """Deletes a checkpoint and its input positions (never ``model.ckpt-best``, nor other files that
    share its name)."""
    if prefix.endswith(BEST_BASENAME):
        return
    # The model's index last, as a save writes it last: a deletion a kill cuts short leaves an index, so the
    # checkpoint is still found (damaged: never resumed from) and the next pruning finishes it. With the index
    # gone first, the input positions and data shards left behind were no checkpoint's and stayed for good.
    doomed = files_extending(prefix, f".input-*{_DATA_SHARD}", ".input-*.index", _DATA_SHARD, ".index")
    for f in sorted(doomed, key=lambda f: (".input-" not in f[len(prefix):], f == prefix + ".index")):
        try:
            tf.io.gfile.remove(f)
        except tf.errors.NotFoundError:
            pass  # removed meanwhile by another worker pruning its input positions


# The names this package's writers give temporary files in a run folder. Only these are a crashed
# save's leftovers: another tool's work in progress there (create_pretraining_data's work folder, an
# export being staged) or a user's file with ".tmp-" in its name is not.
_MARK = re.escape(TMP_MARK)
_STALE_TEMPORARIES = [re.compile(pattern) for pattern in (
    rf"{_MARK}[0-9a-f]{{32}}-{re.escape(CHECKPOINT_BASENAME)}.*",  # write_prefix_atomically, TF's _temp folder
    rf".+{_MARK}[0-9a-f]{{32}}",  # staged checkpoint copies; fileio's remote writes
    rf".+{_MARK}[a-z0-9_]{{8}}\.tmp",  # fileio.atomic_output (mkstemp's 8 random characters)
    rf"{_MARK}worker\d+",  # checkpoint_policy's per-worker scratch folder
    rf"{_MARK}\d+-\d+(-.+)?",  # versions.new_version_folder (an export's version folder being written)
)]


def remove_stale_temporaries(output_dir: str) -> None:
    """Deletes leftovers of saves interrupted by a crash: files and folders named as this package
    names its temporaries (``_STALE_TEMPORARIES``), nothing else."""
    for name in names_in(output_dir):
        if not any(pattern.fullmatch(name) for pattern in _STALE_TEMPORARIES):
            continue
        path = os.path.join(output_dir, name)
        if tf.io.gfile.isdir(path):
            tf.io.gfile.rmtree(path)
        else:
            tf.io.gfile.remove(path)


def copy_checkpoint(src_prefix: str, dst_prefix: str) -> None:
    """Copies a checkpoint's files over any checkpoint at ``dst_prefix`` (``_move_checkpoint_files``:
    all copied under temporary names first, the index renamed into place last)."""
    _move_checkpoint_files(src_prefix, dst_prefix, copy=True)
