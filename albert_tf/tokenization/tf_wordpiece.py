"""In-graph WordPiece tokenization for the vocab.txt (Chinese) ALBERT releases.

tensorflow-text's BertTokenizer does BERT's basic tokenization (lower-casing and
accent stripping with `lower_case`, punctuation and CJK split) and WordPiece;
exported models use it where `FullTokenizer(vocab_file=...)` is used in Python.
"""
from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from albert_tf.tokenization.tf_tokenizer import _TEXTS, _as_batch
from albert_tf.tokenization.wordpiece import load_vocab


class TFWordPieceTokenizer(tf.Module):
    """`tokenize(tf.string [N]) -> tf.RaggedTensor int32 [N, (ids)]` on a vocab.txt (a scalar string gives
    one row, as `TFTokenizer`)."""

    def __init__(self, vocab_file: str, do_lower_case: bool = True, name: str | None = None):
        super().__init__(name=name)
        index = load_vocab(vocab_file)  # the Python tokenizer's reading (first field of each line)
        vocab = sorted(index, key=index.get)
        for token in ("[CLS]", "[SEP]", "[UNK]"):
            if token not in index:
                raise ValueError(f"{vocab_file}: WordPiece vocab lacks {token}")
        self.vocab_size = len(vocab)
        self.cls_id, self.sep_id, self.unk_id = index["[CLS]"], index["[SEP]"], index["[UNK]"]
        self.mask_id = index.get("[MASK]", self.unk_id)
        table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(tf.constant(vocab), tf.range(len(vocab), dtype=tf.int64)),
            default_value=self.unk_id)
        self._bert = tf_text.BertTokenizer(table, token_out_type=tf.int64, lower_case=do_lower_case,
                                           unknown_token="[UNK]")

    @tf.function(input_signature=[_TEXTS])
    def tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
        """Ids of each text (int32 ragged [N, None]); one string (a scalar) gives one row, [1, None]."""
        texts = _as_batch(texts, "TFWordPieceTokenizer")
        return tf.cast(self._bert.tokenize(texts).merge_dims(1, 2), tf.int32)
