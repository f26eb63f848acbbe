"""What the benchmarks share about the machine and their processes: the CPU and its ISA flags
(printed beside every figure), resident memory, cores kept busy, time budgets, medians, comma-list
flags, the peers' packages, and the result file a worker process hands back to its driver."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time


ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")


def cpu_info() -> dict:
    """Model name and the ISA flags that decide float32/bf16 speed, from /proc/cpuinfo."""
    model, flags = platform.processor() or "?", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    model = value.strip()
                elif key == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return {"model": model, "flags": {name: name in flags for name in ISA_FLAGS}, "cpus": os.cpu_count()}


def isa_note(info: dict) -> str:
    f = info["flags"]
    if f["amx_bf16"]:
        return "AMX-BF16 present: bf16 matmuls have a hardware fast path (oneDNN AMX kernels)."
    if f["avx512_bf16"]:
        return "AVX512_BF16 present (no AMX): bf16 dot products in hardware, about 2x float32 at best."
    return ("no AMX, no AVX512_BF16" + ("" if f["avx512f"] else ", no AVX-512") +
            ": bf16 has NO hardware fast path here (it is converted/emulated); bf16 figures "
            "and bf16 targets are not meaningful on this CPU.")


def print_machine() -> dict:
    """Prints the CPU, its ISA flags and what they mean for bf16; returns ``cpu_info()``."""
    info = cpu_info()
    flags = ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in info["flags"].items())
    print(f"CPU: {info['model']}, {info['cpus']} CPUs; ISA: {flags}")
    print(f"ISA note: {isa_note(info)}")
    return info


def rss_mb(field: str = "VmRSS") -> float:
    """This process's VmRSS (current) or VmHWM (peak) in MiB."""
    with open("/proc/self/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


class CpuUsage:
    """Process CPU seconds (all threads) over wall seconds inside `with usage:` blocks: how
    many cores a configuration kept busy (spinning thread pools count as busy)."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.cpu = self.wall = 0.0

    def __enter__(self):
        self._cpu0, self._wall0 = sum(os.times()[:2]), time.monotonic()
        return self

    def __exit__(self, *exc):
        self.cpu += sum(os.times()[:2]) - self._cpu0
        self.wall += time.monotonic() - self._wall0

    def cores_busy(self) -> float:
        return self.cpu / self.wall if self.wall else float("nan")


class Budget:
    """Stops a slow configuration early (at least one warm-up and one timed step)."""

    def __init__(self, minutes: float):
        self.deadline = time.monotonic() + minutes * 60

    def over(self) -> bool:
        return time.monotonic() > self.deadline


def median(values: list[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def comma_list(parser: argparse.ArgumentParser, flag: str, text: str, allowed) -> list[str]:
    """The values of a comma-list flag; a parser error for one not in `allowed`."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    for v in values:
        if v not in allowed:
            parser.error(f"--{flag}: unknown {v!r}, expected some of {', '.join(allowed)}")
    return values


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_VENV = os.path.join(REPO, ".peer-venv")


def peer_python() -> str:
    """The Python that runs the torch peers: $ALBERT_PEER_PYTHON, else ``.peer-venv/bin/python``
    at the repository's top (a venv of its own keeps torch and transformers out of the one the
    tests run in), else this Python."""
    chosen = os.environ.get("ALBERT_PEER_PYTHON")
    if chosen:
        return chosen
    candidate = os.path.join(PEER_VENV, "bin", "python")
    return candidate if os.path.exists(candidate) else sys.executable


def worker_command(torch_side: bool) -> tuple[list[str], dict]:
    """The Python (as a command's start) and environment for a benchmark's worker process: the
    peer's Python for a torch side, with the repository importable (the peer venv does not
    install albert_tf)."""
    if not torch_side:
        return [sys.executable], dict(os.environ)
    path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)
    return [peer_python()], dict(os.environ, PYTHONPATH=path)


def check_peers(parser: argparse.ArgumentParser) -> None:
    """--compare needs torch and transformers in `peer_python()` (benchmarks/requirements.txt)."""
    python = peer_python()
    probe = "import importlib.util as u; print(' '.join(n for n in ('torch', 'transformers') if u.find_spec(n) is None))"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    missing = done.stdout.strip() if done.returncode == 0 else f"a working {python}"
    if missing:
        parser.error(f"--compare needs {missing} in {python}: python3 -m venv .peer-venv && "
                     f".peer-venv/bin/pip install -r benchmarks/requirements.txt")


def write_result(path: str, result: dict) -> None:
    """A worker's result as JSON, written under a temporary name and renamed: the driver reads
    either nothing or the whole file."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(result, f)
    os.replace(path + ".tmp", path)
