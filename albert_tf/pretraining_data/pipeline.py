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
import contextlib
import errno
import math
import os
import resource
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator

from albert_tf.fileio import signals_deferred, sync_to_disk
from albert_tf.pretraining_data.document_store import (
    DATA_FILE, INDEX_FILE, DocumentStore, DocumentStoreWriter, token_typecode)
from albert_tf.pretraining_data.external_shuffle import ENTRY_HEADER, ShuffleStats
from albert_tf.pretraining_data.config import (  # noqa: F401  (the tool's API, re-exported)
    MIN_SEQ_LENGTH,
    PipelineConfig,
    PretrainingDataError,
    check_input_files,
    check_nonempty,
    check_tokenizer,
    default_summary_file,
    resolve_input_files,
    resolve_output_files,
    validate,
)
from albert_tf.pretraining_data.features import ExampleSerializer
from albert_tf.pretraining_data.options import InstanceStats
from albert_tf.pretraining_data.outputs import (WRITE_PROBLEMS, check_outputs, outputs_locked, part_name,
                                                reporting_write_problems, summary_path, work_dir_parent,
                                                work_dir_prefix)
from albert_tf.pretraining_data.reading import CorpusFacts, ReadCounters, iter_blocks
from albert_tf.pretraining_data.summary import Progress, build_summary, write_summary_json
from albert_tf.pretraining_data.workers import (  # noqa: F401  (document_seed: re-exported)
    Runner,
    WorkerSettings,
    document_seed,
    make_instances,
    tokenize_block,
    write_bucket,
)

TFRECORD_FRAMING = 16  # length, its CRC, data CRC


@contextlib.contextmanager
def _writing_to(path: str) -> Iterator[None]:
    """A write error that names no file (os.write, copy_file_range, a worker's f.write) names ``path``:
    a full disk then says which one is full, the outputs' or --tmp_dir's."""
    try:
        yield
    except OSError as e:
        if e.filename is None and e.errno in WRITE_PROBLEMS:
            raise OSError(e.errno, e.strerror, path) from None
        raise


def _tokenize_corpus(config: PipelineConfig, runner: Runner, work_dir: str, counters: ReadCounters) -> CorpusFacts:
    """Phase 1: input files -> DocumentStore in `work_dir`."""
    block_bytes = max(1, int(config.block_size_mb * 1024 * 1024))
    progress = Progress("tokenizing", sum(os.path.getsize(p) for p in config.input_files), config.progress_interval,
                        counts=("documents",))  # instances are made in the next phase
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


def _make_instances(config: PipelineConfig, runner: Runner, store: DocumentStore, unit_bytes: int,
                    num_buckets: int, stats: InstanceStats) -> ScatterFacts:
    """Phase 2: all passes' instances scattered into the workers' bucket files."""
    progress = Progress("instances", store.num_documents * config.dupe_factor, config.progress_interval)
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


def _write_outputs(config: PipelineConfig, runner: Runner, scatter: ScatterFacts, num_buckets: int,
                   temp_files: list[str], shuffle_stats: ShuffleStats) -> None:
    """Phase 3: workers sort the buckets into pieces; their pieces are appended here in bucket order."""
    total = sum(scatter.bucket_counts.values())
    progress = Progress("writing", total, config.progress_interval, counts=("instances",))  # one record each
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
            for piece, output, path in zip(result.pieces, outputs, config.output_files):
                if piece is not None:
                    with _writing_to(path):
                        _append_file(piece, output)
            shuffle_stats.merge(result.stats)
            progress.update(result.instances, instances=result.instances)
        progress.update(final=True)
    finally:
        for output in outputs:
            os.close(output)


def create_pretraining_data(config: PipelineConfig) -> dict:
    """Runs the whole job; returns the summary (also written as JSON next to the output).

    Outputs are written under temporary names and renamed only on success; on
    any error or interrupt they and the temporary directory are removed and the
    error propagates. An output that cannot be written (full disk, read-only or forbidden
    folder) is a ``PretrainingDataError`` naming the path.
    """
    with reporting_write_problems(config):
        return _create_pretraining_data(config)


def _create_pretraining_data(config: PipelineConfig) -> dict:
    validate(config)
    tokenizer = check_tokenizer(config)
    check_outputs(config, "local")
    with outputs_locked(config):
        return _write_pretraining_data(config, tokenizer)


def _write_pretraining_data(config: PipelineConfig, tokenizer) -> dict:
    vocab = {"vocab_size": tokenizer.vocab_size,
             "vocab_type": "sentencepiece" if tokenizer.sp_model is not None else "wordpiece"}
    start = time.monotonic()
    tmp_parent = work_dir_parent(config)
    os.makedirs(tmp_parent, exist_ok=True)
    work_dir = tempfile.mkdtemp(prefix=work_dir_prefix(config), dir=tmp_parent)
    token = uuid.uuid4().hex
    temp_files = [part_name(path, token) for path in config.output_files]
    settings = WorkerSettings(config.vocab_file, config.spm_model_file, config.do_lower_case, config.options,
                               config.random_seed, config.dupe_factor, config.shuffle, work_dir,
                               token_typecode(tokenizer.vocab_size))
    stats = InstanceStats()
    shuffle_stats = ShuffleStats()
    counters = ReadCounters()
    summary_file = summary_path(config)
    try:
        runner = Runner(settings, config.num_workers)
        # Everything but the outputs' own appends (named by _write_outputs) is written in the work folder.
        with _writing_to(work_dir), contextlib.closing(runner):
            facts = _tokenize_corpus(config, runner, work_dir, counters)
            check_nonempty(config, facts.documents)
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
        shuffle = {"buckets": num_buckets, "bucket_splits": shuffle_stats.bucket_splits,
                   "largest_sorted_bytes": shuffle_stats.largest_sorted_bytes,
                   "temporary_bytes": facts.store_bytes + scatter.bytes_written}
        summary = build_summary(config, stats, counters, facts, vocab, shuffle, time.monotonic() - start,
                                [os.path.getsize(tmp) for tmp in temp_files])  # complete: renamed as they are
        # The summary first: it marks the outputs as this tool's, so that a run killed between the
        # renames can be rerun over them (check_outputs). Ctrl-C or SIGTERM waits for the last rename.
        for tmp in temp_files:  # on disk before the renames: a power cut then leaves no empty output
            sync_to_disk(tmp)
        with signals_deferred():
            write_summary_json(summary_file, summary)
            for tmp, path in zip(temp_files, config.output_files):
                os.replace(tmp, path)
    except BaseException:
        for tmp in temp_files:  # this run's parts only (their token is this run's)
            if os.path.exists(tmp):
                os.remove(tmp)
        raise
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    summary["summary_file"] = summary_file
    return summary
