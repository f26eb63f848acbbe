"""Reading the corpus: input files as blocks of raw documents (a blank line or a file's end ends one;
lines that are not UTF-8 are a one-line error or counted and skipped), and raw documents tokenized
into documents of id lists, as the original."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

from absl import logging

from albert_tf.pretraining_data.config import PretrainingDataError
from albert_tf.pretraining_data.masking import is_start_piece_sp, unknown_continuation_id
from albert_tf.tokenization import FullTokenizer, preprocess_text
from albert_tf.tokenization.spm import encode_pieces


def line_text(raw: bytes, first_line: bool) -> str:
    """A raw input line as text (UnicodeDecodeError if it is not UTF-8); a byte-order mark is not text.

    Every carriage return is dropped, as the original's reader (TensorFlow's GFile.readline) did: a
    stray one inside a line joins its neighbours ("carriage\rreturn" is one word, not two)."""
    line = raw.decode("utf-8").replace("\r", "")
    return line[1:] if first_line and line.startswith("\ufeff") else line


def invalid_line_error(path: str, line_number: int, err: UnicodeDecodeError) -> PretrainingDataError:
    return PretrainingDataError(
        f"{path}:{line_number}: line is not valid UTF-8 ({err.reason} at byte {err.start}); "
        f"fix the file or pass --skip_invalid_lines to count and skip such lines")


@dataclass
class ReadCounters:
    lines: int = 0
    invalid_lines_skipped: int = 0
    bytes_read: int = 0


# Far above a book or an article: a document this large is most likely a corpus without blank lines.
LARGE_DOCUMENT_BYTES = 16 << 20
MEMORY_PER_DOCUMENT_BYTE = 16  # peak bytes of memory per byte of a document's text (measured, 12 and 24 MB)


def _warn_large_document(path: str, first_line: int, line_number: int) -> None:
    logging.warning(
        "%s:%d: one document (no blank line since line %d) is over %d MB: a document is held whole in "
        "memory, about %d times its text; put a blank line between documents",
        path, line_number, first_line, LARGE_DOCUMENT_BYTES >> 20, MEMORY_PER_DOCUMENT_BYTE)


def iter_blocks(
    input_files: tuple[str, ...], block_bytes: int, skip_invalid_lines: bool, counters: ReadCounters
) -> Iterator[tuple[list[list[str]], int]]:
    """Yields (documents, raw byte count) blocks; a document is a list of text lines.

    A blank line or the end of a file ends a document; blocks end at document
    boundaries once they hold `block_bytes` of input. A document is held whole (here, by the worker
    that tokenizes it and by the one that makes its instances): one past `LARGE_DOCUMENT_BYTES` is
    warned about as it is read, before its memory is taken.
    """
    block: list[list[str]] = []
    block_size = 0
    for path in input_files:
        document: list[str] = []
        document_bytes = document_line = 0
        with open(path, "rb") as f:
            for line_number, raw in enumerate(f, start=1):
                block_size += len(raw)
                counters.bytes_read += len(raw)
                counters.lines += 1
                try:
                    line = line_text(raw, line_number == 1)
                except UnicodeDecodeError as err:
                    if skip_invalid_lines:
                        counters.invalid_lines_skipped += 1
                        continue
                    raise invalid_line_error(path, line_number, err) from None
                if line.strip():
                    if not document:
                        document_bytes, document_line = 0, line_number
                    document.append(line)
                    document_bytes += len(raw)
                    if document_bytes >= LARGE_DOCUMENT_BYTES > document_bytes - len(raw):  # once, on crossing
                        _warn_large_document(path, document_line, line_number)
                    continue
                if document:
                    block.append(document)
                    document = []
                if block_size >= block_bytes and block:
                    yield block, block_size
                    block, block_size = [], 0
        if document:
            block.append(document)
        if block_size >= block_bytes and block:
            yield block, block_size
            block, block_size = [], 0
    if block or block_size:
        yield block, block_size


@dataclass
class CorpusFacts:
    documents: int = 0
    sentences: int = 0
    tokens: int = 0
    store_bytes: int = 0


def tokenize_documents(tokenizer: FullTokenizer, do_lower_case: bool, raw_documents: list[list[str]]
                       ) -> tuple[list[list[list[int]]], int]:
    """Raw lines -> documents of id lists; as the original, a line empty after clean-up splits documents."""
    use_spm = tokenizer.sp_model is not None
    documents: list[list[list[int]]] = []
    sentences = 0
    for raw_document in raw_documents:
        document: list[list[int]] = []
        for line in raw_document:
            if use_spm:
                text = preprocess_text(line, lower=do_lower_case)
            else:
                text = line.strip()
            if not text:
                if document:
                    documents.append(document)
                    document = []
                continue
            ids = _sentencepiece_ids(tokenizer, text) if use_spm else tokenizer.tokenize_to_ids(text)
            if ids:
                document.append(ids)
                sentences += 1
        if document:
            documents.append(document)
    return documents, sentences


def _sentencepiece_ids(tokenizer: FullTokenizer, text: str) -> list[int]:
    """The ids of `text`, with an unknown piece that continues a word (by its text: 'H' in
    '▁', 'H', 'ello' with cased text) as `unknown_continuation_id`: the original judged word starts
    (token_boundary, whole-word masking) by the pieces' text, which the unk id alone loses."""
    ids = tokenizer.encode_preprocessed_ids(text)
    unk_id = tokenizer.sp_model.unk_id()
    if unk_id not in ids:
        return ids
    pieces = encode_pieces(tokenizer.sp_model, text)  # the original's tokens; its ids are theirs
    continuation = unknown_continuation_id(tokenizer.vocab_size)
    ids = [tokenizer.sp_model.PieceToId(piece) for piece in pieces]
    return [continuation if i == unk_id and not is_start_piece_sp(piece) else i for i, piece in zip(ids, pieces)]
