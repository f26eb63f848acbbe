"""SQuAD examples -> model features, as ALBERT's ``squad_utils.convert_examples_to_features``.

Steps for one example:

1. Question ids: ``encode_ids(preprocess_text(question))`` cut to ``max_query_length``.
2. Context pieces: ``encode_pieces(preprocess_text(context))``.
3. Alignment of the ORIGINAL context characters to the characters of the
   concatenated pieces (``▁`` read as a space), by the original's banded
   longest-common-subsequence: band ``|n - m| + 5`` around the diagonal, doubled
   once if fewer than 80% of the original characters matched; a character
   matches when its own ``preprocess_text`` (without space removal) equals the
   piece character. Unmatched positions are filled from the nearest matched
   neighbours as the original's ``_convert_index`` does.
   Where the original gives up ("MISMATCH DETECTED", and the question is lost,
   even at prediction) we align with a difflib match of the normalised context
   against the pieces, and, if nothing at all matches, proportionally; the
   number of contexts that needed this is reported in ``ConversionStats``.
4. Windows of ``max_seq_length - len(query) - 3`` pieces every ``doc_stride``
   pieces: ``[CLS] query [SEP] window [SEP]`` + padding; segment ids 0 for
   ``[CLS] query [SEP]``, 1 for the window and its ``[SEP]``; ``p_mask`` 1 on
   the query, both separators and padding (0 on ``[CLS]`` and the window).
   A piece's max-context window maximises ``min(left, right) + 0.01 * length``.
5. Training labels: piece span of the answer in the window; a window without the
   whole answer, or an impossible question, gets start = end = 0 (the
   ``[CLS]`` position) and ``is_impossible = 1``.

Alignment depends only on the context, so it is computed once per paragraph.
"""
from __future__ import annotations

import dataclasses
import difflib
import logging
import random
from typing import Callable, Iterable, Iterator, Sequence

from albert_tf import tokenization
from albert_tf.squad.data import SquadExample

SPIECE_UNDERLINE = tokenization.SPIECE_UNDERLINE
FIRST_UNIQUE_ID = 1000000000  # the original's numbering of features
TRAIN_SHUFFLE_SEED = 12345    # the original pre-shuffles training examples with this seed

log = logging.getLogger(__name__)


@dataclasses.dataclass
class SquadFeature:
    """One window of one example.

    ``tok_start_to_orig_index[k]`` / ``tok_end_to_orig_index[k]`` are the first /
    last original context characters of the k-th window piece, which sits at
    sequence position ``doc_offset + k``; ``token_is_max_context[k]`` says
    whether this window is that piece's max-context window.
    """

    unique_id: int
    example_index: int
    doc_span_index: int
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    p_mask: list[int]
    doc_offset: int
    tok_start_to_orig_index: list[int]
    tok_end_to_orig_index: list[int]
    token_is_max_context: list[bool]
    start_position: int = 0
    end_position: int = 0
    is_impossible: bool = False


@dataclasses.dataclass
class ConversionStats:
    examples: int = 0
    features: int = 0
    positive: int = 0          # training windows holding the answer
    negative: int = 0          # training windows without it (or impossible)
    paragraphs: int = 0
    fallback_alignments: int = 0  # paragraphs the original would have dropped
    fallback_examples: int = 0    # questions on those paragraphs


def check_lengths(max_seq_length: int, max_query_length: int, doc_stride: int) -> None:
    """The original's flag checks, as ValueError naming the flags."""
    if max_seq_length <= max_query_length + 3:
        raise ValueError(
            f"max_seq_length ({max_seq_length}) must be greater than max_query_length "
            f"({max_query_length}) + 3: a window needs room for [CLS], [SEP], [SEP] and "
            f"at least one context piece")
    if doc_stride < 1:
        raise ValueError(f"doc_stride must be >= 1, got {doc_stride}")


# --- alignment ----------------------------------------------------------------

@dataclasses.dataclass
class ContextAlignment:
    """Pieces of a context and their mapping back to its characters."""

    pieces: list[str]
    piece_ids: list[int]
    tok_start_to_orig_index: list[int]
    tok_end_to_orig_index: list[int]
    chartok_to_tok_index: list[int]
    orig_to_chartok_index: list[int | None]
    used_fallback: bool


def _char_normalizer(lower: bool) -> Callable[[str], str]:
    cache: dict[str, str] = {}

    def norm(ch: str) -> str:
        out = cache.get(ch)
        if out is None:
            out = cache[ch] = tokenization.preprocess_text(ch, remove_space=False, lower=lower)
        return out
    return norm


def _banded_lcs(orig: str, tok_text: str, max_dist: int, norm: Callable[[str], str]
                ) -> tuple[float, list[int | None], list[int | None]]:
    """LCS restricted to |i - j| < max_dist (the original's band, including its
    asymmetric ``range(i - max_dist, i + max_dist)``).

    Returns (matched count at the last cell, orig->tok, tok->orig maps).
    Row storage is banded: cell (i, j) lives at column ``j - i + max_dist``.
    """
    n, m = len(orig), len(tok_text)
    width = 2 * max_dist + 1
    unset = 255
    moves: list[bytearray] = []  # per row: 0 up, 1 left, 2 diagonal, 255 unset
    prev = [0] * (width + 1)     # f of row i-1 (zeros outside the band)
    for i in range(n):
        ch = norm(orig[i])
        cur = [0] * (width + 1)
        move = bytearray([unset]) * width
        up_move = 0 if i > 0 else unset
        for j in range(max(0, i - max_dist), min(m, i + max_dist)):
            k = j - i + max_dist
            value, step = prev[k + 1], up_move        # f[i-1, j]
            if j > 0 and k > 0 and cur[k - 1] > value:  # f[i, j-1]
                value, step = cur[k - 1], 1
            if ch == tok_text[j]:
                diag = prev[k] if j > 0 else 0          # f[i-1, j-1]
                if diag + 1 > value:
                    value, step = diag + 1, 2
            cur[k] = value
            move[k] = step
        moves.append(move)
        prev = cur
    orig_to_tok: list[int | None] = [None] * n
    tok_to_orig: list[int | None] = [None] * m
    i, j = n - 1, m - 1
    while i >= 0 and j >= 0:
        k = j - i + max_dist
        step = moves[i][k] if 0 <= k < width else unset
        if step == 2:
            orig_to_tok[i], tok_to_orig[j] = j, i
            i, j = i - 1, j - 1
        elif step == 1:
            j -= 1
        elif step == 0:
            i -= 1
        else:
            break
    last_k = (m - 1) - (n - 1) + max_dist
    score = float(prev[last_k]) if n and m and 0 <= last_k < width else 0.0
    return score, orig_to_tok, tok_to_orig



def _fallback_match(orig: str, tok_text: str, norm: Callable[[str], str]
                    ) -> tuple[list[int | None], list[int | None]]:
    """Alignment for contexts the banded LCS cannot align: difflib matching blocks
    of the per-character normalised context against the piece text, and a
    proportional map when even that finds nothing."""
    n, m = len(orig), len(tok_text)
    normed, owner = [], []
    for i, ch in enumerate(orig):
        for c in norm(ch):
            normed.append(c)
            owner.append(i)
    orig_to_tok: list[int | None] = [None] * n
    tok_to_orig: list[int | None] = [None] * m
    matcher = difflib.SequenceMatcher(None, "".join(normed), tok_text, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        for d in range(size):
            i, j = owner[a + d], b + d
            if orig_to_tok[i] is None:
                orig_to_tok[i] = j
            if tok_to_orig[j] is None:
                tok_to_orig[j] = i
    if all(v is None for v in tok_to_orig):
        for j in range(m):
            tok_to_orig[j] = min(n - 1, j * n // m)
        for i in range(n):
            orig_to_tok[i] = min(m - 1, i * m // n)
    return orig_to_tok, tok_to_orig


def _convert_index(index: Sequence[int | None], pos: int, limit: int | None = None,
                   is_start: bool = True) -> int:
    """Fills an unmatched position from its matched neighbours (original semantics):
    a start moves just after the previous match, an end just before the next."""
    if index[pos] is not None:
        return index[pos]
    n = len(index)
    rear = pos
    while rear < n - 1 and index[rear] is None:
        rear += 1
    front = pos
    while front > 0 and index[front] is None:
        front -= 1
    if index[front] is None:  # nothing matched before pos
        if index[rear] >= 1:
            return 0 if is_start else index[rear] - 1
        return index[rear]
    if index[rear] is None:  # nothing matched after pos
        if limit is not None and index[front] < limit - 1:
            return index[front] + 1 if is_start else limit - 1
        return index[front]
    if index[rear] > index[front] + 1:
        return index[front] + 1 if is_start else index[rear] - 1
    return index[rear] if is_start else index[front]


def align_context(sp_model, context: str, do_lower_case: bool) -> ContextAlignment:
    """Pieces of ``context`` and their original-character spans (see module doc)."""
    pieces = tokenization.encode_pieces(
        sp_model, tokenization.preprocess_text(context, lower=do_lower_case))
    chartok_to_tok_index, tok_start_chartok, tok_end_chartok = [], [], []
    count = 0
    for t, piece in enumerate(pieces):
        chartok_to_tok_index.extend([t] * len(piece))
        tok_start_chartok.append(count)
        count += len(piece)
        tok_end_chartok.append(count - 1)
    tok_text = "".join(pieces).replace(SPIECE_UNDERLINE, " ")
    n, m = len(context), len(tok_text)
    if m == 0:
        raise ValueError("context has no pieces (it is empty or only whitespace)")
    norm = _char_normalizer(do_lower_case)
    max_dist = abs(n - m) + 5
    for _ in range(2):
        score, orig_to_tok, tok_to_orig = _banded_lcs(context, tok_text, max_dist, norm)
        if score > 0.8 * n:
            break
        max_dist *= 2
    used_fallback = all(v is None for v in orig_to_tok) or score < 0.8 * n
    if used_fallback:
        orig_to_tok, tok_to_orig = _fallback_match(context, tok_text, norm)
    starts = [_convert_index(tok_to_orig, tok_start_chartok[t], n, is_start=True)
              for t in range(len(pieces))]
    ends = [_convert_index(tok_to_orig, tok_end_chartok[t], n, is_start=False)
            for t in range(len(pieces))]
    return ContextAlignment(
        pieces=pieces,
        piece_ids=[sp_model.PieceToId(p) for p in pieces],
        tok_start_to_orig_index=starts,
        tok_end_to_orig_index=ends,
        chartok_to_tok_index=chartok_to_tok_index,
        orig_to_chartok_index=orig_to_tok,
        used_fallback=used_fallback,
    )


def answer_piece_span(alignment: ContextAlignment, char_start: int, answer_text: str
                      ) -> tuple[int, int]:
    """First and last context piece of the answer at ``char_start`` (original rule)."""
    char_end = char_start + len(answer_text) - 1
    start = alignment.chartok_to_tok_index[
        _convert_index(alignment.orig_to_chartok_index, char_start, is_start=True)]
    end = alignment.chartok_to_tok_index[
        _convert_index(alignment.orig_to_chartok_index, char_end, is_start=False)]
    return start, max(start, end)


# --- windows ------------------------------------------------------------------

def doc_windows(num_pieces: int, max_tokens_for_doc: int, doc_stride: int
                ) -> list[tuple[int, int]]:
    """(start, length) of each window; the last one reaches the end of the context."""
    spans = []
    start = 0
    while start < num_pieces:
        length = min(num_pieces - start, max_tokens_for_doc)
        spans.append((start, length))
        if start + length == num_pieces:
            break
        start += min(length, doc_stride)
    return spans


def max_context_flags(spans: Sequence[tuple[int, int]]) -> list[list[bool]]:
    """For each window, whether it is each of its pieces' max-context window
    (score ``min(left, right) + 0.01 * length``; first window wins ties)."""
    best: dict[int, tuple[float, int]] = {}
    for w, (start, length) in enumerate(spans):
        end = start + length - 1
        for pos in range(start, end + 1):
            score = min(pos - start, end - pos) + 0.01 * length
            if pos not in best or score > best[pos][0]:
                best[pos] = (score, w)
    return [[best[pos][1] == w for pos in range(start, start + length)]
            for w, (start, length) in enumerate(spans)]


def convert_examples_to_features(
    examples: Sequence[SquadExample],
    sp_model,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
    do_lower_case: bool = True,
    stats: ConversionStats | None = None,
) -> Iterator[SquadFeature]:
    """Yields the features of ``examples`` in order (``example_index`` = position
    in ``examples``). Every example yields at least one feature."""
    check_lengths(max_seq_length, max_query_length, doc_stride)
    stats = stats if stats is not None else ConversionStats()
    cls_id, sep_id = sp_model.PieceToId("[CLS]"), sp_model.PieceToId("[SEP]")
    alignments: dict[str, ContextAlignment] = {}
    unique_id = FIRST_UNIQUE_ID
    for example_index, example in enumerate(examples):
        alignment = alignments.get(example.paragraph_text)
        if alignment is None:
            try:
                alignment = align_context(sp_model, example.paragraph_text, do_lower_case)
            except ValueError as e:
                raise ValueError(f"question id {example.qas_id!r}: {e}") from None
            alignments[example.paragraph_text] = alignment
            stats.paragraphs += 1
            if alignment.used_fallback:
                stats.fallback_alignments += 1
                log.warning("question id %s: context not aligned by the banded LCS; "
                            "used the fallback alignment", example.qas_id)
        if alignment.used_fallback:
            stats.fallback_examples += 1
        stats.examples += 1

        query_ids = tokenization.encode_ids(
            sp_model, tokenization.preprocess_text(example.question_text, lower=do_lower_case))
        query_ids = query_ids[:max_query_length]
        doc_offset = len(query_ids) + 2
        max_tokens_for_doc = max_seq_length - len(query_ids) - 3

        answer_span = None
        if is_training and not example.is_impossible:
            answer_span = answer_piece_span(
                alignment, example.start_position, example.orig_answer_text)

        spans = doc_windows(len(alignment.pieces), max_tokens_for_doc, doc_stride)
        for w, ((start, length), is_max) in enumerate(zip(spans, max_context_flags(spans))):
            ids = [cls_id] + query_ids + [sep_id] + alignment.piece_ids[start:start + length] + [sep_id]
            segment_ids = [0] * doc_offset + [1] * (length + 1)
            p_mask = [0] + [1] * (len(query_ids) + 1) + [0] * length + [1]
            pad = max_seq_length - len(ids)
            feature = SquadFeature(
                unique_id=unique_id,
                example_index=example_index,
                doc_span_index=w,
                input_ids=ids + [0] * pad,
                input_mask=[1] * len(ids) + [0] * pad,
                segment_ids=segment_ids + [0] * pad,
                p_mask=p_mask + [1] * pad,
                doc_offset=doc_offset,
                tok_start_to_orig_index=alignment.tok_start_to_orig_index[start:start + length],
                tok_end_to_orig_index=alignment.tok_end_to_orig_index[start:start + length],
                token_is_max_context=is_max,
                is_impossible=bool(example.is_impossible),
            )
            if is_training:
                if answer_span is not None and start <= answer_span[0] and answer_span[1] < start + length:
                    feature.start_position = answer_span[0] - start + doc_offset
                    feature.end_position = answer_span[1] - start + doc_offset
                    feature.is_impossible = False
                else:  # the answer is not (wholly) in this window, or there is none
                    feature.start_position = feature.end_position = 0
                    feature.is_impossible = True
                if feature.is_impossible:
                    stats.negative += 1
                else:
                    stats.positive += 1
            stats.features += 1
            unique_id += 1
            yield feature


def shuffled_for_training(examples: Iterable[SquadExample], seed: int = TRAIN_SHUFFLE_SEED
                          ) -> list[SquadExample]:
    """The original pre-shuffles training examples (seed 12345) so a small
    shuffle buffer suffices; same here, seeded."""
    examples = list(examples)
    random.Random(seed).shuffle(examples)
    return examples
