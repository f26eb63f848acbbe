"""Online masking for ``run_pretraining.py --masked_lm_budget``: fresh n-gram masks per epoch.

The original declared ``--masked_lm_budget`` ("if > 0, the ratio of masked n-grams to
unmasked n-grams") and switched its reader to ``token_boundary``, but nothing then masked.
Here a budget > 0 means: each example read from the stream is masked anew, inside the
input pipeline, with the very algorithm of ``create_pretraining_data.py`` (whole words
from ``token_boundary``, n-gram lengths p(n) ∝ 1/n, 80% [MASK] / 10% kept / 10% random,
``min(max_predictions_per_seq, max(1, round(len · budget)))`` positions).  The budget is
the masked share of tokens, i.e. ``create_pretraining_data.py``'s ``--masked_lm_prob``
(0.15 gives the offline statistics). The n-gram settings are fixed at that tool's
defaults (``ngram=3``, whole-word masking, ``favor_shorter_ngram``), whatever the
records were made with.

The records' own masks are undone first (``masked_lm_ids`` hold the original ids at
``masked_lm_positions``), so any file from ``create_pretraining_data.py`` works.  Each
example's random draws come from ``(--seed, its index in the record stream)``: the
masks are reproducible, differ between epochs, are the same on every topology (every
worker reads the same stream), and a resumed run draws exactly what the uninterrupted
run would have.
"""
from __future__ import annotations

import random
from collections import Counter
from typing import Iterable

import numpy as np

from albert_tf.pretraining_data.masking import VocabInfo, _ngram_cumulative, _select_ngrams
from albert_tf.pretraining_data.options import InstanceOptions, InstanceStats


def example_rng(seed: int, stream_index: int) -> random.Random:
    """The random source of one example: a function of the run's seed and its stream position."""
    return random.Random(f"albert_tf-online-masking:{seed}:{stream_index}")


def original_tokens(input_ids: np.ndarray, positions: np.ndarray, labels: np.ndarray,
                    weights: np.ndarray) -> np.ndarray:
    """``input_ids`` with the record's masked positions restored to their original ids."""
    tokens = np.array(input_ids, copy=True)
    real = np.asarray(weights) > 0
    tokens[np.asarray(positions)[real]] = np.asarray(labels)[real]
    return tokens


def candidate_words(token_boundary: Iterable[int], first_sep: int, last: int, whole_word: bool) -> list[list[int]]:
    """Positions grouped into words as create_pretraining_data.py does ([CLS]/[SEP] excluded)."""
    boundary = list(token_boundary)
    words: list[list[int]] = []
    for i in range(1, last):
        if i == first_sep:
            continue
        if whole_word and words and not boundary[i]:
            words[-1].append(i)
        else:
            words.append([i])
    return words


def mask_example(
    input_ids: np.ndarray,
    input_mask: np.ndarray,
    segment_ids: np.ndarray,
    token_boundary: np.ndarray,
    masked_lm_positions: np.ndarray,
    masked_lm_ids: np.ndarray,
    masked_lm_weights: np.ndarray,
    rng: random.Random,
    options: InstanceOptions,
    vocab: VocabInfo,
    stats: InstanceStats | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """New (input_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights) for one record."""
    tokens = original_tokens(input_ids, masked_lm_positions, masked_lm_ids, masked_lm_weights)
    length = int(np.sum(input_mask))
    first_sep = int(np.sum((np.asarray(segment_ids)[:length] == 0))) - 1  # [CLS] A [SEP] is segment 0
    last = length - 1
    slots = len(masked_lm_positions)
    out_ids = np.array(tokens, copy=True)
    positions = np.zeros(slots, np.int64)
    labels = np.zeros(slots, np.int64)
    weights = np.zeros(slots, np.float32)
    if length < 3:
        return out_ids, positions, labels, weights
    words = candidate_words(token_boundary, first_sep, last, options.do_whole_word_mask)
    num_to_predict = min(options.max_predictions_per_seq, max(1, int(round(length * options.masked_lm_prob))))
    stats = stats if stats is not None else InstanceStats()
    output_tokens = [int(t) for t in tokens[:length]]
    masked: list[tuple[int, int]] = []
    _select_ngrams(list(range(len(words))), words, num_to_predict,
                   _ngram_cumulative(options.ngram, options.favor_shorter_ngram), rng, stats, set(), masked,
                   tokens=[int(t) for t in tokens[:length]], output_tokens=output_tokens, vocab=vocab)
    masked.sort()
    out_ids[:length] = output_tokens
    for slot, (position, label) in enumerate(masked[:slots]):
        positions[slot], labels[slot], weights[slot] = position, label, 1.0
    return out_ids, positions, labels, weights


def most_common_replacement(records: Iterable[dict]) -> int | None:
    """The [MASK] id of data made by create_pretraining_data.py: the id that replaces the
    original token at masked positions far more often than any other (80% vs random ids);
    None when the records replace no token (made with --masked_lm_prob=0)."""
    counts: Counter = Counter()
    for record in records:
        real = np.asarray(record["masked_lm_weights"]) > 0
        positions = np.asarray(record["masked_lm_positions"])[real]
        shown = np.asarray(record["input_ids"])[positions]
        replaced = shown[shown != np.asarray(record["masked_lm_ids"])[real]]
        counts.update(int(t) for t in replaced)
    return counts.most_common(1)[0][0] if counts else None


def tf_online_masking(seed: int, masked_lm_prob: float, max_predictions_per_seq: int, mask_id: int,
                      vocab_size: int, ngram: int = 3, favor_shorter_ngram: bool = True,
                      do_whole_word_mask: bool = True):
    """``fn(features, stream_index) -> features`` re-masking one parsed pretraining example in tf.data."""
    import tensorflow as tf

    options = InstanceOptions(max_predictions_per_seq=max_predictions_per_seq, masked_lm_prob=masked_lm_prob,
                              ngram=ngram, favor_shorter_ngram=favor_shorter_ngram,
                              do_whole_word_mask=do_whole_word_mask)
    vocab = VocabInfo(cls_id=-1, sep_id=-1, mask_id=mask_id, vocab_size=vocab_size, is_start=b"")

    def remask(index, input_ids, input_mask, segment_ids, token_boundary, positions, labels, weights):
        ids, positions, labels, weights = mask_example(
            input_ids, input_mask, segment_ids, token_boundary, positions, labels, weights,
            example_rng(seed, int(index)), options, vocab)
        return ids.astype(np.int32), positions.astype(np.int32), labels.astype(np.int32), weights

    def fn(features: dict, stream_index) -> dict:
        names = ("input_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights")
        outputs = tf.numpy_function(
            remask, [stream_index, features["input_ids"], features["input_mask"], features["segment_ids"],
                     features["token_boundary"], features["masked_lm_positions"], features["masked_lm_ids"],
                     features["masked_lm_weights"]],
            [tf.int32, tf.int32, tf.int32, tf.float32], stateful=False)
        result = dict(features)
        for name, value in zip(names, outputs):
            result[name] = tf.ensure_shape(value, features[name].shape)
        return result

    return fn
