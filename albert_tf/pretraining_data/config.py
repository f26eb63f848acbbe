"""create_pretraining_data's settings: the config, the flags' files resolved, and the checks that
turn bad flags or input into one-line errors before any work."""
from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from typing import Sequence

from albert_tf.fileio import TMP_MARK
from albert_tf.pretraining_data.options import InstanceOptions
from albert_tf.tokenization import FullTokenizer
from albert_tf.tokenization.spm import warn_if_capitals_become_unknown

MIN_SEQ_LENGTH = 5  # [CLS] A [SEP] B [SEP] with one token each


class PretrainingDataError(ValueError):
    """Bad flags or input: the message says which file/line/flag and what was expected."""


# What this tool writes beside an output, besides the output itself.
SUMMARY_SUFFIX = ".summary.json"  # <output>.summary.json: what the run made (and that the output is ours)
LOCK_SUFFIX = ".lock"  # <output>.lock while a run writes it
PART_SUFFIX = ".part"  # <output>.tmp-<32 hex>.part: an output being written


@dataclass(frozen=True)
class PipelineConfig:
    input_files: tuple[str, ...]
    output_files: tuple[str, ...]
    vocab_file: str | None = None
    spm_model_file: str | None = None
    do_lower_case: bool = True
    options: InstanceOptions = field(default_factory=InstanceOptions)
    random_seed: int = 12345
    dupe_factor: int = 40
    num_workers: int = 1
    skip_invalid_lines: bool = False
    block_size_mb: float = 1.0
    shuffle_bucket_mb: float = 64.0  # most bytes of instances a worker sorts in memory at once (phase 3)
    tmp_dir: str | None = None  # default: the first output's directory
    shuffle: bool = True  # False: generation order (pass, document, instance), for tests and inspection
    summary_file: str | None = None  # default: <first output>.summary.json (or <prefix>.summary.json)
    progress_interval: float = 5.0  # seconds between progress lines on stderr (0: none)


def resolve_input_files(input_file: str, outputs: Sequence[str] = ()) -> tuple[str, ...]:
    """Comma-separated files or glob patterns -> file list; an error for any that matches nothing.

    A glob never matches what this tool writes for ``outputs`` (the outputs, their summary, lock and
    parts): an output folder inside the corpus folder must not feed a rerun its own files as text."""
    if not input_file:
        raise PretrainingDataError("--input_file is required (a file, a glob, or a comma-separated list)")
    own = _own_files_pattern(outputs)
    files: list[str] = []
    for pattern in [p.strip() for p in input_file.split(",") if p.strip()]:
        if glob.has_magic(pattern):
            matches = [m for m in sorted(glob.glob(pattern)) if not own.fullmatch(os.path.abspath(m))]
        else:
            matches = [pattern]
        # A folder a glob matches is not text; anything else must be readable (check_input_files): a
        # link to nothing in the corpus folder is a missing shard, not one to skip in silence.
        matches = [m for m in matches if not os.path.isdir(m)]
        if not matches:
            raise PretrainingDataError(f"--input_file: no input file found at {pattern!r}")
        files.extend(matches)
    check_input_files(files)
    return tuple(files)


def _own_files_pattern(outputs: Sequence[str]) -> re.Pattern:
    """What this tool writes for ``outputs``, by absolute path: each output, ``<output>.lock``,
    ``<output>.summary.json`` and ``<output>.tmp-<32 hex>.part``."""
    names = [re.escape(os.path.abspath(o)) for o in outputs if "://" not in o]
    if not names:
        return re.compile(r"(?!)")  # matches nothing
    suffixes = "|".join(map(re.escape, (SUMMARY_SUFFIX, LOCK_SUFFIX)))
    return re.compile(f"(?:{'|'.join(names)})(?:|{suffixes}|{re.escape(TMP_MARK)}[0-9a-f]{{32}}{re.escape(PART_SUFFIX)})")


def check_input_files(files) -> None:
    """Every input must exist and hold something."""
    if not files:
        raise PretrainingDataError("--input_file is required")
    for path in files:
        if not os.path.isfile(path):
            broken = f" (a link to {os.readlink(path)!r}, which does not exist)" if os.path.islink(path) else ""
            raise PretrainingDataError(f"--input_file: no input file found at {path!r}{broken}")
        if os.path.getsize(path) == 0:
            raise PretrainingDataError(f"--input_file: {path} is empty (expected one sentence per line)")


def resolve_output_files(output_file: str, num_output_shards: int = 1) -> tuple[str, ...]:
    """A comma list of files, or `num_output_shards` files named <output_file>-00000-of-0000N."""
    if not output_file:
        raise PretrainingDataError("--output_file is required")
    if num_output_shards < 1:
        raise PretrainingDataError(f"--num_output_shards must be >= 1, got {num_output_shards}")
    files = [f.strip() for f in output_file.split(",") if f.strip()]
    if num_output_shards > 1:
        if len(files) != 1:
            raise PretrainingDataError("--num_output_shards > 1 needs a single --output_file prefix, not a list")
        files = [f"{files[0]}-{i:05d}-of-{num_output_shards:05d}" for i in range(num_output_shards)]
    if len(set(files)) != len(files):
        raise PretrainingDataError(f"--output_file lists a file twice: {output_file}")
    return tuple(files)


def default_summary_file(output_file: str) -> str:
    first = [f.strip() for f in output_file.split(",") if f.strip()][0]
    return first + SUMMARY_SUFFIX


def validate(config: PipelineConfig, check_inputs: bool = True) -> None:
    """Flags out of range, a missing tokenizer, and (unless remote, checked as they are matched) empty inputs."""
    opts = config.options
    if not config.spm_model_file and not config.vocab_file:
        raise PretrainingDataError("give --spm_model_file (SentencePiece) or --vocab_file (WordPiece vocab.txt)")
    if opts.max_seq_length < MIN_SEQ_LENGTH:
        raise PretrainingDataError(
            f"--max_seq_length={opts.max_seq_length} is too small: [CLS] A [SEP] B [SEP] needs at least "
            f"{MIN_SEQ_LENGTH}"
        )
    checks = [
        (opts.max_predictions_per_seq >= 1, f"--max_predictions_per_seq must be >= 1, got {opts.max_predictions_per_seq}"),
        (0.0 <= opts.masked_lm_prob <= 1.0, f"--masked_lm_prob must be in [0, 1], got {opts.masked_lm_prob}"),
        (0.0 <= opts.short_seq_prob <= 1.0, f"--short_seq_prob must be in [0, 1], got {opts.short_seq_prob}"),
        (opts.ngram >= 1, f"--ngram must be >= 1, got {opts.ngram}"),
        (config.dupe_factor >= 1, f"--dupe_factor must be >= 1, got {config.dupe_factor}"),
        (config.num_workers >= 1, f"--num_workers must be >= 1, got {config.num_workers}"),
        (config.block_size_mb > 0, f"--block_size_mb must be > 0, got {config.block_size_mb}"),
        (config.shuffle_bucket_mb > 0, f"--shuffle_bucket_mb must be > 0, got {config.shuffle_bucket_mb}"),
        (not config.tmp_dir or not os.path.exists(config.tmp_dir) or os.path.isdir(config.tmp_dir),
         f"--tmp_dir: {config.tmp_dir} is not a directory"),
        (len(config.output_files) >= 1, "--output_file is required"),
    ]
    for ok, message in checks:
        if not ok:
            raise PretrainingDataError(message)
    if check_inputs:
        check_input_files(config.input_files)


def check_tokenizer(config: PipelineConfig) -> FullTokenizer:
    """Loads the tokenizer once up front, so a bad model fails clearly before any work (not in a worker)."""
    try:
        tokenizer = FullTokenizer(vocab_file=config.vocab_file, do_lower_case=config.do_lower_case,
                                  spm_model_file=config.spm_model_file)
    except (OSError, ValueError) as err:
        flag = "--spm_model_file" if config.spm_model_file else "--vocab_file"
        raise PretrainingDataError(f"{flag}: {err}") from None
    warn_if_capitals_become_unknown(config.spm_model_file, config.do_lower_case)
    return tokenizer


def check_nonempty(config: PipelineConfig, documents: int) -> None:
    if documents == 0:
        raise PretrainingDataError(
            f"no text found in --input_file ({', '.join(config.input_files)}): expected one sentence per line, "
            f"blank lines between documents"
        )
