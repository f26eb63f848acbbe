"""Streaming, parallel, reproducible driver for pretraining data (create_pretraining_data.py).

How work is cut (this is what makes the output independent of --num_workers
and memory independent of corpus size):
- The input is read as a stream of documents (blank line or end of file ends a
  document) and cut into *blocks* of whole documents of about `block_size_mb`
  of text. A block is the unit of work and of randomness: the random other
  document for sentence-order pairs is drawn from the same block, and the
  block's instances are shuffled together.
- For pass d of `dupe_factor` and block b, all draws come from
  random.Random(seed(random_seed, d, b)); results are written in (d, b) order,
  instance k of the whole run going to output shard k % num_shards (as the
  original's round-robin writer). Workers only change who computes a block.
- Passes are dupe-major (all blocks of pass 0, then pass 1, ...), re-reading
  the input each pass, so the copies of a sentence with different masks are a
  whole corpus apart rather than adjacent.
- Memory is bounded by about (2 * num_workers + 1) blocks in flight (raw text
  plus their serialized instances) and the tokenized block inside each worker;
  a single document larger than a block is held whole.

Worker processes import sentencepiece and this package's pure-Python modules
only; TensorFlow is loaded in the main process for the TFRecord writer.
"""
from __future__ import annotations

import collections
import glob
import hashlib
import json
import multiprocessing
import os
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Iterator, NamedTuple

from albert_tf.fileio import atomic_write_text
from albert_tf.data.pretraining_features import ExampleSerializer
from albert_tf.data.pretraining_instances import (
    InstanceOptions,
    InstanceStats,
    VocabInfo,
    create_instances_from_document,
)
from albert_tf.tokenization import FullTokenizer, preprocess_text

MIN_SEQ_LENGTH = 5  # [CLS] A [SEP] B [SEP] with one token each


class PretrainingDataError(ValueError):
    """Bad flags or input: the message says which file/line/flag and what was expected."""


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
    block_size_mb: float = 2.0
    summary_file: str | None = None  # default: <first output>.summary.json (or <prefix>.summary.json)
    progress_interval: float = 5.0  # seconds between progress lines on stderr (0: none)


# ------------------------------------------------------------------ flags -> config
def resolve_input_files(input_file: str) -> tuple[str, ...]:
    """Comma-separated files or glob patterns -> file list; an error for any that matches nothing."""
    if not input_file:
        raise PretrainingDataError("--input_file is required (a file, a glob, or a comma-separated list)")
    files: list[str] = []
    for pattern in [p.strip() for p in input_file.split(",") if p.strip()]:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        matches = [m for m in matches if os.path.isfile(m)]
        if not matches:
            raise PretrainingDataError(f"--input_file: no input file found at {pattern!r}")
        files.extend(matches)
    check_input_files(files)
    return tuple(files)


def check_input_files(files) -> None:
    """Every input must exist and hold something."""
    if not files:
        raise PretrainingDataError("--input_file is required")
    for path in files:
        if not os.path.isfile(path):
            raise PretrainingDataError(f"--input_file: no input file found at {path!r}")
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
    return first + ".summary.json"


def validate(config: PipelineConfig) -> None:
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
        (len(config.output_files) >= 1, "--output_file is required"),
    ]
    for ok, message in checks:
        if not ok:
            raise PretrainingDataError(message)
    check_input_files(config.input_files)


# ------------------------------------------------------------------ reading
@dataclass
class ReadCounters:
    lines: int = 0
    invalid_lines_skipped: int = 0
    bytes_read: int = 0


def iter_blocks(
    input_files: tuple[str, ...], block_bytes: int, skip_invalid_lines: bool, counters: ReadCounters
) -> Iterator[tuple[list[list[str]], int]]:
    """Yields (documents, raw byte count) blocks; a document is a list of text lines.

    A blank line or the end of a file ends a document; blocks end at document
    boundaries once they hold `block_bytes` of input.
    """
    block: list[list[str]] = []
    block_size = 0
    for path in input_files:
        document: list[str] = []
        with open(path, "rb") as f:
            for line_number, raw in enumerate(f, start=1):
                block_size += len(raw)
                counters.bytes_read += len(raw)
                counters.lines += 1
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    if skip_invalid_lines:
                        counters.invalid_lines_skipped += 1
                        continue
                    raise PretrainingDataError(
                        f"{path}:{line_number}: line is not valid UTF-8 ({err.reason} at byte {err.start}); "
                        f"fix the file or pass --skip_invalid_lines to count and skip such lines"
                    ) from None
                if line_number == 1 and line.startswith("\ufeff"):
                    line = line[1:]  # a UTF-8 byte-order mark is not text
                if line.strip():
                    document.append(line)
                    continue
                if document:
                    block.append(document)
                    document = []
                if block_size >= block_bytes and block:
                    yield block, block_size
                    block, block_size = [], 0
        if document:
            block.append(document)
        if block_size >= block_bytes and block:
            yield block, block_size
            block, block_size = [], 0
    if block or block_size:
        yield block, block_size


# ------------------------------------------------------------------ per-block work (runs in workers)
class BlockResult(NamedTuple):
    records: list[bytes]
    stats: InstanceStats
    documents: int
    sentences: int
    raw_bytes: int


class _Context:
    """Per-process state: tokenizer, vocabulary facts, serializer."""

    def __init__(self, vocab_file, spm_model_file, do_lower_case, options: InstanceOptions, random_seed: int):
        self.tokenizer = FullTokenizer(vocab_file=vocab_file, do_lower_case=do_lower_case, spm_model_file=spm_model_file)
        self.use_spm = self.tokenizer.sp_model is not None
        self.do_lower_case = do_lower_case
        self.vocab = VocabInfo.from_tokenizer(self.tokenizer)
        self.options = options
        self.random_seed = random_seed
        self.serializer = ExampleSerializer(
            options.max_seq_length, options.num_masked_slots, max(self.vocab.vocab_size, options.max_seq_length)
        )


_CONTEXT: _Context | None = None


def _init_worker(*args) -> None:
    global _CONTEXT
    _CONTEXT = _Context(*args)


def block_seed(random_seed: int, dupe: int, block_index: int) -> int:
    """A stable 64-bit seed for (random_seed, pass, block), the same in every process."""
    digest = hashlib.sha256(f"albert_tf/pretraining/{random_seed}/{dupe}/{block_index}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


def _tokenize_block(ctx: _Context, raw_documents: list[list[str]]) -> tuple[list[list[list[int]]], int]:
    """Raw lines -> documents of id lists; as the original, a line empty after clean-up splits documents."""
    tokenizer = ctx.tokenizer
    documents: list[list[list[int]]] = []
    sentences = 0
    for raw_document in raw_documents:
        document: list[list[int]] = []
        for line in raw_document:
            if ctx.use_spm:
                text = preprocess_text(line, lower=ctx.do_lower_case)
            else:
                text = line.strip()
            if not text:
                if document:
                    documents.append(document)
                    document = []
                continue
            ids = tokenizer.encode_preprocessed_ids(text) if ctx.use_spm else tokenizer.tokenize_to_ids(text)
            if ids:
                document.append(ids)
                sentences += 1
        if document:
            documents.append(document)
    return documents, sentences


def process_block(dupe: int, block_index: int, raw_documents: list[list[str]], raw_bytes: int) -> BlockResult:
    """Serialized, shuffled instances of one block for one pass."""
    ctx = _CONTEXT
    options = ctx.options
    documents, sentences = _tokenize_block(ctx, raw_documents)
    rng = random.Random(block_seed(ctx.random_seed, dupe, block_index))
    rng.shuffle(documents)
    stats = InstanceStats()
    instances = []
    for document_index in range(len(documents)):
        instances.extend(create_instances_from_document(documents, document_index, options, ctx.vocab, rng, stats))
    rng.shuffle(instances)

    serialize = ctx.serializer.serialize_instance
    records = [
        serialize(
            inst.tokens,
            inst.segment_ids,
            inst.token_boundary,
            inst.masked_lm_positions,
            inst.masked_lm_ids,
            1 if inst.is_random_next else 0,
        )
        for inst in instances
    ]
    return BlockResult(records, stats, len(documents), sentences, raw_bytes)


# ------------------------------------------------------------------ orchestration
def _iter_results(config: PipelineConfig, counters: ReadCounters) -> Iterator[tuple[int, BlockResult]]:
    """Yields (pass, BlockResult) in (pass, block) order, computed in-process or by worker processes."""
    block_bytes = max(1, int(config.block_size_mb * 1024 * 1024))
    context_args = (config.vocab_file, config.spm_model_file, config.do_lower_case, config.options, config.random_seed)

    def tasks():
        for dupe in range(config.dupe_factor):
            # Count lines/skips once (pass 0); later passes re-read the same input.
            pass_counters = counters if dupe == 0 else ReadCounters()
            for block_index, (raw_documents, raw_bytes) in enumerate(
                iter_blocks(config.input_files, block_bytes, config.skip_invalid_lines, pass_counters)
            ):
                yield dupe, block_index, raw_documents, raw_bytes

    if config.num_workers == 1:
        _init_worker(*context_args)
        for dupe, block_index, raw_documents, raw_bytes in tasks():
            yield dupe, process_block(dupe, block_index, raw_documents, raw_bytes)
        return

    # "spawn": the main process has TensorFlow loaded, which must not be forked.
    executor = ProcessPoolExecutor(
        max_workers=config.num_workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_init_worker,
        initargs=context_args,
    )
    pending: collections.deque = collections.deque()
    try:
        for dupe, block_index, raw_documents, raw_bytes in tasks():
            pending.append((dupe, executor.submit(process_block, dupe, block_index, raw_documents, raw_bytes)))
            while len(pending) > 2 * config.num_workers:  # bounded read-ahead
                done_dupe, future = pending.popleft()
                yield done_dupe, future.result()
        while pending:
            done_dupe, future = pending.popleft()
            yield done_dupe, future.result()
    finally:
        executor.shutdown(wait=True, cancel_futures=True)


class _Progress:
    """Progress lines on stderr: documents and instances per second, ETA."""

    def __init__(self, total_bytes: int, interval: float):
        self.total = max(1, total_bytes)
        self.interval = interval
        self.start = self.last = time.monotonic()
        self.done_bytes = self.documents = self.instances = 0

    def update(self, result: BlockResult, final: bool = False) -> None:
        self.done_bytes += result.raw_bytes
        self.documents += result.documents
        self.instances += len(result.records)
        now = time.monotonic()
        if self.interval <= 0 or (now - self.last < self.interval and not final):
            return
        self.last = now
        elapsed = max(now - self.start, 1e-9)
        fraction = min(1.0, self.done_bytes / self.total)
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else float("inf")
        sys.stderr.write(
            f"create_pretraining_data: {100 * fraction:5.1f}% | {self.documents} documents "
            f"({self.documents / elapsed:.0f}/s) | {self.instances} instances ({self.instances / elapsed:.0f}/s) "
            f"| elapsed {elapsed:.0f}s | ETA {eta:.0f}s\n"
        )
        sys.stderr.flush()


def _shares(counts: dict) -> dict:
    total = sum(counts.values())
    return {str(k): (v / total if total else 0.0) for k, v in sorted(counts.items())}


def build_summary(config: PipelineConfig, stats: InstanceStats, counters: ReadCounters, documents: int,
                  sentences: int, elapsed: float) -> dict:
    n = stats.instances
    replacements = {"mask": stats.replaced_mask, "keep": stats.replaced_keep, "random": stats.replaced_random}
    labels = {"0": stats.sop_in_order, "1": stats.sop_swapped + stats.sop_random_document}
    return {
        "instances": n,
        "output_files": list(config.output_files),
        "input_files": list(config.input_files),
        "documents": documents,
        "sentences": sentences,
        "input_lines": counters.lines,
        "invalid_lines_skipped": counters.invalid_lines_skipped,
        "mean_tokens": stats.tokens / n if n else 0.0,
        "masked_fraction": stats.masked / stats.tokens if stats.tokens else 0.0,
        "mean_masked_per_instance": stats.masked / n if n else 0.0,
        "ngram_length_histogram": {
            "drawn": {str(k): v for k, v in sorted(stats.ngram_draws.items())},
            "drawn_shares": _shares(stats.ngram_draws),
            "masked_words": {str(k): v for k, v in sorted(stats.masked_ngram_words.items())},
            "masked_words_shares": _shares(stats.masked_ngram_words),
        },
        "replacement_counts": replacements,
        "replacement_shares": _shares(replacements),
        "sop_label_counts": labels,
        "sop_label_shares": _shares(labels),
        "sop_sources": {
            "in_order": stats.sop_in_order,
            "swapped": stats.sop_swapped,
            "random_document": stats.sop_random_document,
        },
        "settings": {
            "vocab_file": config.vocab_file,
            "spm_model_file": config.spm_model_file,
            "do_lower_case": config.do_lower_case,
            "random_seed": config.random_seed,
            "dupe_factor": config.dupe_factor,
            "block_size_mb": config.block_size_mb,
            "num_workers": config.num_workers,
            **asdict(config.options),
        },
        "elapsed_seconds": elapsed,
        "instances_per_second": n / elapsed if elapsed > 0 else 0.0,
    }


def _write_json_atomic(path: str, payload: dict) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=False) + "\n")


def create_pretraining_data(config: PipelineConfig) -> dict:
    """Runs the whole job; returns the summary (also written as JSON next to the output).

    Outputs are written under temporary names and renamed only on success; on
    any error they are removed and the error propagates.
    """
    validate(config)
    _check_tokenizer(config)
    import tensorflow as tf  # the TFRecord writer (main process only)

    start = time.monotonic()
    for path in config.output_files:
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
    temp_files = [f"{path}.tmp.{os.getpid()}" for path in config.output_files]
    writers = []
    stats = InstanceStats()
    counters = ReadCounters()
    documents = sentences = 0
    total_bytes = sum(os.path.getsize(p) for p in config.input_files) * config.dupe_factor
    progress = _Progress(total_bytes, config.progress_interval)
    try:
        writers = [tf.io.TFRecordWriter(tmp) for tmp in temp_files]
        num_written = 0
        checked_nonempty = False
        last_result = None
        for dupe, result in _iter_results(config, counters):
            if dupe > 0 and not checked_nonempty:
                _check_nonempty(config, documents)
                checked_nonempty = True
            if dupe == 0:
                documents += result.documents
                sentences += result.sentences
            stats.merge(result.stats)
            for record in result.records:
                writers[num_written % len(writers)].write(record)
                num_written += 1
            progress.update(result)
            last_result = result
        _check_nonempty(config, documents)
        for writer in writers:
            writer.close()
        writers = []
        for tmp, path in zip(temp_files, config.output_files):
            os.replace(tmp, path)
        if last_result is not None:
            progress.update(BlockResult([], InstanceStats(), 0, 0, 0), final=True)
    except BaseException:
        for writer in writers:
            writer.close()
        for tmp in temp_files:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    summary = build_summary(config, stats, counters, documents, sentences, time.monotonic() - start)
    summary_file = config.summary_file or default_summary_file(",".join(config.output_files))
    _write_json_atomic(summary_file, summary)
    summary["summary_file"] = summary_file
    return summary


def _check_tokenizer(config: PipelineConfig) -> None:
    """Loads the tokenizer once up front, so a bad model fails clearly before any work (not in a worker)."""
    try:
        FullTokenizer(vocab_file=config.vocab_file, do_lower_case=config.do_lower_case,
                      spm_model_file=config.spm_model_file)
    except (OSError, ValueError) as err:
        flag = "--spm_model_file" if config.spm_model_file else "--vocab_file"
        raise PretrainingDataError(f"{flag}: {err}") from None


def _check_nonempty(config: PipelineConfig, documents: int) -> None:
    if documents == 0:
        raise PretrainingDataError(
            f"no text found in --input_file ({', '.join(config.input_files)}): expected one sentence per line, "
            f"blank lines between documents"
        )
