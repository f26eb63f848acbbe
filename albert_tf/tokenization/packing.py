"""Packing token ids into ALBERT's model inputs in TensorFlow ops (for exported
models that take raw text): `[CLS] A [SEP] (B [SEP])`, truncated and padded exactly
as the Python feature code (GLUE's `convert_example`) does."""
from __future__ import annotations

import tensorflow as tf


def pack_token_ids(
    ids_a: tf.RaggedTensor,
    ids_b: tf.RaggedTensor | None,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
    pad_to_longest: bool = False,
) -> dict[str, tf.Tensor]:
    """`[CLS] A [SEP] (B [SEP])` from ragged token ids, truncated and padded like
    `features.convert_example` (a row whose B has no tokens, or none left after truncation, is packed as
    single);
    ``pad_to_longest``: padded to the batch's longest row instead of ``max_seq_length``."""
    la = ids_a.row_lengths()
    if ids_b is None:
        ids_b = tf.RaggedTensor.from_row_lengths(tf.zeros([0], ids_a.dtype), tf.zeros_like(la))
    lb = ids_b.row_lengths()
    has_b = lb > 0
    # Closed form of _truncate_seq_pair (trim the longer, ties trim B) on a budget of
    # L-3 tokens: the shorter side is kept whole unless both exceed half the budget,
    # in which case A keeps ceil(budget/2) and B the rest.
    pair_budget = tf.constant(max_seq_length - 3, tf.int64)
    keep_a_pair = tf.minimum(la, tf.maximum(pair_budget - lb, (pair_budget + 1) // 2))
    keep_a = tf.where(has_b, keep_a_pair, tf.minimum(la, max_seq_length - 2))
    keep_b = tf.where(has_b, tf.minimum(lb, pair_budget - keep_a), 0)
    packs_b = keep_b > 0  # a B cut to nothing (max_seq_length 3 or 4) is packed as single, as convert_example does

    def head(ids, keep):
        positions = tf.ragged.range(ids.row_lengths())
        return tf.ragged.boolean_mask(ids, positions < tf.expand_dims(keep, 1))

    def fill(value, lengths, dtype):
        lengths = tf.cast(lengths, tf.int64)
        return tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(lengths)], tf.cast(value, dtype)), lengths)

    batch = tf.shape(la, out_type=tf.int64)[0]
    ones = tf.ones([batch], tf.int64)
    a, b = head(ids_a, keep_a), head(ids_b, keep_b)
    dtype = ids_a.dtype
    ids = tf.concat([fill(cls_id, ones, dtype), a, fill(sep_id, ones, dtype),
                     b, fill(sep_id, tf.cast(packs_b, tf.int64), dtype)], axis=1)
    len_first = keep_a + 2
    len_second = keep_b + tf.cast(packs_b, tf.int64)
    segments = tf.concat([fill(0, len_first, tf.int32), fill(1, len_second, tf.int32)], axis=1)
    width = max_seq_length
    if pad_to_longest:  # at least 1: an empty request still has a [CLS] column for the pooler to read
        width = tf.cast(tf.reduce_max(tf.concat([len_first + len_second, [1]], axis=0)), tf.int32)
    shape = tf.stack([tf.cast(batch, tf.int32), width]) if pad_to_longest else [None, max_seq_length]
    return {
        "input_ids": tf.cast(ids, tf.int32).to_tensor(0, shape=shape),
        "input_mask": tf.ones_like(segments).to_tensor(0, shape=shape),
        "segment_ids": segments.to_tensor(0, shape=shape),
    }
