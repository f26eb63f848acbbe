"""A tokenizer's identity for cache keys: its model file's contents and lower-casing."""
from __future__ import annotations

from albert_tf.fileio import file_sha256


def tokenizer_fingerprint(spm_model_file: str | None, vocab_file: str | None, do_lower_case: bool) -> str:
    """Identifies a tokenizer by its model (or vocabulary) file contents and lower-casing, so a
    feature cache made with another tokenizer is rebuilt rather than reused."""
    parts = [f"lower={bool(do_lower_case)}"]
    if spm_model_file:
        parts.append("spm=" + file_sha256(spm_model_file))
    elif vocab_file:
        parts.append("vocab=" + file_sha256(vocab_file))
    return ";".join(parts)
