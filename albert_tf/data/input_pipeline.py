"""TFRecord input pipelines for the training loop: read, shuffle, slice, parse, batch.

Every pipeline here is deterministic given its ``seed`` (no sloppy interleave).  Training
data is one global stream of batches that does not depend on the topology: every worker
reads the same seeded stream of records, groups it into global batches of
``per-replica batch × replicas`` and keeps only its replicas' rows (contiguous: global
replica ``r`` gets rows ``[r·b, (r+1)·b)``), then parses just those.  So step ``s`` trains on
the same examples, in the same global positions, on one device, N replicas or N workers,
and the input position after ``s`` steps is simply ``s`` global batches: a run can resume
on another topology by skipping that many batches (``TrainInputContext``).  Each worker
reads every record (parsing only its own); ``shard_mode="files"`` trades that away for
I/O that scales with workers, at the price of topology-dependent batches.
"""
from __future__ import annotations

from typing import Callable, Sequence

import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE
SHARD_MODES = ("auto", "files", "records")


class TrainInputContext(tf.distribute.InputContext):
    """An ``InputContext`` that also says how many global batches the stream must skip
    (set by the Trainer when it resumes without a saved input position for this topology)."""

    def __init__(self, num_input_pipelines: int = 1, input_pipeline_id: int = 0,
                 num_replicas_in_sync: int = 1, global_batches_to_skip: int = 0):
        super().__init__(num_input_pipelines, input_pipeline_id, num_replicas_in_sync)
        self.global_batches_to_skip = int(global_batches_to_skip)


def expand_file_patterns(file_patterns: str | Sequence[str]) -> list[str]:
    """Files matching a comma-separated string or a list of globs, in a stable order.

    Raises ``ValueError`` naming the pattern when one matches nothing.
    """
    if isinstance(file_patterns, str):
        patterns = [p.strip() for p in file_patterns.split(",") if p.strip()]
    else:
        patterns = [p for p in file_patterns if p]
    if not patterns:
        raise ValueError("no input file pattern given")
    files: list[str] = []
    for pattern in patterns:
        matched = sorted(tf.io.gfile.glob(pattern))
        if not matched:
            raise ValueError(f"input file pattern {pattern!r} matches no file")
        files.extend(f for f in matched if f not in files)
    return files


def make_tfrecord_dataset(
    file_patterns: str | Sequence[str],
    parse_fn: Callable[[tf.Tensor], dict],
    batch_size_per_replica: int,
    is_training: bool,
    input_context: tf.distribute.InputContext | None = None,
    seed: int | None = None,
    drop_remainder: bool = True,
    shuffle_buffer_size: int = 100,
    cycle_length: int = 4,
    repeat: bool | None = None,
    shard_mode: str = "auto",
    with_stream_index: bool = False,
) -> tf.data.Dataset:
    """A dataset of per-replica batches of parsed TFRecords.

    Training (``is_training``): the file list is repeated and shuffled, files are
    read ``cycle_length`` at a time (interleaved), records are shuffled in a buffer
    of ``shuffle_buffer_size`` (the original used 100), cut into global batches, this
    worker's rows parsed and batched per replica (the module doc says why).
    Evaluation: files in order, no shuffling, each record once unless ``repeat``
    (default: ``is_training``) cycles them; with several workers each keeps every n-th
    record (evaluation sums over all workers, so no record is lost or counted twice).

    ``shard_mode`` (training with several workers):
    - ``records`` (and ``auto``): the topology-independent global stream above;
    - ``files``: each worker reads its own files (needs >= one file per worker); batches
      then depend on the worker count, and resuming on another topology is refused.

    ``parse_fn`` maps one serialized ``tf.train.Example`` to a dict of tensors; with
    ``with_stream_index`` it is called as ``parse_fn(serialized, index)``, ``index`` being the
    record's int64 position in the (shuffled, repeated) stream that every worker reads alike,
    for per-example randomness that is reproducible on any topology and on resume.
    """
    if shard_mode not in SHARD_MODES:
        raise ValueError(f"shard_mode={shard_mode!r}: expected one of {', '.join(SHARD_MODES)}")
    if batch_size_per_replica < 1:
        raise ValueError(f"batch_size_per_replica must be >= 1, got {batch_size_per_replica}")
    files = expand_file_patterns(file_patterns)
    if not any(tf.io.gfile.stat(f).length > 0 for f in files):  # stops at the first file with bytes
        # A repeated dataset of no records never yields (nor ends): a run would spin forever.
        raise ValueError(f"every input file is empty (0 bytes), so there are no records to read: "
                         f"{', '.join(files[:5])}{', ...' if len(files) > 5 else ''}")
    repeat = is_training if repeat is None else repeat
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    num_replicas = input_context.num_replicas_in_sync if input_context else 1
    to_skip = getattr(input_context, "global_batches_to_skip", 0) if is_training else 0
    if shard_mode == "auto":
        shard_mode = "records"
    by_files = is_training and shard_mode == "files" and num_pipelines > 1
    if by_files and len(files) < num_pipelines:
        raise ValueError(
            f"shard_mode='files' needs at least one file per worker: {len(files)} file(s) for "
            f"{num_pipelines} workers"
        )
    if by_files and to_skip:
        raise ValueError(
            "cannot resume with shard_mode='files' on another topology than the checkpoint's "
            "(batches depend on the worker count there): resume with the same number of workers "
            "and replicas, or train with shard_mode='records'")

    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(files))
    if by_files:
        dataset = dataset.shard(num_pipelines, pipeline_id)
    num_files = len(files[pipeline_id::num_pipelines]) if by_files else len(files)
    parse = (lambda index, record: parse_fn(record, index)) if with_stream_index else parse_fn
    if not is_training:
        dataset = dataset.flat_map(tf.data.TFRecordDataset)  # files in order
        if with_stream_index:
            dataset = dataset.enumerate()
        if num_pipelines > 1:
            dataset = dataset.shard(num_pipelines, pipeline_id)
        if repeat:
            dataset = dataset.repeat()
        dataset = dataset.map(parse, num_parallel_calls=AUTOTUNE, deterministic=True)
        return dataset.batch(batch_size_per_replica, drop_remainder=drop_remainder).prefetch(AUTOTUNE)

    dataset = dataset.repeat().shuffle(num_files, seed=seed)
    dataset = dataset.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(cycle_length, num_files),
        num_parallel_calls=AUTOTUNE,
        deterministic=True,  # never the original's sloppy mode: resume must replay the same order
    )
    dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    if with_stream_index:
        dataset = dataset.enumerate()
    if not by_files:
        # The global stream: cut global batches, skip those already trained on, keep our rows.
        local_rows = batch_size_per_replica * (num_replicas // num_pipelines)
        dataset = dataset.batch(local_rows * num_pipelines, drop_remainder=True)
        if to_skip:
            dataset = dataset.skip(to_skip)
        if num_pipelines > 1:
            start = pipeline_id * local_rows
            dataset = dataset.map(lambda *batch: tuple(t[start:start + local_rows] for t in batch))
        dataset = dataset.unbatch()
    dataset = dataset.map(parse, num_parallel_calls=AUTOTUNE, deterministic=True)
    dataset = dataset.batch(batch_size_per_replica, drop_remainder=drop_remainder)
    return dataset.prefetch(AUTOTUNE)
