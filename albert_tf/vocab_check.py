"""Refuse a tokenizer or pretraining data whose vocabulary does not fit the model's config.

Why: an id >= ``vocab_size`` reaches the embedding lookup, where TensorFlow stops with an
opaque "Graph execution error" (on CPU) or reads garbage (on some accelerators).  The
drivers check before any work; ``albert_tf.pretraining.check_token_ids`` checks in-graph too.
"""
from __future__ import annotations

import glob
import json
import os
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


def _summaries_by_output(input_files: Sequence[str]) -> dict[str, tuple[str, dict]]:
    """{output file: (summary path, summary)} for create_pretraining_data summaries beside the inputs."""
    found: dict[str, tuple[str, dict]] = {}
    for folder in sorted({os.path.dirname(os.path.abspath(f)) for f in input_files}):
        for path in sorted(glob.glob(os.path.join(glob.escape(folder), "*.summary.json"))):
            try:
                with open(path, encoding="utf-8") as f:
                    summary = json.load(f)
            except (OSError, ValueError):
                continue  # not ours, or unreadable: the in-graph check still guards the run
            if not isinstance(summary, dict):
                continue
            for output in summary.get("output_files", []):
                found[os.path.abspath(output)] = (path, summary)
    return found


def check_pretraining_data(input_files: Sequence[str], vocab_size: int, config_file: str,
                           lengths: dict[str, int] | None = None) -> None:
    """Raises ``VocabMismatchError`` when a create_pretraining_data summary of an input file
    records a tokenizer of another size than ``vocab_size`` (files without one are checked
    in-graph while training), and ``ValueError`` when it records other ``lengths`` (flag name ->
    value: ``max_seq_length``, ``max_predictions_per_seq``) than the run's."""
    summaries = _summaries_by_output(input_files)
    for input_file in input_files:
        path, summary = summaries.get(os.path.abspath(input_file), (None, None))
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
