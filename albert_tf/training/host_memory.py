"""Hands the C allocator's freed memory back to the system once the training step is built.

Why: the first call of the training step traces it, optimizes its graph, compiles its XLA
functions and runs it; the building frees most of what it allocated, but glibc's allocator keeps
freed pages in its arenas, where the step's own tensors (allocated by other threads, from other
arenas) cannot always reuse them.  Those pages stayed resident for the whole run and the later
steps' tensors came on top of them: in ALBERT-base's bf16 pretraining step the process's peak
came in the second step, not the first.  ``malloc_trim`` returns them: the Trainer runs a new
train function's first loop as one step, calls it every 0.2 s while that step runs (pages freed
by tracing and compiling go before the step's tensors peak) and once after it; later loops never.
See `benchmarks/README.md` for the peak RSS before and after.

Only glibc has ``malloc_trim``; elsewhere (musl, macOS, Windows) this does nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
from typing import Optional


@functools.lru_cache(maxsize=1)
def _glibc() -> Optional[ctypes.CDLL]:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def release_freed_memory() -> bool:
    """Returns the allocator's free pages (in every arena) to the system; whether it could."""
    libc = _glibc()
    if libc is None:
        return False
    libc.malloc_trim(ctypes.c_size_t(0))
    return True
