"""Whether a process of this host is still running: how a lock or a temporary folder left by a killed
writer is told from one a live process holds."""
from __future__ import annotations

import os


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int, start_ticks: int | None = None) -> bool:
    """Whether process ``pid`` of this host is running (and, given ``start_ticks``, is the one that
    started then: a reused pid is not)."""
    if os.path.isdir("/proc"):
        ticks = process_start_ticks(pid)
        return ticks is not None and (start_ticks is None or ticks == start_ticks)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
