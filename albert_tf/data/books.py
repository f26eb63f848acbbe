"""Turning a Project Gutenberg book into create_pretraining_data's input format.

The input format is one sentence per line with a blank line between documents;
a Gutenberg text is hard-wrapped, may start with a BOM and has a licence header
and footer. Used by tests and benchmarks on `botchan.txt`, and handy for users
with similar plain-text books.
"""
from __future__ import annotations

import os
import re

from albert_tf.fileio import atomic_write_text

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")
_CHAPTER = re.compile(r"\s*CHAPTER [IVXLC]+\.?\s*")


def book_documents(text: str) -> list[list[str]]:
    """Documents (one per chapter) as lists of sentences, Gutenberg header/footer removed."""
    lines = text.lstrip("\ufeff").splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if line.startswith("*** START OF")), 0)
    end = next((i for i, line in enumerate(lines) if line.startswith("*** END OF")), len(lines))
    body = " ".join(line.strip() for line in lines[start:end])
    documents = []
    for chapter in _CHAPTER.split(body):
        sentences = [s.strip() for s in _SENTENCE_END.split(chapter) if s.strip()]
        if sentences:
            documents.append(sentences)
    return documents


def book_as_sentences(src: str | os.PathLike) -> str:
    """The book at `src` in the one-sentence-per-line format (ends with a blank line)."""
    with open(src, encoding="utf-8-sig") as f:
        documents = book_documents(f.read())
    return "\n\n".join("\n".join(doc) for doc in documents) + "\n\n"


def write_book_as_sentences(src: str | os.PathLike, dst: str | os.PathLike, copies: int = 1) -> str:
    """Writes `src` in the one-sentence-per-line format to `dst`, `copies` times over."""
    return atomic_write_text(dst, book_as_sentences(src) * copies)
