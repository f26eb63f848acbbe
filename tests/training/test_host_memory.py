"""`host_memory.release_freed_memory`: the C allocator's free pages really leave the process."""
import ctypes
import ctypes.util
import platform
import sys

import pytest

from albert_tf.training.host_memory import release_freed_memory


def _anonymous_rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no RssAnon line in /proc/self/status")


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
                    reason="malloc_trim is glibc's; elsewhere release_freed_memory does nothing")
def test_freed_heap_pages_leave_the_process():
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    # 160 MiB in 4 KiB blocks: below the mmap threshold, so they come from the heap; the last
    # block stays allocated, so free() cannot give the pages back by shrinking the heap's top.
    blocks = [libc.malloc(4096) for _ in range(40960)]
    for block in blocks:
        ctypes.memset(block, 1, 4096)  # touched: resident
    held = _anonymous_rss_mib()
    for block in blocks[:-1]:
        libc.free(block)
    kept_by_the_allocator = _anonymous_rss_mib()
    assert release_freed_memory()
    released = _anonymous_rss_mib()
    libc.free(blocks[-1])
    assert kept_by_the_allocator > held - 40, (held, kept_by_the_allocator)  # free() alone kept most
    assert released < kept_by_the_allocator - 100, (kept_by_the_allocator, released)
