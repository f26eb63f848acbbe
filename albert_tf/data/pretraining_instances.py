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
  the original; the pipeline passes the whole corpus as a sequence that reads
  documents from disk on demand (`document_store.CorpusView`).
- The candidate order is drawn lazily (same distribution as a full shuffle),
  and random ids use int(random() * vocab_size); the original re-shuffled the
  candidates after masking even when not permuting, a draw with no effect
  that is skipped.
"""
from __future__ import annotations

import bisect
import functools
import random
from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

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


@dataclass(frozen=True)
class InstanceOptions:
    """The algorithm's knobs (flags of create_pretraining_data.py)."""

    max_seq_length: int = 512
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True
    do_permutation: bool = False
    random_next_sentence: bool = False

    @property
    def num_masked_slots(self) -> int:
        """Length of the masked_lm_* features (doubled by --do_permutation, as the original)."""
        return self.max_predictions_per_seq * (2 if self.do_permutation else 1)

    def ngram_cumulative(self) -> list[float]:
        """Cumulative p(n) for n = 1..ngram: 1/n normalized, reversed unless favor_shorter_ngram."""
        weights = [1.0 / n for n in range(1, self.ngram + 1)]
        if not self.favor_shorter_ngram:
            weights = weights[::-1]
        total = sum(weights)
        cumulative, running = [], 0.0
        for w in weights:
            running += w / total
            cumulative.append(running)
        cumulative[-1] = 1.0
        return cumulative


@dataclass(frozen=True)
class VocabInfo:
    """What the algorithm needs to know about the vocabulary."""

    cls_id: int
    sep_id: int
    mask_id: int
    vocab_size: int
    is_start: bytes  # is_start[id] == 1 if the piece with that id starts a word

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "VocabInfo":
        inv_vocab = tokenizer.inv_vocab
        rule = is_start_piece_sp if tokenizer.sp_model is not None else is_start_piece_wordpiece
        vocab_size = tokenizer.vocab_size
        is_start = bytes(1 if rule(inv_vocab.get(i, "<unk>")) else 0 for i in range(vocab_size))
        (cls_id, sep_id, mask_id) = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]", "[MASK]"])
        return cls(cls_id=cls_id, sep_id=sep_id, mask_id=mask_id, vocab_size=vocab_size, is_start=is_start)


class Instance(NamedTuple):
    """One training example before padding; `tokens` are ids after masking."""

    tokens: list[int]
    segment_ids: list[int]
    token_boundary: list[int]
    masked_lm_positions: list[int]
    masked_lm_ids: list[int]
    is_random_next: bool


@dataclass
class InstanceStats:
    """Counters behind the JSON summary; `merge` adds another's counts."""

    instances: int = 0
    tokens: int = 0
    masked: int = 0
    ngram_draws: dict = field(default_factory=dict)  # drawn n -> count
    masked_ngram_words: dict = field(default_factory=dict)  # words in each masked n-gram -> count
    replaced_mask: int = 0
    replaced_keep: int = 0
    replaced_random: int = 0
    sop_in_order: int = 0
    sop_swapped: int = 0
    sop_random_document: int = 0

    def merge(self, other: "InstanceStats") -> None:
        for name, value in vars(other).items():
            if isinstance(value, dict):
                mine = getattr(self, name)
                for key, count in value.items():
                    mine[key] = mine.get(key, 0) + count
            else:
                setattr(self, name, getattr(self, name) + value)


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


def create_instances_from_document(
    all_documents: Sequence[Sequence[list[int]]],
    document_index: int,
    options: InstanceOptions,
    vocab: VocabInfo,
    rng: random.Random,
    stats: InstanceStats,
) -> list[Instance]:
    """Instances from one document (a list of sentences, each a list of ids).

    `all_documents` needs only len() and indexing (documents, and their
    sentences, may be read lazily).
    """
    document = all_documents[document_index]
    max_num_tokens = options.max_seq_length - 3  # room for [CLS], [SEP], [SEP]
    # Usually fill the sequence; sometimes (short_seq_prob) aim shorter, to
    # lessen the mismatch with short fine-tuning inputs.
    target_seq_length = max_num_tokens
    if rng.random() < options.short_seq_prob:
        target_seq_length = rng.randint(2, max_num_tokens)

    instances = []
    current_chunk: list[list[int]] = []
    current_length = 0
    i = 0
    while i < len(document):
        segment = document[i]
        current_chunk.append(segment)
        current_length += len(segment)
        if i == len(document) - 1 or current_length >= target_seq_length:
            if current_chunk:
                a_end = 1  # number of chunk segments that go into A
                if len(current_chunk) >= 2:
                    a_end = rng.randint(1, len(current_chunk) - 1)
                tokens_a = [t for seg in current_chunk[:a_end] for t in seg]
                tokens_b: list[int] = []
                if len(current_chunk) == 1 or (options.random_next_sentence and rng.random() < 0.5):
                    is_random_next = True
                    stats.sop_random_document += 1
                    target_b_length = target_seq_length - len(tokens_a)
                    # Avoid picking this same document (10 tries, as the original).
                    for _ in range(10):
                        random_document_index = rng.randint(0, len(all_documents) - 1)
                        if random_document_index != document_index:
                            break
                    random_document = all_documents[random_document_index]
                    random_start = rng.randint(0, len(random_document) - 1)
                    for j in range(random_start, len(random_document)):
                        tokens_b.extend(random_document[j])
                        if len(tokens_b) >= target_b_length:
                            break
                    # The unused segments of this chunk are "put back" for the next one.
                    i -= len(current_chunk) - a_end
                elif not options.random_next_sentence and rng.random() < 0.5:
                    is_random_next = True  # sentence-order swap
                    stats.sop_swapped += 1
                    tokens_b = [t for seg in current_chunk[a_end:] for t in seg]
                    tokens_a, tokens_b = tokens_b, tokens_a
                else:
                    is_random_next = False
                    stats.sop_in_order += 1
                    tokens_b = [t for seg in current_chunk[a_end:] for t in seg]
                truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)
                assert tokens_a and tokens_b

                tokens = [vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b, vocab.sep_id]
                segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
                instances.append(
                    create_masked_lm_predictions(
                        tokens, segment_ids, len(tokens_a) + 1, is_random_next, options, vocab, rng, stats
                    )
                )
            current_chunk = []
            current_length = 0
        i += 1
    return instances


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
        return Instance(output_tokens, segment_ids, token_boundary, [], [], is_random_next)

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
        output_tokens,
        segment_ids,
        token_boundary,
        [index for index, _ in masked],
        [label for _, label in masked],
        is_random_next,
    )


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
