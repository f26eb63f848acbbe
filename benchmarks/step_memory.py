"""What one ALBERT-base pretraining step holds in memory: the peak of live tensors, and
(``--at_peak``) which ops allocated the tensors alive at that peak.

The step is the one ``pretraining_step.py`` times (same Trainer, data, optimizer, workload).
TensorFlow's CPU allocator is switched to its BFC allocator (``TF_CPU_ALLOCATOR_USE_BFC``,
set here before TensorFlow starts), whose statistics give the peak bytes held by tensors
in each step: unlike peak RSS it leaves out TensorFlow's own ~650 MiB (libraries, runtime,
the built model's Python side) and the C allocator's slack, so it moves with the model's
code and not with the machine's load.  ``--at_peak`` profiles one step and prints the live
allocations at its peak, grouped by the op that allocated them (in-place ops reuse their
input's buffer, so a tensor is named by the first op of its chain).

  .venv/bin/python benchmarks/step_memory.py --precision bf16
  .venv/bin/python benchmarks/step_memory.py --precision bf16 --at_peak --top 25
"""
from __future__ import annotations

import os

os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"  # before TensorFlow: its allocator's statistics

from albert_tf.startup import quiet_startup  # noqa: E402 - hides TensorFlow's start-up lines

quiet_startup()

import argparse  # noqa: E402
import collections  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import cpu_info, isa_note, rss_mb  # noqa: E402
from workload import add_step_flags, build_trainer, train_more  # noqa: E402
from profile_step import load_xspace  # noqa: E402

MIB = 2**20


def memory_events(logdir: str) -> list[tuple[int, bool, dict]]:
    """(time in ps, is allocation, stats) of every allocator event in the profile under `logdir`."""
    space = load_xspace(logdir)
    events = []
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        stat_names = {key: meta.name for key, meta in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                kind = names.get(event.metadata_id, "")
                if kind not in ("MemoryAllocation", "MemoryDeallocation"):
                    continue
                stats = {}
                for stat in event.stats:
                    value = stat.str_value if stat.HasField("str_value") else (
                        stat_names.get(stat.ref_value) if stat.HasField("ref_value") else
                        stat.int64_value if stat.HasField("int64_value") else stat.uint64_value)
                    stats[stat_names.get(stat.metadata_id, "")] = value
                events.append((line.timestamp_ns * 1000 + event.offset_ps, kind == "MemoryAllocation", stats))
    events.sort(key=lambda e: e[0])
    return events


def live_at_peak(events) -> tuple[float, list[dict]]:
    """Bytes in use at the allocator's peak, and the allocations alive then."""
    live: dict = {}
    best, best_live = -1, []
    for _, allocation, stats in events:
        if allocation:
            live[stats.get("addr")] = stats
        else:
            live.pop(stats.get("addr"), None)
        if stats.get("bytes_allocated", 0) > best:
            best, best_live = stats["bytes_allocated"], list(live.values())
    return best, best_live


def print_at_peak(events, top: int) -> None:
    peak, live = live_at_peak(events)
    groups: dict = collections.defaultdict(lambda: [0, 0])
    for stats in live:
        # One row per op of the model's code, whichever layer or loop iteration ran it.
        op = re.sub(r"_\d+(?=/|$)", "", str(stats.get("tf_op") or "?"))
        op = op.replace("while/body/_1/while/", "").replace("albert_pretrainer/albert/", "")
        dtype = {1: "f32", 14: "bf16", 3: "i32", 9: "i64"}.get(stats.get("data_type"), str(stats.get("data_type")))
        groups[(op, dtype)][0] += 1
        groups[(op, dtype)][1] += stats.get("allocation_bytes", 0)
    print(f"\nlive allocations at the profiled step's peak ({peak / MIB:.0f} MiB), by allocating op:")
    print(f"  {'MiB':>7} {'count':>5}  op (dtype)")
    for (op, dtype), (count, size) in sorted(groups.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {size / MIB:7.1f} {count:5d}  {op[-100:]} ({dtype})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--steps", type=int, default=4, help="measured steps (after one warm-up step)")
    parser.add_argument("--at_peak", action="store_true", help="profile one more step: what is alive at its peak")
    parser.add_argument("--top", type=int, default=20, help="rows of the --at_peak table")
    add_step_flags(parser)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    args.xla = "off"

    import tensorflow as tf

    info = cpu_info()
    print(f"CPU: {info['model']}; {isa_note(info)}")
    with tempfile.TemporaryDirectory(prefix="albert_memory_") as tmp:
        trainer, policy = build_trainer(args, tmp)
        train_more(trainer, 1)
        in_use = tf.config.experimental.get_memory_info("CPU:0")["current"] / MIB
        peaks, times = [], []
        for _ in range(args.steps):
            tf.config.experimental.reset_memory_stats("CPU:0")
            times.append(train_more(trainer, 1))
            peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"] / MIB)
        print(f"policy {policy}; tensors held between steps (weights, optimizer slots): {in_use:.0f} MiB")
        print(f"peak of live tensors per step: {', '.join(f'{p:.0f}' for p in peaks)} MiB "
              f"(median {sorted(peaks)[len(peaks) // 2]:.0f}); s/step {', '.join(f'{t:.2f}' for t in times)}")
        print(f"process peak RSS (VmHWM): {rss_mb('VmHWM'):.0f} MiB (BFC allocator; pretraining_step.py measures "
              "the default allocator)")
        if args.at_peak:
            logdir = os.path.join(tmp, "profile")
            tf.profiler.experimental.start(logdir)
            try:
                train_more(trainer, 1)
            finally:
                tf.profiler.experimental.stop()
            print_at_peak(memory_events(logdir), args.top)


if __name__ == "__main__":
    main()
