"""The local tool's work in worker processes: tokenize a block, make one (pass, document range)'s
instances into bucket files, sort a bucket into pieces of the outputs; and the runner that maps a
phase's tasks over a process pool (or in-process for one worker)."""
from __future__ import annotations

import collections
import hashlib
import multiprocessing
import os
import random
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, NamedTuple

from albert_tf.pretraining_data.document_store import CorpusView, DocumentStore, encode_document
from albert_tf.pretraining_data.external_shuffle import (
    KEY_SPACE,
    ShuffleStats,
    append_to_buckets,
    bucket_of,
    entry,
    sorted_bucket,
)
from albert_tf.pretraining_data.config import PretrainingDataError
from albert_tf.pretraining_data.features import ExampleSerializer
from albert_tf.pretraining_data.instances import create_instances_from_document
from albert_tf.pretraining_data.options import InstanceOptions, InstanceStats
from albert_tf.pretraining_data.masking import VocabInfo
from albert_tf.pretraining_data.reading import tokenize_documents
from albert_tf.data.tfrecord import frame_record
from albert_tf.tokenization import FullTokenizer


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
class WorkerSettings:
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

    def __init__(self, settings: WorkerSettings):
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


def _exit_with_the_main_process() -> None:
    """A worker whose main process was killed (SIGKILL, the out-of-memory killer) exits within a second:
    otherwise it waits forever, holding the token store's disk space and the main process's output pipes
    (whoever reads them, the demo or CI, would wait forever too)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-main-process", daemon=True).start()


def _init_worker(settings: WorkerSettings, in_worker_process: bool = True) -> None:
    global _CONTEXT
    if in_worker_process:
        # Ctrl-C goes to the whole process group: only the main process acts on it
        # (it stops the pool and removes temporaries, workers' files included). A forked
        # worker would also inherit the CLI's SIGTERM handler: back to the default.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _exit_with_the_main_process()
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


def tokenize_block(raw_documents: list[list[str]]) -> TokenizedBlock:
    """Phase 1: one block of raw documents as DocumentStore records."""
    ctx = _CONTEXT
    documents, sentences = tokenize_documents(ctx.tokenizer, ctx.settings.do_lower_case, raw_documents)
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


class Runner:
    """Runs a phase's tasks in-process (1 worker) or in a pool, yielding results in task order with a
    bounded number in flight."""

    def __init__(self, settings: WorkerSettings, num_workers: int):
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
