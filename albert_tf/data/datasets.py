"""tf.data pipelines over a cached split (``feature_cache.CachedSplit``), built from its schema.

Every fine-tuning task reads its records through these two functions, so parsing,
padding rows and batching are written once:

- ``train_dataset_fn``: the training loop's ``fn(input_context)``: repeated, shuffled
  (seeded) per-replica batches of the one topology-independent global stream
  (``input_pipeline.make_tfrecord_dataset``), so a resumed run and any replica or worker
  count see the same global batches.
- ``eval_dataset``: batches in file order, every record exactly once; the last batch is
  filled with all-zero rows (the schema's padding, ``is_real_example`` 0) so every batch
  has the same size and no record is dropped. Records of a schema without
  ``is_real_example`` (SQuAD's) get it as 1.
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from albert_tf.data.feature_cache import CachedSplit
from albert_tf.data.input_pipeline import make_tfrecord_dataset

IS_REAL = "is_real_example"


def train_dataset_fn(cached: CachedSplit, global_batch_size: int, seed: int,
                     shuffle_buffer: int = 10000) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """``fn(input_context)`` for the Trainer. The shuffle buffer covers up to ``shuffle_buffer``
    records (GLUE: the whole file for most tasks; SQuAD: the original's 100)."""

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_tfrecord_dataset(
            cached.record_file, cached.parse, input_context.get_per_replica_batch_size(global_batch_size),
            is_training=True, input_context=input_context, seed=seed,
            shuffle_buffer_size=max(1, min(shuffle_buffer, cached.num_records)), shard_mode="records")

    return dataset_fn


def _with_is_real(record: dict, value: int) -> dict:
    if IS_REAL in record:
        return record
    return {**record, IS_REAL: tf.constant(value, tf.int32)}


def eval_dataset(cached: CachedSplit, batch_size: int) -> tf.data.Dataset:
    """Batches of ``batch_size`` in file order; padding rows fill the last one."""
    if batch_size < 1:
        raise ValueError(f"batch size must be >= 1, got {batch_size}")
    dataset = tf.data.TFRecordDataset(cached.record_file).map(
        lambda r: _with_is_real(cached.parse(r), 1), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    pad = -cached.num_records % batch_size
    if pad:
        padding = _with_is_real(cached.padding(), 0)
        dataset = dataset.concatenate(tf.data.Dataset.from_tensors(padding).repeat(pad))
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
