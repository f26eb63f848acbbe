"""tf.data pipelines over a cached split (``feature_cache.CachedSplit``), built from its schema.

Every fine-tuning task reads its records through these functions, so parsing, padding rows,
batching and the batch's length are written once:

- ``train_dataset_fn``: the training loop's ``fn(input_context)``: repeated, shuffled (seeded)
  per-replica batches of the one topology-independent global stream
  (``input_pipeline.make_tfrecord_dataset``), so a resumed run and any replica or worker count
  see the same global batches. With ``group_by_length``, the global batches are drawn by the
  seeded length-grouping sampler instead (``batching.group_by_length_batches``: every row in every
  epoch).
- ``eval_dataset``: batches in file order, every record exactly once; the last batch is filled
  with all-zero rows (the schema's padding, ``is_real_example`` 0) so no record is dropped.
  Records of a schema without ``is_real_example`` (SQuAD's) get it as 1.

Both then cut each batch to the length its rows need (``LengthPolicy``): the longest row rounded
up to a multiple (CPU, GPU), one of a few static lengths (TPU, XLA), or, with
``--pad_to_max_length`` or a task whose head scores padding positions (``FineTuningTask.
padding_invariant``: SQuAD 1.1), the records' full length as the original. The numbers of a
padding-invariant task do not depend on it (``batching``'s docstring says why). With static lengths
a training step's global batch takes one bucket for all its replicas.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf

from albert_tf.data import batching
from albert_tf.data.feature_cache import CachedSplit
from albert_tf.data.input_pipeline import TrainInputContext, make_tfrecord_dataset

IS_REAL = "is_real_example"


@dataclasses.dataclass(frozen=True)
class LengthPolicy:
    """How long a batch is: with ``static``, the smallest of a few lengths that holds its longest row
    (``buckets``, default ``batching.bucket_lengths(max_seq_length)``: for TPUs and XLA, where each
    shape is compiled); else the longest row rounded up to ``multiple``; ``pad_to_max`` keeps the
    records' length (the original's behaviour)."""

    pad_to_max: bool = False
    multiple: int = batching.DEFAULT_MULTIPLE
    static: bool = False
    buckets: tuple[int, ...] | None = None
    pad_reason: str = "--pad_to_max_length"  # why rows stay padded, for the log line

    def describe(self) -> str:
        if self.pad_to_max:
            return f"every row padded to max_seq_length ({self.pad_reason})"
        if self.static:
            return f"static buckets {', '.join(map(str, self.buckets)) if self.buckets else '32 doubled up to max_seq_length'}"
        if self.multiple == 1:
            return "each batch at its longest row"
        return f"each batch at its longest row rounded up to a multiple of {self.multiple}"

    def apply(self, dataset: tf.data.Dataset, cached: CachedSplit) -> tf.data.Dataset:
        if self.pad_to_max:
            return dataset
        features = cached.schema.sequence_features
        if self.static:
            buckets = self.buckets or batching.bucket_lengths(int(cached.sizes["max_seq_length"]))
            trim = lambda batch: batching.trim_to_bucket(batch, buckets, features)  # noqa: E731
        else:
            trim = lambda batch: batching.trim_to_longest(batch, features, self.multiple)  # noqa: E731
        return dataset.map(trim, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


PAD_TO_MAX = LengthPolicy(pad_to_max=True)


def train_dataset_fn(cached: CachedSplit, global_batch_size: int, seed: int, shuffle_buffer: int = 10000,
                     lengths: LengthPolicy = PAD_TO_MAX,
                     group_by_length: bool = False) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """``fn(input_context)`` for the Trainer. The shuffle buffer covers up to ``shuffle_buffer``
    records (GLUE: the whole file for most tasks; SQuAD: the original's 100).

    With static lengths (TPU, XLA) every replica's batch of a step must have one shape: the global
    batch is cut to the bucket of its longest row, then split into this worker's per-replica batches
    (each worker parses the whole global batch for it). Else each per-replica batch is cut on its own."""

    def batches(context: tf.distribute.InputContext, batch_size: int) -> tf.data.Dataset:
        if group_by_length:
            return _grouped_by_length(cached, global_batch_size, batch_size, seed, context)
        return make_tfrecord_dataset(
            cached.record_file, cached.parse, batch_size, is_training=True, input_context=context,
            seed=seed, shuffle_buffer_size=max(1, min(shuffle_buffer, cached.num_records)), shard_mode="records")

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = input_context.get_per_replica_batch_size(global_batch_size)
        if not (lengths.static and not lengths.pad_to_max):
            return lengths.apply(batches(input_context, per_replica), cached).prefetch(tf.data.AUTOTUNE)
        whole = TrainInputContext(1, 0, 1, getattr(input_context, "global_batches_to_skip", 0))
        global_batches = lengths.apply(batches(whole, global_batch_size), cached)
        workers, worker = input_context.num_input_pipelines, input_context.input_pipeline_id
        local_rows = per_replica * (input_context.num_replicas_in_sync // workers)
        start = worker * local_rows
        local = global_batches.map(lambda batch: {k: v[start:start + local_rows] for k, v in batch.items()})
        return local.unbatch().batch(per_replica, drop_remainder=True).prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def record_lengths(cached: CachedSplit, records: tf.Tensor) -> np.ndarray:
    """Each record's length (one past its last real position), from the split's serialized ``records``."""
    masks = tf.data.Dataset.from_tensor_slices(records).batch(1024).map(lambda batch: cached.parse(batch)["input_mask"])
    lengths = [batching.example_lengths(mask.numpy()) for mask in masks]
    return np.concatenate(lengths) if lengths else np.zeros([0], np.int64)


def _grouped_by_length(cached: CachedSplit, global_batch_size: int, per_replica: int, seed: int,
                       input_context: tf.distribute.InputContext) -> tf.data.Dataset:
    """The global batches of the length-grouping sampler, this worker's rows, per-replica batches.

    The serialized records are held in memory (the split's file size) so the sampler can take them in
    any order; the order is a pure function of (lengths, batch, seed, epoch), and a resumed run skips
    the global batches already trained on, as the shuffled stream does."""
    records = tf.constant(list(tf.data.TFRecordDataset(cached.record_file).as_numpy_iterator()), tf.string)
    batches = batching.group_by_length_batches(record_lengths(cached, records), global_batch_size, seed)
    to_skip = getattr(input_context, "global_batches_to_skip", 0)
    if to_skip:
        batches = batches.skip(to_skip)
    workers, worker = input_context.num_input_pipelines, input_context.input_pipeline_id
    local_rows = per_replica * (input_context.num_replicas_in_sync // workers)
    start = worker * local_rows
    rows = batches.map(lambda indices: tf.gather(records, indices[start:start + local_rows])).unbatch()
    return rows.map(cached.parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).batch(
        per_replica, drop_remainder=True)


def _with_is_real(record: dict, value: int) -> dict:
    if IS_REAL in record:
        return record
    return {**record, IS_REAL: tf.constant(value, tf.int32)}


def eval_dataset(cached: CachedSplit, batch_size: int, lengths: LengthPolicy = PAD_TO_MAX) -> tf.data.Dataset:
    """Batches of ``batch_size`` in file order; padding rows fill the last one."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    dataset = tf.data.TFRecordDataset(cached.record_file).map(
        lambda r: _with_is_real(cached.parse(r), 1), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    pad = -cached.num_records % batch_size
    if pad:
        padding = _with_is_real(cached.padding(), 0)
        dataset = dataset.concatenate(tf.data.Dataset.from_tensors(padding).repeat(pad))
    dataset = dataset.batch(batch_size, drop_remainder=True)
    return lengths.apply(dataset, cached).prefetch(tf.data.AUTOTUNE)
