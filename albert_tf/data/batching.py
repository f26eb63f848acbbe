"""Batches at their own length: trim padding after ``.batch()``, static buckets, length grouping.

The record files pad every row to ``--max_seq_length`` (the original's format, kept).  These
transformations run on the batched dataset and cut the columns no row of the batch uses, so
the model computes no padding.  The numbers do not change: padded positions are masked out
of attention (weight exp(-10000) = 0 in float32) and dropout masks are keyed by coordinates,
not by the padded shape (``albert_tf.modeling.dropout``), so a batch trimmed to its longest
row gives the padded batch's loss and gradients (``tests/glue/test_padding_invariance.py``) for
every head that leaves padding positions out; a head that scores them (SQuAD 1.1's) is not
trimmed (``FineTuningTask.padding_invariant``).

- ``trim_to_longest``: the longest row's length rounded up to ``multiple`` (CPU/GPU; a
  rounding can keep the set of shapes small or the matmul dimensions aligned; on CPU it
  buys nothing, see ``DEFAULT_MULTIPLE``).
- ``trim_to_bucket``: the smallest of a few static lengths (``bucket_lengths``) that holds the
  longest row: for TPUs and XLA, where every new shape is a new compilation.
- ``group_by_length_order`` / ``group_by_length_batches``: a seeded sampler that puts rows of
  similar length in the same global batch (HF's ``group_by_length``).  It changes which rows
  train together (batch composition), not what a row computes.  Every row trains in every epoch
  (the left-over rows fill a last batch that overlaps the one before it).  The order is a pure function of
  (lengths, global batch size, seed, epoch) in TensorFlow ops: a resumed run (which skips the
  global batches already trained on) sees the same batches, and 1 device and N replicas see
  the same global batches.

Data floor: nothing here imports ``albert_tf.training`` or the model.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import tensorflow as tf

SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
# Measured: ALBERT-base forward+backward, batch 32, bf16 on a 2-core AMX Xeon (oneDNN), lengths
# 40..48: the step time grows about linearly, ~1.2% per position (40: 1.61 s, 44: 1.77 s, 48: 1.76-1.88 s),
# with no saving at multiples of 8; a new length's first step costs no more than its second.  So on CPU
# every padded position is lost work: round to 1.  (GPU tensor cores prefer multiples of 8: not measured.)
DEFAULT_MULTIPLE = 1
SMALLEST_BUCKET = 32
MEGABATCH_BATCHES = 50  # the most global batches a length-sorted megabatch holds (``batches_per_megabatch``)


def example_lengths(input_mask: np.ndarray | tf.Tensor) -> np.ndarray:
    """Each example's length: one past its last real position (``input_mask`` [N, ..., S]; a
    multiple-choice example [N, choices, S] takes its longest choice)."""
    mask = np.asarray(input_mask) != 0
    positions = np.arange(1, mask.shape[-1] + 1)
    lengths = np.max(np.where(mask, positions, 0), axis=-1)
    return lengths.reshape(mask.shape[0], -1).max(axis=1).astype(np.int64)


def longest_row(input_mask: tf.Tensor) -> tf.Tensor:
    """int32 scalar: one past the last real position of any row of the batch (at least 1)."""
    mask = tf.cast(tf.not_equal(input_mask, 0), tf.int32)
    positions = tf.range(1, tf.shape(mask)[-1] + 1, dtype=tf.int32)
    return tf.maximum(tf.reduce_max(mask * positions), 1)


def _check_multiple(multiple: int) -> None:
    if int(multiple) < 1:
        raise ValueError(f"the sequence length multiple must be >= 1, got {multiple}")


def _trim(batch: Mapping[str, tf.Tensor], seq_features: Sequence[str], length: tf.Tensor) -> dict:
    missing = [name for name in seq_features if name not in batch]
    if missing or "input_mask" not in batch:
        raise KeyError(f"batch has no feature {(missing or ['input_mask'])[0]!r}; it has {sorted(batch)}")
    return {name: (value[..., :length] if name in seq_features else value) for name, value in batch.items()}


def trim_to_longest(batch: Mapping[str, tf.Tensor], seq_features: Sequence[str] = SEQUENCE_FEATURES,
                    multiple: int = DEFAULT_MULTIPLE) -> dict:
    """``batch`` with every feature in ``seq_features`` cut (on its last axis) to the longest row's
    length rounded up to ``multiple``, capped at the batch's padded length (max_seq_length)."""
    _check_multiple(multiple)
    padded = tf.shape(batch["input_mask"])[-1]
    length = tf.minimum((longest_row(batch["input_mask"]) + multiple - 1) // multiple * multiple, padded)
    length = tf.maximum(length, tf.minimum(padded, 1))  # an empty batch keeps a [CLS] column for the pooler
    return _trim(batch, seq_features, length)


def bucket_lengths(max_seq_length: int, smallest: int = SMALLEST_BUCKET) -> tuple[int, ...]:
    """The static lengths a batch may take under TPU/XLA: ``smallest`` doubled until
    ``max_seq_length``, which is always the last (128 -> (32, 64, 128); 384 -> (32, ..., 256, 384))."""
    if max_seq_length < 1 or smallest < 1:
        raise ValueError(f"max_seq_length and the smallest bucket must be >= 1, got {max_seq_length}, {smallest}")
    lengths, length = [], smallest
    while length < max_seq_length:
        lengths.append(length)
        length *= 2
    return tuple(lengths + [max_seq_length])


def parse_bucket_lengths(text: str, max_seq_length: int) -> tuple[int, ...]:
    """``--seq_length_buckets`` ("32,64,128"; empty: ``bucket_lengths(max_seq_length)``), checked:
    increasing positive integers, the last equal to ``max_seq_length``."""
    if not text.strip():
        return bucket_lengths(max_seq_length)
    try:
        lengths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--seq_length_buckets={text!r}: expected comma-separated integers") from None
    if any(b <= a for a, b in zip(lengths, lengths[1:])) or lengths[0] < 1 or lengths[-1] != max_seq_length:
        raise ValueError(f"--seq_length_buckets={text!r}: expected increasing lengths ending at "
                         f"--max_seq_length={max_seq_length}")
    return lengths


def trim_to_bucket(batch: Mapping[str, tf.Tensor], buckets: Sequence[int],
                   seq_features: Sequence[str] = SEQUENCE_FEATURES) -> dict:
    """``batch`` cut to the smallest of ``buckets`` (increasing, the last the padded length)
    that holds its longest row: one of ``len(buckets)`` shapes, whatever the data."""
    bounds = tf.constant(sorted(int(b) for b in buckets), tf.int32)
    longest = longest_row(batch["input_mask"])
    index = tf.minimum(tf.reduce_sum(tf.cast(bounds < longest, tf.int32)), tf.size(bounds) - 1)
    length = tf.minimum(bounds[index], tf.shape(batch["input_mask"])[-1])
    return _trim(batch, seq_features, length)


def batches_per_megabatch(num_examples: int, global_batch_size: int) -> int:
    """How many global batches a length-sorted megabatch holds: ``min(n // (4 × batch), 50)``, at least 1
    (the rule of Hugging Face's length-grouped sampler): 50 on large splits, and at least about 4 megabatches on
    small ones, so the sort does not undo the shuffle of a split of a few batches."""
    return max(1, min(int(num_examples) // (4 * int(global_batch_size)), MEGABATCH_BATCHES))


def group_by_length_order(lengths: np.ndarray | tf.Tensor, global_batch_size: int, seed: int,
                          epoch: int | tf.Tensor, megabatch_batches: int | None = None) -> tf.Tensor:
    """int64 [ceil(N / global_batch_size) × global_batch_size]: the example indices of one epoch's
    global batches, in order; every row is in it at least once.

    Shuffle all rows with (seed, epoch); cut ``megabatch_batches × global_batch_size`` rows at a
    time (default: ``batches_per_megabatch(N, global_batch_size)``) and sort each cut by length
    (longest first, ties in shuffled order); cut into global batches. When N is not a multiple of
    the batch, the last batch is the last ``global_batch_size`` rows of that order: it holds the
    left-over rows and overlaps the batch before it, whose shortest rows train twice this epoch
    (a static batch shape keeps every row only so). Then the batches are shuffled with (seed,
    epoch). A pure function of its arguments; needs N >= global_batch_size.
    """
    lengths = tf.cast(tf.convert_to_tensor(lengths), tf.int64)
    if megabatch_batches is None:
        if lengths.shape[0] is None:
            raise ValueError("lengths of unknown size: pass megabatch_batches")
        megabatch_batches = batches_per_megabatch(lengths.shape[0], global_batch_size)
    if global_batch_size < 1 or megabatch_batches < 1:
        raise ValueError(f"global_batch_size and megabatch_batches must be >= 1, got "
                         f"{global_batch_size}, {megabatch_batches}")
    n = tf.size(lengths, out_type=tf.int64)
    tf.debugging.assert_greater_equal(n, tf.constant(global_batch_size, tf.int64),
                                      message=f"fewer examples than one global batch of {global_batch_size}")
    epoch_seed = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])
    shuffled = tf.random.experimental.stateless_shuffle(
        tf.range(n), tf.random.experimental.stateless_fold_in(epoch_seed, 0))
    # One stable sort on (megabatch, longest first) keeps the shuffled order within ties.
    longest = tf.reduce_max(tf.concat([lengths, [0]], 0))
    megabatch = tf.range(n) // (megabatch_batches * global_batch_size)
    key = megabatch * (longest + 1) + (longest - tf.gather(lengths, shuffled))
    grouped = tf.gather(shuffled, tf.argsort(key, stable=True))
    full = n // global_batch_size * global_batch_size
    last = grouped[n - global_batch_size:][:global_batch_size * tf.cast(full < n, tf.int64)]
    batches = tf.reshape(tf.concat([grouped[:full], last], 0), [-1, global_batch_size])
    batches = tf.random.experimental.stateless_shuffle(
        batches, tf.random.experimental.stateless_fold_in(epoch_seed, 1))
    return tf.reshape(batches, [-1])


def group_by_length_batches(lengths: np.ndarray, global_batch_size: int, seed: int, start_epoch: int = 0,
                            num_epochs: int | None = None, megabatch_batches: int | None = None) -> tf.data.Dataset:
    """A dataset of int64 [global_batch_size] vectors of example indices: the global batches of
    epochs ``start_epoch, start_epoch + 1, ...`` (forever unless ``num_epochs``), each epoch in
    ``group_by_length_order`` (every row in every epoch). Map each vector to the cached split's rows
    (e.g. ``tf.gather``), then keep this replica's rows; to resume mid-epoch, ``.skip()`` the global
    batches done."""
    lengths = tf.constant(np.asarray(lengths, np.int64))
    n = int(lengths.shape[0])
    if n < global_batch_size:
        raise ValueError(f"{n} examples make no full global batch of {global_batch_size}")
    if megabatch_batches is None:
        megabatch_batches = batches_per_megabatch(n, global_batch_size)
    epochs = tf.data.Dataset.range(start_epoch, start_epoch + num_epochs if num_epochs is not None else 2 ** 62)

    def epoch_batches(epoch):
        order = group_by_length_order(lengths, global_batch_size, seed, epoch, megabatch_batches)
        return tf.data.Dataset.from_tensor_slices(tf.reshape(order, [-1, global_batch_size]))

    return epochs.flat_map(epoch_batches)


def embedding_id_limits(config) -> dict[str, tuple[str, int]]:
    """``check_max_length``'s ``id_limits`` for a model of ``config`` (an ``AlbertConfig``): the sizes of
    the tables ``input_ids`` and ``segment_ids`` index."""
    return {"input_ids": ("vocab_size", config.vocab_size),
            "segment_ids": ("type_vocab_size", config.type_vocab_size)}


def check_max_length(inputs: Mapping[str, tf.Tensor], max_seq_length: int, limit: str = "max_seq_length",
                     id_limits: Mapping[str, tuple[str, int]] | None = None) -> dict:
    """``inputs`` (as int32), failing at run time with a clear message when their length (last
    axis) exceeds ``max_seq_length``: what exported models accept is any length up to it.
    ``limit`` names that length in the message. ``id_limits``, ``{input: (config field, size)}``
    (``{"input_ids": ("vocab_size", 30000)}``): also when such an input holds an id outside [0, size)
    (the embedding's gather named neither the input nor the size; on a GPU it gives zeros silently)."""
    first = next(iter(inputs.values()))
    checks = [tf.debugging.assert_less_equal(
        tf.shape(first)[-1], max_seq_length,
        message=f"input length exceeds this model's {limit} ({max_seq_length}); shorten the inputs")]
    for name, (field, size) in (id_limits or {}).items():
        ids = tf.cast(inputs[name], tf.int32)
        lowest, highest = tf.reduce_min(ids), tf.reduce_max(ids)  # empty: passes
        hint = "ids made with another tokenizer?" if name == "input_ids" else f"they run from 0 to {size - 1}."
        # No apostrophe in an Assert's data: TensorFlow prints it escaped (model\'s).
        checks.append(tf.debugging.Assert(
            tf.logical_and(lowest >= 0, highest < size),
            [f"{name} holds an id outside [0, {size}) ({field} {size} of the ALBERT config); {hint} The id:",
             tf.where(lowest < 0, lowest, highest)]))
    with tf.control_dependencies(checks):
        return {name: tf.identity(tf.cast(value, tf.int32)) for name, value in inputs.items()}
