"""Atomic file output: readers see the old file or the whole new one, never a part,
and a failed write leaves nothing behind. (Checkpoint files, which may live on
GCS, go through tf.io.gfile in `albert_tf.training.checkpointing` instead.)"""
from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Iterator


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[str]:
    """Yields a temporary path beside `path`: write there; on success it replaces
    `path`, on any error it is removed and the error propagates."""
    path = os.fspath(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> str:
    """Writes UTF-8 `text` to `path` atomically; returns the path."""
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
    return os.fspath(path)
