"""Whole-word n-gram masking of one instance (Google's create_masked_lm_predictions), on token ids:
p(n) proportional to 1/n, 80/10/10 replacement, `token_boundary`, the permutation option; and the
vocabulary facts it needs (which pieces start a word).

The candidate order is drawn lazily (same distribution as the original's full shuffle), random ids
use int(random() * vocab_size), and the original's re-shuffle of the candidates after masking (a draw
with no effect when not permuting) is skipped.
"""
from __future__ import annotations

import bisect
import functools
import random
from dataclasses import dataclass
from typing import NamedTuple

from albert_tf.pretraining_data.options import InstanceOptions, InstanceStats
from albert_tf.tokenization.spm import SPIECE_UNDERLINE


# The original's `_is_start_piece_sp` sets: ASCII punctuation (note: no "'") and a-z.
_SPECIAL_PIECES = frozenset('!"#$%&"()*+,-./:;?@[\\]^_`{|}~')
_WORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz") | _SPECIAL_PIECES


def is_start_piece_sp(piece: str) -> bool:
    """Whether a SentencePiece piece starts a word (for whole-word masking and token_boundary).

    True if it starts with '▁' or '<', is a single punctuation mark, or holds any
    character other than a-z (either case) and punctuation, so digit, accented,
    CJK pieces (and "'") stand alone.
    """
    return (
        piece.startswith(SPIECE_UNDERLINE)
        or piece.startswith("<")
        or piece in _SPECIAL_PIECES
        or not all(c.lower() in _WORD_CHARS for c in piece)
    )


def is_start_piece_wordpiece(piece: str) -> bool:
    """WordPiece: every piece but a '##' continuation starts a word."""
    return not piece.startswith("##")


def unknown_continuation_id(vocab_size: int) -> int:
    """The id the tokenized corpus gives an unknown SentencePiece piece whose text continues a word
    (``reading._sentencepiece_ids``): one past the vocabulary, so that ``VocabInfo.is_start`` can say
    0 for it where the unk id's own piece ('<unk>') starts a word. Instances write it out as the
    unk id (``create_masked_lm_predictions``)."""
    return vocab_size


@dataclass(frozen=True)
class VocabInfo:
    """What the algorithm needs to know about the vocabulary."""

    cls_id: int
    sep_id: int
    mask_id: int
    vocab_size: int
    is_start: bytes  # is_start[id] == 1 if the piece with that id starts a word (0 for unknown_continuation_id)
    unk_id: int = -1  # what unknown_continuation_id is written out as

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "VocabInfo":
        inv_vocab = tokenizer.inv_vocab
        rule = is_start_piece_sp if tokenizer.sp_model is not None else is_start_piece_wordpiece
        vocab_size = tokenizer.vocab_size
        is_start = bytes(1 if rule(inv_vocab.get(i, "<unk>")) else 0 for i in range(vocab_size)) + b"\0"
        (cls_id, sep_id, mask_id) = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]", "[MASK]"])
        unk_id = tokenizer.sp_model.unk_id() if tokenizer.sp_model is not None else -1
        return cls(cls_id=cls_id, sep_id=sep_id, mask_id=mask_id, vocab_size=vocab_size, is_start=is_start,
                   unk_id=unk_id)


class Instance(NamedTuple):
    """One training example before padding; `tokens` are ids after masking."""

    tokens: list[int]
    segment_ids: list[int]
    token_boundary: list[int]
    masked_lm_positions: list[int]
    masked_lm_ids: list[int]
    is_random_next: bool


def create_masked_lm_predictions(
    tokens: list[int],
    segment_ids: list[int],
    first_sep: int,
    is_random_next: bool,
    options: InstanceOptions,
    vocab: VocabInfo,
    rng: random.Random,
    stats: InstanceStats,
) -> Instance:
    """Whole-word n-gram masking of `tokens` ([CLS] A [SEP] B [SEP]; first [SEP] at `first_sep`)."""
    is_start = vocab.is_start
    last = len(tokens) - 1
    token_boundary = [is_start[t] for t in tokens]
    token_boundary[0] = token_boundary[first_sep] = token_boundary[last] = 1  # [CLS], [SEP]s

    # Candidate words: lists of positions; a non-start piece joins the previous
    # word (even across the first [SEP], as in the original).
    cand_indexes: list[list[int]] = []
    whole_word = options.do_whole_word_mask
    for i in range(1, last):
        if i == first_sep:
            continue
        if whole_word and cand_indexes and not token_boundary[i]:
            cand_indexes[-1].append(i)
        else:
            cand_indexes.append([i])

    stats.instances += 1
    stats.tokens += len(tokens)
    output_tokens = list(tokens)
    if options.masked_lm_prob == 0:
        return Instance(_written_ids(output_tokens, vocab), segment_ids, token_boundary, [], [], is_random_next)

    num_to_predict = min(options.max_predictions_per_seq, max(1, int(round(len(tokens) * options.masked_lm_prob))))
    cumulative = _ngram_cumulative(options.ngram, options.favor_shorter_ngram)
    # The candidates are visited in a uniformly random order, as the original's
    # full shuffle; drawing that order lazily (Fisher-Yates one step at a time)
    # is the same distribution and cheaper, since the budget runs out early.
    order = list(range(len(cand_indexes)))

    masked: list[tuple[int, int]] = []  # (position, original id)
    covered: set[int] = set()
    _select_ngrams(order, cand_indexes, num_to_predict, cumulative, rng, stats, covered, masked,
                   tokens=tokens, output_tokens=output_tokens, vocab=vocab)

    if options.do_permutation:
        selected: list[tuple[int, int]] = []
        _select_ngrams(list(range(len(cand_indexes))), cand_indexes, num_to_predict, cumulative, rng, stats,
                       covered, selected)
        select_indexes = sorted(index for index, _ in selected)
        permute_indexes = list(select_indexes)
        rng.shuffle(permute_indexes)
        orig_tokens = list(output_tokens)
        for src, tgt in zip(select_indexes, permute_indexes):
            output_tokens[src] = orig_tokens[tgt]
            masked.append((src, orig_tokens[src]))

    masked.sort()
    stats.masked += len(masked)
    return Instance(
        _written_ids(output_tokens, vocab),
        segment_ids,
        token_boundary,
        [index for index, _ in masked],
        _written_ids([label for _, label in masked], vocab),
        is_random_next,
    )


def _written_ids(ids: list[int], vocab: VocabInfo) -> list[int]:
    """``ids`` as the records hold them: ``unknown_continuation_id`` back to the unk id."""
    continuation = vocab.vocab_size
    if continuation not in ids:
        return ids
    return [vocab.unk_id if i == continuation else i for i in ids]


@functools.lru_cache(maxsize=None)
def _ngram_cumulative(ngram: int, favor_shorter_ngram: bool) -> tuple[float, ...]:
    return tuple(InstanceOptions(ngram=ngram, favor_shorter_ngram=favor_shorter_ngram).ngram_cumulative())


def _select_ngrams(
    order, cand_indexes, num_to_predict, cumulative, rng, stats, covered, masked_out, tokens=None,
    output_tokens=None, vocab=None,
) -> None:
    """Picks n-grams of candidate words in random order until `num_to_predict` positions are chosen.

    `order` (a list of candidate numbers) is shuffled lazily in place. With
    `output_tokens`, chosen positions are replaced (80% [MASK], 10% kept, 10%
    random id) and recorded with their original ids; without (the permutation
    pass), positions are only recorded.
    """
    random_ = rng.random
    max_n = len(cumulative)
    ngram_draws = stats.ngram_draws
    num_cands = len(order)
    for k in range(num_cands):
        if len(masked_out) >= num_to_predict:
            break
        j = k + int(random_() * (num_cands - k))  # next element of a Fisher-Yates shuffle
        order[k], order[j] = order[j], order[k]
        idx = order[k]
        n = min(bisect.bisect_right(cumulative, random_()) + 1, max_n)
        ngram_draws[n] = ngram_draws.get(n, 0) + 1
        # Try the drawn n, then shorter ones, to stay within the budget.
        room = num_to_predict - len(masked_out)
        while n >= 1:
            words = cand_indexes[idx : idx + n]
            index_set = words[0] if len(words) == 1 else [index for word in words for index in word]
            if len(index_set) <= room:
                break
            n -= 1
        else:
            continue
        if not covered.isdisjoint(index_set):
            continue
        covered.update(index_set)
        if output_tokens is None:
            masked_out.extend((index, 0) for index in index_set)
            continue
        stats.masked_ngram_words[len(words)] = stats.masked_ngram_words.get(len(words), 0) + 1
        for index in index_set:
            r = random_()
            if r < 0.8:
                output_tokens[index] = vocab.mask_id
                stats.replaced_mask += 1
            elif random_() < 0.5:
                stats.replaced_keep += 1  # keep the original token
            else:
                output_tokens[index] = int(random_() * vocab.vocab_size)
                stats.replaced_random += 1
            masked_out.append((index, tokens[index]))
