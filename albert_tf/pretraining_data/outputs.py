"""Where create_pretraining_data may write: checked before any work, and held while it writes.

The original replaced whatever was at ``--output_file``. This tool writes only its own files: an
output that is one of the inputs or the tokenizer's file, a folder, or a file it did not write (no
summary of ours beside it lists it) is refused in one line before any work. Each local output is
held by a lock file (``<output>.lock``) while the run writes it, so two runs aimed at one output
cannot mix their shards and summaries; runs writing other files into the same folder (one run per
input shard, as people ran the original) do not exclude each other.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
from typing import Iterator

from absl import logging

from albert_tf.fileio import TMP_MARK, is_remote, make_folders
from albert_tf.pretraining_data.config import (LOCK_SUFFIX, PART_SUFFIX, PipelineConfig, PretrainingDataError,
                                                default_summary_file)
from albert_tf.run_lock import RunLock


def summary_path(config: PipelineConfig) -> str:
    return config.summary_file or default_summary_file(",".join(config.output_files))


def check_outputs(config: PipelineConfig, runner: str) -> None:
    """One line before any work for an output this run must not write (see the module's docstring)."""
    summary = summary_path(config)
    outputs = [*config.output_files, summary]
    if runner == "local":
        remote = [path for path in outputs if is_remote(path)]
        if remote:
            raise PretrainingDataError(f"--output_file={remote[0]}: the local runner writes local files; "
                                       f"use --runner=beam for remote storage, or a local path")
    protected = {"--input_file": config.input_files, "--spm_model_file": [config.spm_model_file],
                 "--vocab_file": [config.vocab_file]}
    for flag, paths in protected.items():
        for path in filter(None, paths):
            if any(_same_file(path, output) for output in outputs):
                raise PretrainingDataError(f"--output_file would replace {flag}={path}: pick another --output_file")
    named: dict[str, str] = {}
    for path in config.output_files:  # one file by two spellings (out/a, out/./a)
        if _identity(path) in named:
            raise PretrainingDataError(f"--output_file: {named[_identity(path)]} and {path} are the same file; "
                                       f"give each output its own file")
        named[_identity(path)] = path
    if _identity(summary) in named:
        raise PretrainingDataError(f"--output_file: {named[_identity(summary)]} is where the summary is written "
                                   f"({summary}); give the records another file")
    for path in outputs:
        if not is_remote(path) and os.path.isdir(path):
            raise PretrainingDataError(f"--output_file: {path} is a folder; give a file name (records are "
                                       f"written to that file, the summary beside it)")
    listed = _listed_outputs(summary)
    for path in outputs:
        if path == summary:
            if _exists(path) and listed is None:
                raise PretrainingDataError(f"{path} exists and is not a summary create_pretraining_data.py wrote; "
                                           f"move it away or pick another --output_file")
        elif _exists(path) and _identity(path) not in (listed or ()):
            raise PretrainingDataError(f"--output_file: {path} exists and create_pretraining_data.py did not write "
                                       f"it (no summary of ours at {summary} lists it); move it away or pick "
                                       f"another --output_file")
    # Outputs of an earlier run that this one would not replace (other shards, a shorter comma list):
    # left beside the new ones, a glob such as 'out/train-*' would feed both runs' records to training,
    # and once the new summary no longer listed them a later rerun would call them not ours.
    new = {_identity(path) for path in outputs}
    stale = sorted(path for path in (listed or ()) if path not in new and _exists(path))
    if stale:
        more = f" and {len(stale) - 1} more" if len(stale) > 1 else ""
        raise PretrainingDataError(f"--output_file: {stale[0]}{more}, written by an earlier run ({summary}), would "
                                   f"be left beside this run's outputs; remove them or pick another --output_file")


def output_paths_from_summary(config: PipelineConfig) -> list[str]:
    """The outputs as the summary records them for check_outputs: local ones relative to the summary's
    folder (so the record holds wherever the run was started from), remote ones as given."""
    summary = summary_path(config)
    if is_remote(summary):
        return list(config.output_files)
    folder = os.path.dirname(os.path.abspath(summary))
    return [path if is_remote(path) else os.path.relpath(os.path.abspath(path), folder)
            for path in config.output_files]


def _same_file(a: str, b: str) -> bool:
    if is_remote(a) or is_remote(b):
        return a == b
    return os.path.realpath(a) == os.path.realpath(b)


def _identity(path: str) -> str:
    return path if is_remote(path) else os.path.realpath(path)


def _exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(path)
    from apache_beam.io.filesystems import FileSystems  # only the Beam runner takes remote outputs

    return FileSystems.exists(path)


def _read_json(path: str) -> object:
    if not is_remote(path):
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        return json.loads(f.read().decode("utf-8"))


def _listed_outputs(summary: str) -> set[str] | None:
    """The outputs (their _identity) our summary at ``summary`` lists; None if there is none of ours.

    A file counts as listed by where it is, not by its name: ``out/dev`` in a summary beside
    ``out/train`` does not make a user's ``data/dev`` ours."""
    if not _exists(summary) or (not is_remote(summary) and not os.path.isfile(summary)):
        return None
    try:
        written = _read_json(summary)
    except (OSError, ValueError):
        return None
    if not isinstance(written, dict) or not isinstance(written.get("output_files"), list):
        return None
    relative = written.get("output_paths_from_summary")
    if is_remote(summary):  # remote paths are recorded whole
        return set(map(str, relative if isinstance(relative, list) else written["output_files"]))
    folder = os.path.dirname(os.path.abspath(summary))
    if isinstance(relative, list):
        return {path if is_remote(path) else os.path.realpath(os.path.join(folder, path))
                for path in map(str, relative)}
    # A summary from before the paths were recorded: only outputs beside it, by name.
    return {os.path.realpath(os.path.join(folder, os.path.basename(str(path)))) for path in written["output_files"]}


@contextlib.contextmanager
def outputs_locked(config: PipelineConfig) -> Iterator[None]:
    """Holds ``<output>.lock`` for each local output, then removes what killed runs left of these outputs."""
    with contextlib.ExitStack() as stack:
        for path in config.output_files:
            if not is_remote(path):
                try:
                    make_folders(os.path.dirname(os.path.abspath(path)))
                except (NotADirectoryError, FileNotFoundError) as e:  # a file or a link to nothing on the way
                    culprit = e.filename
                    while not os.path.lexists(culprit):  # the file in the way, not the folder under it
                        culprit = os.path.dirname(culprit)
                    problem = "not a folder" if isinstance(e, NotADirectoryError) else e.strerror
                    raise PretrainingDataError(f"--output_file={path}: cannot make its folder: {culprit} is "
                                               f"{problem}") from None
                stack.enter_context(RunLock(path + LOCK_SUFFIX, what=f"--output_file={path}",
                                            take_over_hint=f"delete {path}{LOCK_SUFFIX}"))
        remove_leftovers(config)
        yield


def part_name(path: str, token: str) -> str:
    """Where ``path`` is written before it is renamed into place."""
    return f"{path}{TMP_MARK}{token}{PART_SUFFIX}"


def work_dir_prefix(config: PipelineConfig) -> str:
    """The work folder's name up to mkdtemp's random part: unique to the first output's full path, so
    that leftovers found by it are this output's (whose lock this run holds), never another run's."""
    first = config.output_files[0]
    digest = hashlib.blake2b(os.path.abspath(first).encode(), digest_size=4).hexdigest()
    return f"{os.path.basename(first)}{TMP_MARK}{digest}-"


def work_dir_parent(config: PipelineConfig) -> str:
    return config.tmp_dir or os.path.dirname(os.path.abspath(config.output_files[0]))


def remove_leftovers(config: PipelineConfig) -> None:
    """Removes, with a warning, the parts and the work folder a killed run (SIGKILL, out of memory) left
    for these outputs: under their locks, nothing else can be writing them."""
    names_by_folder: dict[str, set[str]] = {}
    for path in config.output_files:
        if not is_remote(path):
            folder, name = os.path.split(os.path.abspath(path))
            names_by_folder.setdefault(folder, set()).add(name)
    part = re.compile(r"(.+)" + re.escape(TMP_MARK) + r"[0-9a-f]{32}" + re.escape(PART_SUFFIX))
    found = [os.path.join(folder, n) for folder, names in names_by_folder.items() for n in os.listdir(folder)
             if (match := part.fullmatch(n)) and match.group(1) in names]  # one listing per folder
    parent, prefix = work_dir_parent(config), work_dir_prefix(config)
    if os.path.isdir(parent):
        found += [os.path.join(parent, n) for n in os.listdir(parent)
                  if n.startswith(prefix) and os.path.isdir(os.path.join(parent, n))]
    for path in sorted(found):
        logging.warning("removing %s, left by a run of these outputs that was killed", path)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)


# Why an output cannot be written, by errno: the one line a user gets instead of "[Errno 28]".
WRITE_PROBLEMS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
                  errno.EROFS: "the file system is read-only", errno.EACCES: "permission denied",
                  errno.EPERM: "permission denied",
                  errno.EFBIG: "the file is larger than the file system allows"}


@contextlib.contextmanager
def reporting_write_problems(config: PipelineConfig) -> Iterator[None]:
    """An output that cannot be written (full disk, read-only or forbidden folder), with either runner, as
    a ``PretrainingDataError`` naming the path (an input that cannot be read keeps its own error)."""
    try:
        yield
    except OSError as e:
        problem = WRITE_PROBLEMS.get(e.errno)
        if problem is None or (e.filename and os.path.abspath(e.filename) in map(os.path.abspath, config.input_files)):
            raise
        where = e.filename or ", ".join(config.output_files[:3]) + (" ..." if len(config.output_files) > 3 else "")
        under_tmp_dir = config.tmp_dir and (not e.filename or _is_under(os.fspath(e.filename), config.tmp_dir))
        tmp = f" (temporary files under --tmp_dir={config.tmp_dir})" if under_tmp_dir else ""
        raise PretrainingDataError(f"cannot write {where}{tmp}: {problem}") from None


def _is_under(path: str, folder: str) -> bool:
    path, folder = os.path.abspath(path), os.path.abspath(folder)
    return os.path.commonpath([path, folder]) == folder
