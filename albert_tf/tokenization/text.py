"""Text clean-up shared by the Python and in-graph tokenizers.

`preprocess_text` follows Google's ALBERT `tokenization.preprocess_text` as the
reference vectors define it (../shared/reference/README.md): collapse
whitespace, NFKD, drop combining marks, optionally lower-case. The `` / ''
to " rewrite some ports add is deliberately NOT applied.
"""
from __future__ import annotations

import unicodedata


def convert_to_unicode(text: str | bytes) -> str:
    """Returns `text` as str; bytes are decoded as UTF-8 (invalid bytes dropped, as in BERT)."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")
    raise ValueError(f"Unsupported string type: {type(text)} (expected str or bytes)")


def printable_text(text: str | bytes) -> str:
    """Returns text suitable for printing or logging."""
    return convert_to_unicode(text)


def preprocess_text(inputs: str | bytes, remove_space: bool = True, lower: bool = False) -> str:
    """Normalizes text before SentencePiece.

    Steps: join `strip().split()` with single spaces (if `remove_space`);
    Unicode NFKD; drop combining characters (accents); lower-case if `lower`.
    """
    outputs = convert_to_unicode(inputs)
    if remove_space:
        outputs = " ".join(outputs.strip().split())
    outputs = unicodedata.normalize("NFKD", outputs)
    if not outputs.isascii():  # fast path: ASCII has no combining marks
        outputs = "".join(c for c in outputs if not unicodedata.combining(c))
    if lower:
        outputs = outputs.lower()
    return outputs
