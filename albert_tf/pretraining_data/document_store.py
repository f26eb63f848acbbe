"""The tokenized corpus on disk, with random access to any document.

create_pretraining_data tokenizes the input once into this store; every
`dupe_factor` pass reads its documents back from it, and so does the draw of
"a random other document" (anywhere in the corpus, as the original), without
holding the corpus in memory.

Files (native byte order; they live only in the run's temporary directory):
- `documents.bin`: one record per document: uint32 sentence count n, n uint32
  sentence lengths, then the token ids (uint16 when the vocabulary has at most
  65536 pieces, else uint32).
- `documents.idx`: uint64 offsets into documents.bin, one per document plus the
  end, so document i is bytes [idx[i], idx[i + 1]).
"""
from __future__ import annotations

import os
from array import array
from itertools import accumulate
from typing import Iterator, Sequence

DATA_FILE = "documents.bin"
INDEX_FILE = "documents.idx"
_COUNT = "I"  # sentence counts and lengths
_OFFSET = "Q"
assert array(_COUNT).itemsize == 4 and array(_OFFSET).itemsize == 8


def token_typecode(vocab_size: int) -> str:
    """array typecode for token ids: 2 bytes while ids fit, else 4 (ids go up to vocab_size, the
    unknown-continuation id of masking.unknown_continuation_id)."""
    return "H" if vocab_size < 1 << 16 else "I"


def encode_document(sentences: Sequence[Sequence[int]], typecode: str) -> bytes:
    """One document's record for documents.bin."""
    header = array(_COUNT, [len(sentences)])
    header.extend(len(s) for s in sentences)
    tokens = array(typecode)
    for sentence in sentences:
        tokens.extend(sentence)
    return header.tobytes() + tokens.tobytes()


def decode_document(record: bytes | memoryview, typecode: str) -> list[list[int]]:
    """A documents.bin record back to a list of sentences (lists of ids)."""
    # (array(code, x) treats a memoryview as a sequence of numbers: frombytes it is)
    header = array(_COUNT)
    header.frombytes(record[:4])
    n = header[0]
    lengths = array(_COUNT)
    lengths.frombytes(record[4 : 4 + 4 * n])
    tokens = array(typecode)
    tokens.frombytes(record[4 + 4 * n :])
    ids = tokens.tolist()
    sentences, start = [], 0
    for length in lengths:
        sentences.append(ids[start : start + length])
        start += length
    return sentences


class DocumentStoreWriter:
    """Appends encoded documents (in corpus order) to a new store in `directory`."""

    def __init__(self, directory: str):
        self._data = open(os.path.join(directory, DATA_FILE), "wb", buffering=1 << 20)
        self._index = open(os.path.join(directory, INDEX_FILE), "wb", buffering=1 << 16)
        self._index.write(array(_OFFSET, [0]).tobytes())
        self.num_documents = 0
        self.num_bytes = 0

    def append(self, blob: bytes, record_sizes: Sequence[int]) -> None:
        """`blob` is the concatenated records of len(record_sizes) documents."""
        self._data.write(blob)
        ends = array(_OFFSET, accumulate(record_sizes, initial=self.num_bytes))[1:]
        self._index.write(ends.tobytes())
        self.num_documents += len(record_sizes)
        self.num_bytes += len(blob)

    def close(self) -> None:
        self._data.close()
        self._index.close()


class StoredDocument(Sequence):
    """One document read lazily: its sentence lengths on creation, a sentence when indexed.

    The "random other document" uses a few sentences of a document that may be
    large; this reads only those.
    """

    def __init__(self, fd: int, offset: int, typecode: str):
        self._fd, self._typecode = fd, typecode
        self._itemsize = array(typecode).itemsize
        (n,) = array(_COUNT, os.pread(fd, 4, offset))
        lengths = array(_COUNT, os.pread(fd, 4 * n, offset + 4)) if n else array(_COUNT)
        self._lengths = lengths
        self._starts = list(accumulate(lengths, initial=0))
        self._tokens_offset = offset + 4 + 4 * n

    def __len__(self) -> int:
        return len(self._lengths)

    def __getitem__(self, j: int) -> list[int]:
        if not 0 <= j < len(self._lengths):
            raise IndexError(f"sentence {j} of a document with {len(self._lengths)}")
        size = self._lengths[j] * self._itemsize
        tokens = array(self._typecode, os.pread(self._fd, size, self._tokens_offset + self._starts[j] * self._itemsize))
        return tokens.tolist()


class DocumentStore:
    """Read side: ranges of documents in memory, single documents lazily (pread, no shared file position)."""

    def __init__(self, directory: str, typecode: str):
        self.typecode = typecode
        self._data = os.open(os.path.join(directory, DATA_FILE), os.O_RDONLY)
        self._index = os.open(os.path.join(directory, INDEX_FILE), os.O_RDONLY)
        self.num_documents = os.fstat(self._index).st_size // 8 - 1

    def _offsets(self, start: int, end: int) -> array:
        """idx[start..end] inclusive (end - start + 1 offsets)."""
        return array(_OFFSET, os.pread(self._index, 8 * (end - start + 1), 8 * start))

    def read_range(self, start: int, end: int) -> list[list[list[int]]]:
        """Documents [start, end), decoded."""
        offsets = self._offsets(start, end)
        blob = memoryview(os.pread(self._data, offsets[-1] - offsets[0], offsets[0]))
        base = offsets[0]
        return [decode_document(blob[a - base : b - base], self.typecode) for a, b in zip(offsets, offsets[1:])]

    def document(self, i: int) -> StoredDocument:
        return StoredDocument(self._data, self._offsets(i, i)[0], self.typecode)

    def iter_ranges(self, target_bytes: int, chunk_documents: int = 1 << 16) -> Iterator[tuple[int, int]]:
        """Consecutive [start, end) document ranges of about `target_bytes` each (at least one document),
        streaming through the index."""
        start, base = 0, 0
        for chunk_start in range(0, self.num_documents, chunk_documents):
            chunk_end = min(chunk_start + chunk_documents, self.num_documents)
            offsets = self._offsets(chunk_start, chunk_end)
            for k in range(1, len(offsets)):
                end = chunk_start + k
                if offsets[k] - base >= target_bytes:
                    yield start, end
                    start, base = end, offsets[k]
        if start < self.num_documents:
            yield start, self.num_documents

    def close(self) -> None:
        os.close(self._data)
        os.close(self._index)


class CorpusView(Sequence):
    """All documents of the store as one sequence: [start, start + len(documents)) from memory, the
    others read lazily. What `create_instances_from_document` draws "a random other document" from."""

    def __init__(self, store: DocumentStore, start: int, documents: list[list[list[int]]]):
        self._store, self._start, self._documents = store, start, documents

    def __len__(self) -> int:
        return self._store.num_documents

    def __getitem__(self, i: int):
        local = i - self._start
        if 0 <= local < len(self._documents):
            return self._documents[local]
        if not 0 <= i < self._store.num_documents:
            raise IndexError(f"document {i} of {self._store.num_documents}")
        return self._store.document(i)
