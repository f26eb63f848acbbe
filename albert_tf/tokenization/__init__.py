"""ALBERT tokenization: Python (`FullTokenizer`) and in-graph (`TFTokenizer`).

`TFTokenizer` is imported lazily so that the Python tokenizer (and the data
tools' worker processes) do not load TensorFlow.
"""
import importlib
from typing import Any

from albert_tf.tokenization.fingerprint import tokenizer_fingerprint
from albert_tf.tokenization.full_tokenizer import FullTokenizer
from albert_tf.tokenization.spm import (
    REQUIRED_PIECES,
    SPIECE_UNDERLINE,
    encode_ids,
    encode_pieces,
    load_spm_model,
)
from albert_tf.tokenization.text import convert_to_unicode, preprocess_text, printable_text
from albert_tf.tokenization.wordpiece import BasicTokenizer, WordpieceTokenizer, load_vocab

__all__ = [
    "BasicTokenizer",
    "FullTokenizer",
    "REQUIRED_PIECES",
    "SPIECE_UNDERLINE",
    "TFTokenizer",
    "WordpieceTokenizer",
    "convert_to_unicode",
    "encode_ids",
    "encode_pieces",
    "load_spm_model",
    "load_vocab",
    "preprocess_text",
    "printable_text",
    "tokenizer_fingerprint",
]


def __getattr__(name: str) -> Any:
    if name == "TFTokenizer":
        return importlib.import_module("albert_tf.tokenization.tf_tokenizer").TFTokenizer
    raise AttributeError(f"module 'albert_tf.tokenization' has no attribute {name!r}")
