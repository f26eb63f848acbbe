"""ALBERT's pretraining-instance algorithm (Google's create_pretraining_data.py), on token ids.

Same steps and random draws as the original: target length with
`short_seq_prob`, segments accumulated up to the target, segment A ending at a
random sentence boundary, sentence-order pairs (swap, or a random other
document when the chunk has one segment or with `random_next_sentence`),
truncation from a random end of the longer side, whole-word n-gram masking with
p(n) proportional to 1/n and 80/10/10 replacement, `token_boundary`.

Differences from the original, all deliberate:
- Every draw comes from the `random.Random` passed in (the original drew the
  n-gram length from numpy's unseeded global RNG, so its output could not be
  reproduced).
- "A random other document" is drawn from the documents the caller passes, as
  the original, but before any instance is made: a document's chunking draws
  (target length, A's end, the sentence-order case, which other document and
  where in it, as a share of its sentences) come first (`plan_document`), its
  truncation and masking draws after (`instances_from_plans`), so the other
  documents' fragments can be fetched in between: from disk on demand by the
  local tool (`document_store.CorpusView`), by a join keyed by document on Beam.
  Same distributions as the original's interleaved draws.
- The candidate order is drawn lazily (same distribution as a full shuffle),
  and random ids use int(random() * vocab_size); the original re-shuffled the
  candidates after masking even when not permuting, a draw with no effect
  that is skipped.
"""
from __future__ import annotations

import random
from typing import NamedTuple, Sequence

from albert_tf.pretraining_data.masking import (  # noqa: F401  (VocabInfo, Instance, is_start_piece_sp: re-exported)
    Instance,
    VocabInfo,
    create_masked_lm_predictions,
    is_start_piece_sp,
)
from albert_tf.pretraining_data.options import InstanceOptions, InstanceStats  # noqa: F401  (re-exported)


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_num_tokens: int, rng: random.Random) -> None:
    """Trims the longer list, from a random end, until both fit in `max_num_tokens`.

    One draw per removed token, as the original; the removals are counted first
    and done as two slices (deleting from the front one at a time is quadratic).
    """
    len_a, len_b = len(tokens_a), len(tokens_b)
    front = [0, 0]  # tokens to drop at the front of a, of b
    random_ = rng.random
    while len_a + len_b > max_num_tokens:
        side = 0 if len_a > len_b else 1
        if random_() < 0.5:
            front[side] += 1
        if side == 0:
            len_a -= 1
        else:
            len_b -= 1
    for tokens, drop, keep in ((tokens_a, front[0], len_a), (tokens_b, front[1], len_b)):
        if keep < len(tokens):
            tokens[:] = tokens[drop : drop + keep]


class ChunkPlan(NamedTuple):
    """One instance's segments, decided from the document's sentence lengths alone.

    A is sentences [a_start, a_end) of the document; B is [a_end, b_end) of it (in order, or
    `swapped` before A), or, when `other` >= 0, a fragment of document `other`:
    `other_fragment(other's sentences, other_start, target_b_length)`.
    """

    a_start: int
    a_end: int
    b_end: int
    swapped: bool
    other: int  # -1: B from this document
    other_start: float  # in [0, 1): where B starts in the other document, as a share of its sentences
    target_b_length: int


def plan_document(
    sentence_lengths: Sequence[int],
    document_index: int,
    num_documents: int,
    options: InstanceOptions,
    rng: random.Random,
) -> list[ChunkPlan]:
    """The chunking draws for one document: target length, A's end, the sentence-order case and, for
    a random next sentence, which other document and where in it (before any content of it is read).

    Drawing the other document's place up front (a share of its sentences instead of a sentence
    number) lets a distributed engine fetch the fragment by a join on `other`; the caller then
    continues with the same `rng` in `instances_from_plans`.
    """
    max_num_tokens = options.max_seq_length - 3  # room for [CLS], [SEP], [SEP]
    # Usually fill the sequence; sometimes (short_seq_prob) aim shorter, to
    # lessen the mismatch with short fine-tuning inputs.
    target_seq_length = max_num_tokens
    if rng.random() < options.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    plans = []
    chunk_start = 0  # the current chunk is sentences [chunk_start, i]
    current_length = 0
    i = 0
    n = len(sentence_lengths)
    while i < n:
        current_length += sentence_lengths[i]
        if i == n - 1 or current_length >= target_seq_length:
            chunk_size = i + 1 - chunk_start
            a_end = 1  # number of chunk segments that go into A
            if chunk_size >= 2:
                a_end = rng.randint(1, chunk_size - 1)
            a_length = sum(sentence_lengths[chunk_start : chunk_start + a_end])
            if chunk_size == 1 or (options.random_next_sentence and rng.random() < 0.5):
                # Avoid picking this same document (10 tries, as the original).
                for _ in range(10):
                    other = rng.randint(0, num_documents - 1)
                    if other != document_index:
                        break
                plans.append(ChunkPlan(chunk_start, chunk_start + a_end, chunk_start + a_end, False, other,
                                       rng.random(), target_seq_length - a_length))
                # The unused segments of this chunk are "put back" for the next one.
                i = chunk_start + a_end - 1
            else:
                swapped = not options.random_next_sentence and rng.random() < 0.5
                plans.append(ChunkPlan(chunk_start, chunk_start + a_end, i + 1, swapped, -1, 0.0, 0))
            chunk_start = i + 1
            current_length = 0
        i += 1
    return plans


def other_fragment(other_document: Sequence[Sequence[int]], other_start: float, target_b_length: int) -> list[int]:
    """B from another document: its sentences from `other_start` (a share of them) on, until
    `target_b_length` tokens (the last sentence whole). Reads only the sentences it takes."""
    tokens: list[int] = []
    for j in range(int(other_start * len(other_document)), len(other_document)):
        tokens.extend(other_document[j])
        if len(tokens) >= target_b_length:
            break
    return tokens


def instances_from_plans(
    document: Sequence[Sequence[int]],
    plans: Sequence[ChunkPlan],
    fragments: Sequence[list[int]],
    options: InstanceOptions,
    vocab: VocabInfo,
    rng: random.Random,
    stats: InstanceStats,
) -> list[Instance]:
    """The instances of `plans` (truncation and masking draws from `rng`); `fragments` are the
    other documents' Bs, one per plan with `other >= 0`, in plan order."""
    max_num_tokens = options.max_seq_length - 3
    fragments = iter(fragments)
    instances = []
    for plan in plans:
        tokens_a = [t for seg in document[plan.a_start : plan.a_end] for t in seg]
        if plan.other >= 0:
            stats.sop_random_document += 1
            tokens_b = list(next(fragments))
        elif plan.swapped:
            stats.sop_swapped += 1  # sentence-order swap
            tokens_b = [t for seg in document[plan.a_end : plan.b_end] for t in seg]
            tokens_a, tokens_b = tokens_b, tokens_a
        else:
            stats.sop_in_order += 1
            tokens_b = [t for seg in document[plan.a_end : plan.b_end] for t in seg]
        truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
        assert tokens_a and tokens_b

        tokens = [vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b, vocab.sep_id]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        is_random_next = plan.other >= 0 or plan.swapped
        instances.append(
            create_masked_lm_predictions(
                tokens, segment_ids, len(tokens_a) + 1, is_random_next, options, vocab, rng, stats
            )
        )
    if next(fragments, None) is not None:
        raise ValueError("more fragments than plans that take B from another document")
    return instances


def create_instances_from_document(
    all_documents: Sequence[Sequence[Sequence[int]]],
    document_index: int,
    options: InstanceOptions,
    vocab: VocabInfo,
    rng: random.Random,
    stats: InstanceStats,
) -> list[Instance]:
    """Instances from one document (a list of sentences, each a list of ids): its plan, the other
    documents' fragments read from `all_documents`, then truncation and masking.

    `all_documents` needs only len() and indexing (documents, and their
    sentences, may be read lazily).
    """
    document = all_documents[document_index]
    plans = plan_document([len(s) for s in document], document_index, len(all_documents), options, rng)
    fragments = [other_fragment(all_documents[p.other], p.other_start, p.target_b_length)
                 for p in plans if p.other >= 0]
    return instances_from_plans(document, plans, fragments, options, vocab, rng, stats)
