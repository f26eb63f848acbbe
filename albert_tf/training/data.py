"""TFRecord input pipelines for the training loop: read, shard, shuffle, parse, batch.

Every pipeline here is deterministic given its ``seed`` (no sloppy interleave), so a
run restarted from a checkpoint (which stores the iterator's position, see
``loop.py``) sees exactly the batches the uninterrupted run would have seen.
"""
from __future__ import annotations

from typing import Callable, Sequence

import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE
SHARD_MODES = ("auto", "files", "records")


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
) -> tf.data.Dataset:
    """A dataset of per-replica batches of parsed TFRecords.

    Training (``is_training``): the file list is repeated and shuffled, files are
    read ``cycle_length`` at a time (interleaved), records are shuffled in a buffer
    of ``shuffle_buffer_size`` (the original used 100), parsed and batched.
    Evaluation: files in order, no shuffling; ``repeat`` (default: ``is_training``)
    cycles them, as the original's pretraining eval did.

    Sharding per worker (``input_context.num_input_pipelines > 1``):
    - ``files``: each worker reads its own files (scalable; needs >= one file per worker);
    - ``records``: each worker reads everything in the same seeded order and keeps every
      n-th record, so the global batches are exactly those of a single-worker run;
    - ``auto``: ``files`` when training with at least as many files as workers, else ``records``.

    ``parse_fn`` maps one serialized ``tf.train.Example`` to a dict of tensors.
    """
    if shard_mode not in SHARD_MODES:
        raise ValueError(f"shard_mode={shard_mode!r}: expected one of {', '.join(SHARD_MODES)}")
    if batch_size_per_replica < 1:
        raise ValueError(f"batch_size_per_replica must be >= 1, got {batch_size_per_replica}")
    files = expand_file_patterns(file_patterns)
    repeat = is_training if repeat is None else repeat
    num_pipelines = input_context.num_input_pipelines if input_context else 1
    pipeline_id = input_context.input_pipeline_id if input_context else 0
    if shard_mode == "auto":
        shard_mode = "files" if is_training and len(files) >= num_pipelines else "records"
    if shard_mode == "files" and len(files) < num_pipelines:
        raise ValueError(
            f"shard_mode='files' needs at least one file per worker: {len(files)} file(s) for "
            f"{num_pipelines} workers"
        )

    dataset = tf.data.Dataset.from_tensor_slices(tf.constant(files))
    if num_pipelines > 1 and shard_mode == "files":
        dataset = dataset.shard(num_pipelines, pipeline_id)
        num_files = len(files[pipeline_id::num_pipelines])
    else:
        num_files = len(files)
    if is_training:
        dataset = dataset.repeat()
        dataset = dataset.shuffle(num_files, seed=seed)
    if is_training:
        dataset = dataset.interleave(
            tf.data.TFRecordDataset,
            cycle_length=min(cycle_length, num_files),
            num_parallel_calls=AUTOTUNE,
            deterministic=True,  # never the original's sloppy mode: resume must replay the same order
        )
    else:
        dataset = dataset.flat_map(tf.data.TFRecordDataset)  # files in order
    if is_training:
        dataset = dataset.shuffle(shuffle_buffer_size, seed=seed)
    # After the shuffle: every worker shuffles the same stream the same way, then keeps its share.
    if num_pipelines > 1 and shard_mode == "records":
        dataset = dataset.shard(num_pipelines, pipeline_id)
    if repeat and not is_training:
        dataset = dataset.repeat()
    dataset = dataset.map(parse_fn, num_parallel_calls=AUTOTUNE, deterministic=True)
    dataset = dataset.batch(batch_size_per_replica, drop_remainder=drop_remainder)
    return dataset.prefetch(AUTOTUNE)
