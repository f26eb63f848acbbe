"""Whether this machine's CPU computes bfloat16 in hardware, and one warning when it does not.

bf16 is the fast path only where the CPU has bf16 dot products (AVX512_BF16, or AMX on recent
Xeons): there oneDNN's bf16 kernels outrun float32's.  On a CPU with AVX2 alone TensorFlow converts
bf16 in software and the same work runs slower than float32 (an ALBERT-base pretraining step 1.2x
its float32 time on an AVX2-only AMD EPYC; `benchmarks/README.md`).  Nothing is changed for the
user: ``--mixed_precision=bf16`` and ``--serving_precision=bfloat16`` still do what they say, but a
run on such a CPU says once why it is slow.  Devices other than the CPU (GPU, TPU) are never warned about.

The flags come from ``/proc/cpuinfo`` (Linux); where that cannot be read, nothing is known and
nothing is said.
"""
from __future__ import annotations

import functools

from absl import logging

BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo's names for bf16 dot products in hardware
CPUINFO = "/proc/cpuinfo"

_warned: set[str] = set()


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str] | None:
    """The first processor's ISA flags from ``cpuinfo`` (default ``CPUINFO``); None where that file
    cannot be read."""
    return _read_flags(cpuinfo or CPUINFO)


@functools.lru_cache(maxsize=None)
def _read_flags(cpuinfo: str) -> frozenset[str] | None:
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        return None
    return None


def cpu_has_bf16(cpuinfo: str | None = None) -> bool | None:
    """True when the CPU has bf16 dot products (AVX512_BF16 or AMX), False when it has not,
    None when its flags are unknown."""
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return None
    return any(name in flags for name in BF16_FLAGS)


def warn_if_emulated(setting: str, device_type: str = "CPU", cpuinfo: str | None = None) -> bool:
    """Logs one warning per ``setting`` (e.g. "--mixed_precision=bf16") when bf16 work is to run on
    this CPU and the CPU has no bf16 hardware; returns whether it warned now."""
    if device_type.upper() != "CPU" or setting in _warned or cpu_has_bf16(cpuinfo) is not False:
        return False
    _warned.add(setting)
    logging.warning("%s on a CPU without bf16 hardware (no avx512_bf16 or amx_bf16 in %s): TensorFlow "
                    "emulates bf16 here and it runs slower than float32 (fast on CPUs "
                    "with AVX512_BF16 or AMX).", setting, cpuinfo or CPUINFO)
    return True
