"""Refuse a tokenizer or pretraining data whose vocabulary does not fit the model's config.

Why: an id >= ``vocab_size`` reaches the embedding lookup, where TensorFlow stops with an
opaque "Graph execution error" (on CPU) or reads garbage (on some accelerators).  The
drivers check before any work; ``albert_tf.pretraining.check_token_ids`` checks in-graph too.
"""
from __future__ import annotations

import glob
import json
import os
import posixpath
from typing import Sequence

LIKELY_CAUSE = ("the tokenizer (or the data made with it) and the model config come from different models: "
                "use the SentencePiece model / vocab released with the checkpoint, or fix vocab_size")


class VocabMismatchError(ValueError):
    """The tokenizer's or the data's vocabulary size disagrees with albert_config.json."""


def tokenizer_vocab_size(spm_model_file: str | None, vocab_file: str | None) -> int:
    """Pieces in a SentencePiece model, else the ids a WordPiece vocab.txt gives (``FullTokenizer.vocab_size``)."""
    from albert_tf.fileio import read_bytes  # local, or gs:// through tf.io.gfile

    if spm_model_file:
        from albert_tf.tokenization.spm import load_spm_model

        return load_spm_model(spm_model_file).get_piece_size()  # a damaged model: one line naming it
    data = read_bytes(vocab_file)
    if data is None:
        raise FileNotFoundError(f"vocab file not found: {vocab_file}")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise ValueError(f"--vocab_file={vocab_file}:{line}: not UTF-8 text ({e.reason}); expected a WordPiece "
                         f"vocab.txt, one token per line") from None
    from albert_tf.tokenization.wordpiece import load_vocab

    # Counted as the tokenizer reads the file: a line of whitespace only is a token (" ") and has an id, e.g.
    # the U+2028 line of the Chinese releases' 21128-line vocab, which a count of non-blank lines missed.
    return len(load_vocab(vocab_file))


def check_tokenizer(spm_model_file: str | None, vocab_file: str | None, vocab_size: int,
                    config_file: str) -> None:
    """Raises ``VocabMismatchError`` unless the tokenizer has exactly ``vocab_size`` entries."""
    if not spm_model_file and not vocab_file:
        return
    size = tokenizer_vocab_size(spm_model_file, vocab_file)
    if size != vocab_size:
        source = (f"--spm_model_file={spm_model_file} has {size} pieces" if spm_model_file
                  else f"--vocab_file={vocab_file} has {size} entries")
        raise VocabMismatchError(f"{source} but --albert_config_file={config_file} says vocab_size {vocab_size}: "
                                 f"{LIKELY_CAUSE}")


def _summary_paths(folder: str) -> list[str]:
    """The ``*.summary.json`` files in ``folder`` (local, or gs:// through tf.io.gfile)."""
    from albert_tf.fileio import is_remote

    if not is_remote(folder):
        return sorted(glob.glob(os.path.join(glob.escape(folder), "*.summary.json")))
    import tensorflow as tf

    try:
        return sorted(tf.io.gfile.glob(posixpath.join(folder, "*.summary.json")))
    except tf.errors.OpError:
        return []  # the inputs are read (and refused, named) later


def _read_summary(path: str) -> dict | None:
    from albert_tf.fileio import read_text

    try:
        summary = json.loads(read_text(path) or "null")
    except Exception:  # noqa: BLE001 - not ours, or unreadable (remote errors too): the in-graph check guards the run
        return None
    return summary if isinstance(summary, dict) else None


def _summaries_by_output(input_files: Sequence[str]) -> dict[str, tuple[str, dict, int]]:
    """{output file: (summary path, summary, its index in the summary's outputs)} for create_pretraining_data
    summaries beside the inputs. A local summary's outputs are where its ``output_paths_from_summary``
    (relative to its folder, wherever the job ran from) puts them; else, and for a remote one, its
    ``output_files``."""
    from albert_tf.fileio import absolute, is_remote

    found: dict[str, tuple[str, dict, int]] = {}
    folders = {posixpath.dirname(f) if is_remote(f) else os.path.dirname(absolute(f)) for f in input_files}
    for folder in sorted(folders):
        for path in _summary_paths(folder):
            summary = _read_summary(path)
            if summary is None:
                continue
            outputs = summary.get("output_paths_from_summary")
            if not is_remote(path) and isinstance(outputs, list):
                outputs = [o if not isinstance(o, str) or is_remote(o) else os.path.join(folder, o) for o in outputs]
            else:  # as given to the job (a local one relative to where it ran)
                outputs = summary.get("output_files", [])
            for index, output in enumerate(outputs):
                if isinstance(output, str):
                    found[absolute(output)] = (path, summary, index)
    return found


def _file_size(path: str) -> int | None:
    """`path`'s size in bytes (one stat, local or remote), None when it cannot be had (refused when read)."""
    from albert_tf.fileio import is_remote

    try:
        if is_remote(path):
            import tensorflow as tf

            return tf.io.gfile.stat(path).length
        return os.stat(path).st_size
    except Exception:  # noqa: BLE001 - missing, no permission, a remote error: the reading names it
        return None


def _ends_inside_a_record(path: str) -> bool:
    from albert_tf.data import tfrecord

    try:
        return tfrecord.cut_short(path)  # reads the file's tail only
    except Exception:  # noqa: BLE001 - unreadable: the size line says what is wrong
        return False


def _size_problem(input_file: str, path: str, summary: dict, index: int) -> str | None:
    """One line when `input_file` is not the size its summary records (cut short, e.g. between two records,
    which reads as a shorter whole file; or changed). Summaries without sizes (before they were recorded)
    pass."""
    sizes = summary.get("output_sizes")
    if not isinstance(sizes, list) or len(sizes) != len(summary.get("output_files", [])) or index >= len(sizes):
        return None
    recorded = sizes[index].get("bytes") if isinstance(sizes[index], dict) else None
    if not isinstance(recorded, int):
        return None
    actual = _file_size(input_file)
    if actual is None or actual == recorded:
        return None
    if actual < recorded and _ends_inside_a_record(input_file):
        return None  # pretraining.check_first_records names the record it was cut in (same advice)
    return (f"--input_file: {input_file} has {actual} bytes but {path} records {recorded} bytes for it "
            f"({'cut short' if actual < recorded else 'changed'} since it was written): copy it again, "
            f"or make it again with create_pretraining_data.py")


def check_pretraining_data(input_files: Sequence[str], vocab_size: int, config_file: str,
                           lengths: dict[str, int] | None = None) -> None:
    """Raises ``VocabMismatchError`` when a create_pretraining_data summary of an input file
    records a tokenizer of another size than ``vocab_size`` (files without one are checked
    in-graph while training), and ``ValueError`` when it records other ``lengths`` (flag name ->
    value: ``max_seq_length``, ``max_predictions_per_seq``) than the run's, or another size than the file has
    (a copy cut short between two records reads as a shorter whole file)."""
    from albert_tf.fileio import absolute

    summaries = _summaries_by_output(input_files)
    for input_file in input_files:
        path, summary, index = summaries.get(absolute(input_file), (None, None, 0))
        size_problem = _size_problem(input_file, path, summary, index) if summary else None
        if size_problem:
            raise ValueError(size_problem)
        settings = summary.get("settings") if summary else None
        for name, value in (lengths or {}).items():
            made = settings.get(name) if isinstance(settings, dict) else None
            if isinstance(made, int) and made != value:
                raise ValueError(f"{input_file} was made with --{name}={made} ({path}) but this run has "
                                 f"--{name}={value}: pass {made}, or make the data again")
        recorded = summary.get("vocab_size") if summary else None
        if isinstance(recorded, int) and recorded != vocab_size:
            raise VocabMismatchError(
                f"{input_file} was made with a tokenizer of {recorded} entries ({path}) but "
                f"--albert_config_file={config_file} says vocab_size {vocab_size}: {LIKELY_CAUSE}")
