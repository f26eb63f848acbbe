"""TFTokenizer: ALBERT's SentencePiece tokenization as TensorFlow ops (tensorflow-text).

Gives the same ids as `FullTokenizer(spm_model_file=..., do_lower_case=...)`,
works inside `tf.data` and exports in a SavedModel (the model bytes are held by
tensorflow-text's SentencePiece resource, which SavedModel serializes).

The ids come from tensorflow-text's `FastSentencepieceTokenizer`, not its `SentencepieceTokenizer`:
where two splits of a span score exactly the same (the same pieces in another order: "666" as
6|66 or 66|6), the latter's bundled SentencePiece (0.1.96) breaks the tie another way than the
Python sentencepiece the drivers use, by float rounding: 12 of the 78,049 GLUE and SQuAD texts
got other ids. The fast one's float32 search breaks ties as Python's does (all of them agree).

Very long texts: the search adds piece scores in float32 and Python's sentencepiece compares candidates in
double, so after about 85,000 characters (19,000 ids) near-equal segmentations of a word can round apart.
A text's first ids never depend on what follows it (no piece spans a space): those serving keeps are
Python's. README, "very long texts".
"""
from __future__ import annotations

import functools
import os
import sys
import unicodedata

import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.tokenization import spm as spm_utils

_UNDERLINE = spm_utils.SPIECE_UNDERLINE


def _char_class(predicate) -> str:
    """An RE2 character class of every code point for which `predicate(char)` holds.

    Built from Python's own `unicodedata`/`str` so the graph applies exactly the
    rules the Python tokenizer does (RE2's \\s, for one, is ASCII only).
    """
    ranges = []
    start = prev = None
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp <= 0xDFFF:  # surrogates cannot appear in valid UTF-8
            continue
        if predicate(chr(cp)):
            if start is None:
                start = cp
            elif cp != prev + 1:
                ranges.append((start, prev))
                start = cp
            prev = cp
    if start is not None:
        ranges.append((start, prev))
    parts = [f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in ranges]
    return "[" + "".join(parts) + "]"


@functools.lru_cache(maxsize=None)
def _patterns() -> dict[str, str]:
    return {
        "space": _char_class(str.isspace) + "+",
        "combining": _char_class(lambda c: unicodedata.combining(c) != 0),
        # A piece longer than one character ending in a digit then "," (reference rule 3).
        "digit_comma": "(?s).*" + _char_class(str.isdigit) + ",",
    }


def tf_preprocess_text(texts: tf.Tensor, lower: bool = True) -> tf.Tensor:
    """`preprocess_text` in TensorFlow ops: collapse whitespace, NFKD, drop combining marks, lower."""
    patterns = _patterns()
    texts = tf.strings.regex_replace(texts, patterns["space"], " ")
    texts = tf.strings.regex_replace(texts, "^ | $", "")
    texts = tf_text.normalize_utf8(texts, "NFKD")
    texts = tf.strings.regex_replace(texts, patterns["combining"], "")
    if lower:
        # tf.strings.lower stops at a NUL byte (the rest of the text would be lost): NUL goes through
        # it as a private-use character, which has no case, and comes back after.
        texts = tf.strings.regex_replace(texts, "\x00", _NUL_STAND_IN)
        texts = tf.strings.lower(texts, encoding="utf-8")
        texts = tf.strings.regex_replace(texts, _NUL_STAND_IN, "\x00")
    return texts


_NUL_STAND_IN = "\U000F0000"  # plane 15 private use: no case, and nothing a text to tokenize holds


# Any rank is traced (one string must work, as in tensorflow-text's tokenizers); `_as_batch` checks it.
_TEXTS = tf.TensorSpec(None, tf.string)


def _as_batch(texts: tf.Tensor, owner: str = "TFTokenizer") -> tf.Tensor:
    """A batch [N] of texts; one string (a scalar) is a batch of one. More dimensions are an error
    naming what is expected, not a reshape that would silently tokenize each cell. Shared with
    `TFWordPieceTokenizer` (`owner` names the tokenizer in the error)."""
    check = tf.debugging.assert_rank_in(
        texts, [0, 1], message=f"{owner} expects one string or a 1-D batch of strings [N]")
    with tf.control_dependencies([check]):
        return tf.reshape(texts, [-1])


class TFTokenizer(tf.Module):
    """In-graph ALBERT tokenizer: `tokenize(tf.string [N]) -> tf.RaggedTensor int32 [N, (ids)]` (a scalar
    string gives one row)."""

    def __init__(self, spm_model_file: str | os.PathLike, do_lower_case: bool = True, name: str | None = None):
        super().__init__(name=name)
        path = os.fspath(spm_model_file)
        model_bytes = spm_utils.read_model_bytes(path)
        sp_model = spm_utils.load_spm_model_from_bytes(model_bytes, source=path)  # validates
        self.do_lower_case = do_lower_case
        self.vocab_size = sp_model.GetPieceSize()
        self.cls_id = sp_model.PieceToId("[CLS]")
        self.sep_id = sp_model.PieceToId("[SEP]")
        self.mask_id = sp_model.PieceToId("[MASK]")
        self.pad_id = max(sp_model.pad_id(), 0)
        self.unk_id = sp_model.unk_id()
        self._sp = tf_text.SentencepieceTokenizer(model=model_bytes, out_type=tf.string)
        self._fast = tf_text.FastSentencepieceTokenizer(model_bytes)
        pieces = [sp_model.IdToPiece(i) for i in range(self.vocab_size)]
        self._vocab = tf.constant(pieces)
        # The digit-comma rule (reference rule 3) depends on the piece alone: each id's ids after it,
        # computed by the Python rule itself ([id] for the pieces it leaves alone).
        self._rule_ids = tf.ragged.constant(
            [[sp_model.PieceToId(p) for p in spm_utils.split_digit_comma(sp_model, piece)]
             if spm_utils.needs_comma_split(piece) and i != self.unk_id else [i]
             for i, piece in enumerate(pieces)], dtype=tf.int32, ragged_rank=1, row_splits_dtype=tf.int64)

    @tf.function(input_signature=[_TEXTS])
    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Ids of each text (int32 ragged [N, None]); one string (a scalar) gives one row, [1, None]."""
        return self._ids(_as_batch(texts))

    @tf.function(input_signature=[_TEXTS])
    def tokenize_pieces(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Pieces of each text (tf.string ragged [N, None]), those of `tokenize`'s ids; an unknown
        piece is the text it stands for (as Python's `tokenize`), or "<unk>" if that cannot be told."""
        texts = _as_batch(texts)
        ids = self._ids(texts)
        pieces = tf.gather(self._vocab, ids)
        # The text of each unknown piece, in order, from the other tokenizer (same unknowns, unless a
        # tie split differs around them): taken where a row has as many unknowns in both.
        surfaces = self._pieces(texts)
        surface_unk = tf.ragged.boolean_mask(surfaces, tf.equal(self._sp.string_to_id(surfaces), self.unk_id))
        is_unk = tf.equal(ids, self.unk_id)
        same_count = tf.equal(tf.reduce_sum(tf.cast(is_unk, tf.int64), axis=1), surface_unk.row_lengths())
        use = tf.logical_and(is_unk.flat_values, tf.gather(same_count, is_unk.value_rowids()))
        taken = tf.ragged.boolean_mask(surface_unk, same_count).flat_values
        flat = tf.tensor_scatter_nd_update(pieces.flat_values, tf.where(use), taken)
        return pieces.with_flat_values(flat)

    def _ids(self, texts: tf.Tensor) -> tf.RaggedTensor:
        ids = self._fast.tokenize(tf_preprocess_text(texts, lower=self.do_lower_case))  # [N, (P)]
        ids = ids.with_row_splits_dtype(tf.int64)
        per_piece = tf.gather(self._rule_ids, ids.flat_values)  # [T, (m)]
        return ids.with_flat_values(per_piece).merge_dims(1, 2)

    def _pieces(self, texts: tf.Tensor) -> tf.RaggedTensor:
        texts = tf_preprocess_text(texts, lower=self.do_lower_case)
        pieces = self._sp.tokenize(texts)  # [N, (P)]
        flat = pieces.flat_values  # [T]
        split = tf.strings.regex_full_match(flat, _patterns()["digit_comma"])
        # Each flagged piece becomes its re-encoded sub-pieces plus ",": build
        # [T, (m)] rows (one piece, or the replacement) and merge back into [N, (P')].
        redo = self._split_digit_comma(tf.boolean_mask(flat, split))  # [F, (k)]
        num_flat = tf.shape(flat, out_type=tf.int64)[0]
        flagged_rows = tf.where(split)
        redo_lengths = tf.scatter_nd(flagged_rows, redo.row_lengths(), [num_flat])
        redo_full = tf.RaggedTensor.from_row_lengths(redo.flat_values, redo_lengths)
        keep = tf.RaggedTensor.from_row_lengths(
            tf.boolean_mask(flat, tf.logical_not(split)), tf.cast(tf.logical_not(split), tf.int64)
        )
        per_piece = tf.concat([keep, redo_full], axis=1)  # [T, (m)]
        return pieces.with_flat_values(per_piece).merge_dims(1, 2)

    def _split_digit_comma(self, flagged: tf.Tensor) -> tf.RaggedTensor:
        """Reference rule 3 on flagged pieces: re-encode without ',' and '▁', fix the leading '▁', add ','."""
        body = tf.strings.regex_replace(tf.strings.regex_replace(flagged, ",$", ""), _UNDERLINE, "")
        sub = self._sp.tokenize(body)  # [F, (k)]
        values = sub.flat_values
        first_in_row = tf.equal(
            tf.gather(sub.row_starts(), sub.value_rowids()), tf.range(tf.size(values, out_type=tf.int64))
        )
        orig_starts_word = tf.strings.regex_full_match(flagged, "(?s)" + _UNDERLINE + ".*")
        strip = (
            first_in_row
            & tf.logical_not(tf.gather(orig_starts_word, sub.value_rowids()))
            & tf.strings.regex_full_match(values, "(?s)" + _UNDERLINE + ".*")
        )
        stripped = tf.where(strip, tf.strings.regex_replace(values, "^" + _UNDERLINE, ""), values)
        keep = tf.logical_not(strip & tf.equal(stripped, ""))  # a bare "▁" is dropped
        sub = tf.ragged.boolean_mask(sub.with_flat_values(stripped), sub.with_flat_values(keep))
        commas = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.shape(flagged)[0]], ","), tf.ones([tf.shape(flagged)[0]], tf.int64)
        )
        return tf.concat([sub, commas], axis=1)
