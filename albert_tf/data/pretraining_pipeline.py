"""Streaming, parallel, reproducible driver for pretraining data (create_pretraining_data.py).

Three phases, like the original's (read all documents; make instances for
every document in every `dupe_factor` pass; shuffle all instances together)
but with memory bounded whatever the corpus size:

1. Tokenize: the input is read as a stream of documents (a blank line or the
   end of a file ends one; the original continued a file's last document into
   the next file) cut into blocks of about `block_size_mb` of text;
   workers tokenize blocks, the main process appends the documents, in corpus
   order, to a `DocumentStore` on disk (token ids plus an offset index).
2. Instances: for each pass and each range of documents, a worker reads the
   range from the store and makes its instances. "A random other document"
   (single-segment chunks, `random_next_sentence`) is drawn uniformly from the
   whole corpus, redrawn up to 10 times while it is the current document (the
   original's loop, which after 10 misses keeps the current one) and read from the store
   by offset. Each instance gets a random 64-bit sort key; serialized and framed
   as TFRecords, instances are scattered by key range into bucket files, each
   worker appending to files of its own.
3. Write: workers sort buckets by key (several at once) and write each sorted
   bucket's share of every output as a piece file, instance k of the result
   going to shard k % num_shards (as the original's round-robin writer); the
   main process appends the pieces to the outputs in bucket order.

Reproducibility: every draw for document d in pass p, sort keys included, comes
from random.Random(seed(random_seed, p, d)), and equal keys keep generation
order (pass, document, instance) by the ordinal stored beside each key. The
output is therefore one uniform random permutation of all instances, the same
bytes for any --num_workers, --block_size_mb, --shuffle_bucket_mb or --tmp_dir.

Memory: about 2 * num_workers + 1 blocks (text, then their instances) in
flight, and in phase 3 one bucket of at most `shuffle_bucket_mb` in each
worker (a single document larger than a block is held whole). Disk, in a fresh
directory under `tmp_dir` (default: the first output's directory) that is
removed at the end, also on errors: the token store (about half the text), the
buckets (about the size of the output) and, in phase 3, pieces of the output.
No process imports TensorFlow: the records are encoded and framed by `tfrecord`.
"""
from __future__ import annotations

import collections
import glob
import hashlib
import json
import math
import multiprocessing
import os
import random
import resource
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable, Iterator, NamedTuple

from albert_tf.data.document_store import (
    DATA_FILE,
    INDEX_FILE,
    CorpusView,
    DocumentStore,
    DocumentStoreWriter,
    encode_document,
    token_typecode,
)
from albert_tf.data.external_shuffle import (
    ENTRY_HEADER,
    KEY_SPACE,
    ShuffleStats,
    append_to_buckets,
    bucket_of,
    entry,
    sorted_bucket,
)
from albert_tf.data.pretraining_features import ExampleSerializer
from albert_tf.data.pretraining_instances import (
    InstanceOptions,
    InstanceStats,
    VocabInfo,
    create_instances_from_document,
)
from albert_tf.data.tfrecord import frame_record
from albert_tf.fileio import atomic_write_text
from albert_tf.tokenization import FullTokenizer, preprocess_text

MIN_SEQ_LENGTH = 5  # [CLS] A [SEP] B [SEP] with one token each
TFRECORD_FRAMING = 16  # length, its CRC, data CRC


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
    block_size_mb: float = 1.0
    shuffle_bucket_mb: float = 64.0  # most bytes of instances a worker sorts in memory at once (phase 3)
    tmp_dir: str | None = None  # default: the first output's directory
    shuffle: bool = True  # False: generation order (pass, document, instance), for tests and inspection
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
        (config.shuffle_bucket_mb > 0, f"--shuffle_bucket_mb must be > 0, got {config.shuffle_bucket_mb}"),
        (not config.tmp_dir or not os.path.exists(config.tmp_dir) or os.path.isdir(config.tmp_dir),
         f"--tmp_dir: {config.tmp_dir} is not a directory"),
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


# ------------------------------------------------------------------ work done in workers
class TokenizedBlock(NamedTuple):
    blob: bytes  # DocumentStore records of the block's documents
    record_sizes: list[int]
    sentences: int
    tokens: int


class UnitResult(NamedTuple):
    tag: str  # the writer tag of the bucket files appended to
    bucket_counts: dict[int, int]  # bucket -> instances appended to it
    bytes_written: int  # bucket-file bytes
    stats: InstanceStats
    instances: int
    documents: int


class BucketResult(NamedTuple):
    bucket: int
    instances: int
    pieces: list[str | None]  # per output: the piece file of this bucket's share, or None
    stats: ShuffleStats


@dataclass(frozen=True)
class _WorkerSettings:
    vocab_file: str | None
    spm_model_file: str | None
    do_lower_case: bool
    options: InstanceOptions
    random_seed: int
    dupe_factor: int
    shuffle: bool
    work_dir: str
    typecode: str


class _Context:
    """Per-process state: tokenizer, vocabulary facts, serializer, the document store (opened when first used)."""

    def __init__(self, settings: _WorkerSettings):
        self.settings = settings
        self.tokenizer = FullTokenizer(vocab_file=settings.vocab_file, do_lower_case=settings.do_lower_case,
                                       spm_model_file=settings.spm_model_file)
        self.use_spm = self.tokenizer.sp_model is not None
        self.vocab = VocabInfo.from_tokenizer(self.tokenizer)
        options = settings.options
        self.serializer = ExampleSerializer(
            options.max_seq_length, options.num_masked_slots, max(self.vocab.vocab_size, options.max_seq_length)
        )
        self._store: DocumentStore | None = None

    @property
    def store(self) -> DocumentStore:
        if self._store is None:
            self._store = DocumentStore(self.settings.work_dir, self.settings.typecode)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


_CONTEXT: _Context | None = None


def _init_worker(settings: _WorkerSettings, in_worker_process: bool = True) -> None:
    global _CONTEXT
    if in_worker_process:
        # Ctrl-C goes to the whole process group: only the main process acts on it
        # (it stops the pool and removes temporaries, workers' files included). A forked
        # worker would also inherit the CLI's SIGTERM handler: back to the default.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _CONTEXT is None or _CONTEXT.settings != settings:  # a forked worker has it already
        _CONTEXT = _Context(settings)


def document_seed(random_seed: int, dupe: int, document_index: int) -> int:
    """A stable 64-bit seed for (random_seed, pass, document), the same in every process."""
    digest = hashlib.blake2b(f"albert_tf/pretraining/{random_seed}/{dupe}/{document_index}".encode(),
                             digest_size=8).digest()
    return int.from_bytes(digest, "little")


def ordered_key(dupe: int, document_index: int, k: int, num_documents: int, dupe_factor: int) -> int:
    """Sort key of generation order (pass, document, instance), spread over the key space (shuffle=False)."""
    spacing = KEY_SPACE // (num_documents * dupe_factor)
    if k >= spacing:
        raise PretrainingDataError("shuffle=False: too many instances per document for the key space")
    return (dupe * num_documents + document_index) * spacing + k


def _tokenize_documents(ctx: _Context, raw_documents: list[list[str]]) -> tuple[list[list[list[int]]], int]:
    """Raw lines -> documents of id lists; as the original, a line empty after clean-up splits documents."""
    tokenizer = ctx.tokenizer
    documents: list[list[list[int]]] = []
    sentences = 0
    for raw_document in raw_documents:
        document: list[list[int]] = []
        for line in raw_document:
            if ctx.use_spm:
                text = preprocess_text(line, lower=ctx.settings.do_lower_case)
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


def tokenize_block(raw_documents: list[list[str]]) -> TokenizedBlock:
    """Phase 1: one block of raw documents as DocumentStore records."""
    ctx = _CONTEXT
    documents, sentences = _tokenize_documents(ctx, raw_documents)
    records = [encode_document(document, ctx.settings.typecode) for document in documents]
    tokens = sum(len(sentence) for document in documents for sentence in document)
    return TokenizedBlock(b"".join(records), [len(r) for r in records], sentences, tokens)


MAX_INSTANCES_PER_UNIT = 1 << 32  # an ordinal is (unit << 32) | instance within the unit


def make_instances(unit: int, dupe: int, start: int, end: int, num_buckets: int) -> UnitResult:
    """Phase 2: instances of documents [start, end) for pass `dupe` (the `unit`-th task), framed, keyed
    and appended to this worker's bucket files."""
    ctx = _CONTEXT
    settings = ctx.settings
    store = ctx.store
    corpus = CorpusView(store, start, store.read_range(start, end))
    serialize = ctx.serializer.serialize_instance
    stats = InstanceStats()
    buckets: dict[int, list[bytes]] = collections.defaultdict(list)
    count = 0
    first_ordinal = unit * MAX_INSTANCES_PER_UNIT
    for document_index in range(start, end):
        rng = random.Random(document_seed(settings.random_seed, dupe, document_index))
        instances = create_instances_from_document(corpus, document_index, settings.options, ctx.vocab, rng, stats)
        for k, inst in enumerate(instances):
            record = frame_record(serialize(inst.tokens, inst.segment_ids, inst.token_boundary,
                                            inst.masked_lm_positions, inst.masked_lm_ids, int(inst.is_random_next)))
            if settings.shuffle:
                key = rng.getrandbits(64)
            else:
                key = ordered_key(dupe, document_index, k, store.num_documents, settings.dupe_factor)
            buckets[bucket_of(key, num_buckets)].append(entry(key, first_ordinal + count + k, record))
        count += len(instances)
    if count >= MAX_INSTANCES_PER_UNIT:
        raise PretrainingDataError(f"{count} instances from documents {start}-{end}: lower --block_size_mb")
    blobs = {b: b"".join(parts) for b, parts in buckets.items()}
    tag = str(os.getpid())  # one writer per process: workers never share a bucket file
    append_to_buckets(settings.work_dir, tag, blobs)
    return UnitResult(tag, {b: len(parts) for b, parts in buckets.items()}, sum(map(len, blobs.values())), stats,
                      count, end - start)


def write_bucket(bucket: int, first_instance: int, num_buckets: int, tags: tuple[str, ...], num_outputs: int,
                 memory_limit: int, max_open: int) -> BucketResult:
    """Phase 3: sorts `bucket` and writes output j's share of it (instances k with k % num_outputs == j,
    k counted from `first_instance`, the number of instances in the buckets before it) to a piece file."""
    _CONTEXT.close()  # the document store is no longer needed (its files are already unlinked)
    work_dir = _CONTEXT.settings.work_dir
    stats = ShuffleStats()
    paths = [os.path.join(work_dir, f"piece-{bucket:05d}-{j:05d}") for j in range(num_outputs)]
    files: list = [None] * num_outputs
    written = first_instance
    try:
        for run in sorted_bucket(work_dir, bucket, num_buckets, tags, memory_limit, max_open, stats):
            for j in range(num_outputs):
                share = run[(j - written) % num_outputs :: num_outputs]
                if share:
                    if files[j] is None:
                        files[j] = open(paths[j], "wb", buffering=1 << 20)
                    files[j].writelines(share)
            written += len(run)
    finally:
        for f in files:
            if f is not None:
                f.close()
    return BucketResult(bucket, written - first_instance,
                        [path if f is not None else None for path, f in zip(paths, files)], stats)


# ------------------------------------------------------------------ orchestration
class _Runner:
    """Runs a phase's tasks in-process (1 worker) or in a pool, yielding results in task order with a
    bounded number in flight."""

    def __init__(self, settings: _WorkerSettings, num_workers: int):
        self.num_workers = num_workers
        self._executor = None
        if num_workers == 1:
            _init_worker(settings, in_worker_process=False)
            return
        if "tensorflow" in sys.modules or "fork" not in multiprocessing.get_all_start_methods():
            # TensorFlow (loaded by a caller: tests, notebooks) must not be forked: fresh interpreters.
            context = multiprocessing.get_context("spawn")
        else:
            # The CLI's case: build the tokenizer once here and fork, instead of every worker starting an
            # interpreter and building it again (about 0.6 CPU-seconds each). The pool forks all workers
            # before it starts its thread, and this process has no other threads.
            _init_worker(settings, in_worker_process=False)
            context = multiprocessing.get_context("fork")
        self._executor = ProcessPoolExecutor(max_workers=num_workers, mp_context=context,
                                             initializer=_init_worker, initargs=(settings,))
        # Start the workers now, before this process opens any output (a fork copies open files and buffers).
        self._executor.submit(int).result()

    def map(self, fn: Callable, tasks: Iterable[tuple]) -> Iterator:
        if self._executor is None:
            for args in tasks:
                yield fn(*args)
            return
        pending: collections.deque = collections.deque()
        for args in tasks:
            pending.append(self._executor.submit(fn, *args))
            while len(pending) > 2 * self.num_workers:  # bounded read-ahead
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def close(self) -> None:
        global _CONTEXT
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if _CONTEXT is not None:
            _CONTEXT.close()
            _CONTEXT = None


class _Progress:
    """Progress lines on stderr for one phase: share done, documents and instances per second, ETA."""

    def __init__(self, phase: str, total: int, interval: float):
        self.phase = phase
        self.total = max(1, total)
        self.interval = interval
        self.start = self.last = time.monotonic()
        self.done = self.documents = self.instances = 0
        self._shown: tuple | None = None

    def update(self, done: int = 0, documents: int = 0, instances: int = 0, final: bool = False) -> None:
        self.done += done
        self.documents += documents
        self.instances += instances
        now = time.monotonic()
        if self.interval <= 0 or (now - self.last < self.interval and not final):
            return
        if final and self._shown == (self.done, self.documents, self.instances):
            return  # the last line already said it
        self.last = now
        self._shown = (self.done, self.documents, self.instances)
        elapsed = max(now - self.start, 1e-9)
        fraction = min(1.0, self.done / self.total)
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else float("inf")
        sys.stderr.write(
            f"create_pretraining_data: {self.phase} {100 * fraction:5.1f}% | {self.documents} documents "
            f"({self.documents / elapsed:.0f}/s) | {self.instances} instances ({self.instances / elapsed:.0f}/s) "
            f"| elapsed {elapsed:.0f}s | ETA {eta:.0f}s\n"
        )
        sys.stderr.flush()


@dataclass
class CorpusFacts:
    documents: int = 0
    sentences: int = 0
    tokens: int = 0
    store_bytes: int = 0


def _tokenize_corpus(config: PipelineConfig, runner: _Runner, work_dir: str, counters: ReadCounters) -> CorpusFacts:
    """Phase 1: input files -> DocumentStore in `work_dir`."""
    block_bytes = max(1, int(config.block_size_mb * 1024 * 1024))
    progress = _Progress("tokenizing", sum(os.path.getsize(p) for p in config.input_files), config.progress_interval)
    blocks = iter_blocks(config.input_files, block_bytes, config.skip_invalid_lines, counters)
    sizes: collections.deque = collections.deque()

    def tasks():
        for raw_documents, raw_bytes in blocks:
            sizes.append(raw_bytes)
            yield (raw_documents,)

    facts = CorpusFacts()
    writer = DocumentStoreWriter(work_dir)
    try:
        for block in runner.map(tokenize_block, tasks()):
            writer.append(block.blob, block.record_sizes)
            facts.documents += len(block.record_sizes)
            facts.sentences += block.sentences
            facts.tokens += block.tokens
            progress.update(sizes.popleft(), documents=len(block.record_sizes))
    finally:
        writer.close()
    facts.store_bytes = writer.num_bytes
    progress.update(final=True)
    return facts


MAX_BUCKETS = 16384  # a unit's instances (~600 per MB of text) go to at most this many files: ~1 open each


def _max_open_files() -> int:
    """Files a worker opens at once to split an oversized bucket: half the descriptor limit, at most 1024."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return max(2, min(1024, (soft - 64) // 2 if soft != resource.RLIM_INFINITY else 1024))


def choose_num_buckets(config: PipelineConfig, facts: CorpusFacts, record_bytes: int) -> int:
    """Enough buckets that each holds about half the sort memory, from a generous estimate of the output
    (a bucket that still turns out too large is split on disk; the count never changes the output)."""
    max_num_tokens = config.options.max_seq_length - 3
    instances_per_pass = facts.documents + 2 * facts.tokens / max_num_tokens
    estimate = config.dupe_factor * instances_per_pass * (record_bytes + TFRECORD_FRAMING + ENTRY_HEADER.size)
    target = config.shuffle_bucket_mb * (1 << 20) / 2
    return max(1, min(MAX_BUCKETS, math.ceil(estimate / target)))


@dataclass
class ScatterFacts:
    bucket_counts: collections.Counter = field(default_factory=collections.Counter)  # bucket -> instances
    tags: set = field(default_factory=set)  # writer tags of the bucket files
    bytes_written: int = 0


def _make_instances(config: PipelineConfig, runner: _Runner, store: DocumentStore, unit_bytes: int,
                    num_buckets: int, stats: InstanceStats) -> ScatterFacts:
    """Phase 2: all passes' instances scattered into the workers' bucket files."""
    progress = _Progress("instances", store.num_documents * config.dupe_factor, config.progress_interval)
    ranges = ((dupe, start, end) for dupe in range(config.dupe_factor) for start, end in store.iter_ranges(unit_bytes))
    tasks = ((unit, dupe, start, end, num_buckets) for unit, (dupe, start, end) in enumerate(ranges))
    facts = ScatterFacts()
    for result in runner.map(make_instances, tasks):
        facts.bucket_counts.update(result.bucket_counts)
        facts.tags.add(result.tag)
        facts.bytes_written += result.bytes_written
        stats.merge(result.stats)
        progress.update(result.documents, documents=result.documents, instances=result.instances)
    progress.update(final=True)
    return facts


def _append_file(source: str, target_fd: int) -> None:
    """Appends the file at `source` to the open file `target_fd` (in the kernel where it can), removes it."""
    with open(source, "rb") as f:
        remaining = os.fstat(f.fileno()).st_size
        copy_file_range = getattr(os, "copy_file_range", None)
        while remaining > 0 and copy_file_range is not None:
            try:
                copied = copy_file_range(f.fileno(), target_fd, remaining)
            except OSError:  # e.g. another file system on an older kernel: copy through user space
                break
            if copied == 0:
                break
            remaining -= copied
        while remaining > 0:
            chunk = f.read(min(remaining, 1 << 20))
            if not chunk:
                raise OSError(f"{source} ended early")
            view = memoryview(chunk)
            while view:
                view = view[os.write(target_fd, view):]
            remaining -= len(chunk)
    os.remove(source)


def _write_outputs(config: PipelineConfig, runner: _Runner, scatter: ScatterFacts, num_buckets: int,
                   temp_files: list[str], shuffle_stats: ShuffleStats) -> None:
    """Phase 3: workers sort the buckets into pieces; their pieces are appended here in bucket order."""
    total = sum(scatter.bucket_counts.values())
    progress = _Progress("writing", total, config.progress_interval)
    memory_limit = int(config.shuffle_bucket_mb * (1 << 20))
    tags, max_open = tuple(sorted(scatter.tags)), _max_open_files()
    tasks, first = [], 0
    for bucket in sorted(scatter.bucket_counts):
        tasks.append((bucket, first, num_buckets, tags, len(temp_files), memory_limit, max_open))
        first += scatter.bucket_counts[bucket]
    outputs = [os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666) for tmp in temp_files]
    try:
        for result in runner.map(write_bucket, tasks):
            expected = scatter.bucket_counts[result.bucket]
            if result.instances != expected:
                raise RuntimeError(f"bucket {result.bucket}: sorted {result.instances} of {expected} instances")
            for piece, output in zip(result.pieces, outputs):
                if piece is not None:
                    _append_file(piece, output)
            shuffle_stats.merge(result.stats)
            progress.update(result.instances, instances=result.instances)
        progress.update(final=True)
    finally:
        for output in outputs:
            os.close(output)


def _shares(counts: dict) -> dict:
    total = sum(counts.values())
    return {str(k): (v / total if total else 0.0) for k, v in sorted(counts.items())}


def build_summary(config: PipelineConfig, stats: InstanceStats, counters: ReadCounters, facts: CorpusFacts,
                  vocab: dict, shuffle: dict, elapsed: float) -> dict:
    n = stats.instances
    replacements = {"mask": stats.replaced_mask, "keep": stats.replaced_keep, "random": stats.replaced_random}
    labels = {"0": stats.sop_in_order, "1": stats.sop_swapped + stats.sop_random_document}
    return {
        "instances": n,
        "output_files": list(config.output_files),
        "input_files": list(config.input_files),
        "documents": facts.documents,
        "sentences": facts.sentences,
        "tokens": facts.tokens,
        "input_lines": counters.lines,
        "invalid_lines_skipped": counters.invalid_lines_skipped,
        **vocab,
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
        "shuffle": shuffle,
        "settings": {
            "vocab_file": config.vocab_file,
            "spm_model_file": config.spm_model_file,
            "do_lower_case": config.do_lower_case,
            "random_seed": config.random_seed,
            "dupe_factor": config.dupe_factor,
            "block_size_mb": config.block_size_mb,
            "shuffle_bucket_mb": config.shuffle_bucket_mb,
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
    any error or interrupt they and the temporary directory are removed and the
    error propagates.
    """
    validate(config)
    tokenizer = _check_tokenizer(config)
    vocab = {"vocab_size": tokenizer.vocab_size,
             "vocab_type": "sentencepiece" if tokenizer.sp_model is not None else "wordpiece"}
    start = time.monotonic()
    for path in config.output_files:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp_parent = config.tmp_dir or os.path.dirname(os.path.abspath(config.output_files[0]))
    os.makedirs(tmp_parent, exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix=os.path.basename(config.output_files[0]) + ".tmp-", dir=tmp_parent)
    temp_files = [f"{path}.tmp.{os.getpid()}" for path in config.output_files]
    settings = _WorkerSettings(config.vocab_file, config.spm_model_file, config.do_lower_case, config.options,
                               config.random_seed, config.dupe_factor, config.shuffle, work_dir,
                               token_typecode(tokenizer.vocab_size))
    stats = InstanceStats()
    shuffle_stats = ShuffleStats()
    counters = ReadCounters()
    try:
        runner = _Runner(settings, config.num_workers)
        try:
            facts = _tokenize_corpus(config, runner, work_dir, counters)
            _check_nonempty(config, facts.documents)
            serializer = ExampleSerializer(config.options.max_seq_length, config.options.num_masked_slots,
                                           max(tokenizer.vocab_size, config.options.max_seq_length))
            num_buckets = choose_num_buckets(config, facts, serializer.max_record_bytes())
            store = DocumentStore(work_dir, settings.typecode)  # here only its index is read
            # Units of about a block of text, as in phase 1 (the store is smaller than the text).
            unit_bytes = max(1, int(config.block_size_mb * (1 << 20) * facts.store_bytes
                                    / max(1, counters.bytes_read)))
            try:
                scatter = _make_instances(config, runner, store, unit_bytes, num_buckets, stats)
            finally:
                store.close()
            for name in (DATA_FILE, INDEX_FILE):
                # frees the disk before the outputs grow, once each worker has closed it (write_bucket)
                os.remove(os.path.join(work_dir, name))
            _write_outputs(config, runner, scatter, num_buckets, temp_files, shuffle_stats)
        finally:
            runner.close()
        for tmp, path in zip(temp_files, config.output_files):
            os.replace(tmp, path)
    except BaseException:
        for tmp in temp_files:
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    shuffle = {"buckets": num_buckets, "bucket_splits": shuffle_stats.bucket_splits,
               "largest_sorted_bytes": shuffle_stats.largest_sorted_bytes,
               "temporary_bytes": facts.store_bytes + scatter.bytes_written}
    summary = build_summary(config, stats, counters, facts, vocab, shuffle, time.monotonic() - start)
    summary_file = config.summary_file or default_summary_file(",".join(config.output_files))
    _write_json_atomic(summary_file, summary)
    summary["summary_file"] = summary_file
    return summary


def _check_tokenizer(config: PipelineConfig) -> FullTokenizer:
    """Loads the tokenizer once up front, so a bad model fails clearly before any work (not in a worker)."""
    try:
        return FullTokenizer(vocab_file=config.vocab_file, do_lower_case=config.do_lower_case,
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
