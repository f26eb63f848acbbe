"""Benchmark one ALBERT pretraining step: examples/s, GFLOP/s, peak RSS, RSS growth.

Workload (issue 4): ALBERT-base (V 30000, E 128, H 768, 12 layers, 12 heads, I 3072;
``AlbertConfig.preset("base", 2)``, no dropout), batch 8, sequence 128, 20 masked
positions, MLM + SOP loss, LAMB, forward + backward + clip + update.

What is timed ("ours"): the project's real training loop.  ``albert_tf.training.Trainer``
runs ``albert_tf.pretraining.pretraining_task`` on synthetic TFRecords (written with
``ExampleSerializer`` to a temp dir) with ``create_optimizer("lamb")``; every call of
``Trainer.train()`` runs one in-graph loop of ``--chunk`` steps and returns its
``steps_per_second``, measured by the Trainer around that loop (checkpoint writing and
restoring between calls is outside the figure).  Warm-up (tracing, XLA compilation) is
``--warmup`` steps in a first call.

"HF" (``--compare``): HuggingFace transformers' PyTorch ``AlbertForPreTraining`` with the
albert-base-v2 config built locally (no hub access), same batch, MLM labels at the same
20 positions (HF still computes logits at all 128), SOP labels, ``torch.optim.AdamW``
(transformers has no LAMB; its update is a few % of a step), clip to norm 1.0;
float32, and bf16 via ``torch.autocast("cpu", torch.bfloat16)``.

Each configuration runs in its own subprocess (Keras precision policies are global;
peak RSS is per process).  GFLOP/s use the same useful work for both sides: matmul
FLOPs of the forward pass times 3 (backward = 2x forward), MLM on the gathered
positions only (``step_gflop``; about 541 GFLOP for this workload).

The machine may be shared: compare ours/HF within one run, as ratios, and repeat.
``--ceiling`` also measures, in every round next to ours, TensorFlow's dense-matmul rate at this
batch's shapes (``matmul_ceiling.py``'s tf worker, same precision) and prints ours as a share of
the step time those rates allow (issue 33's "% of the matmul ceiling"), per round: the machine's
speed drifts between runs, a ratio of two runs minutes apart does not.
bf16 only has a fast path on CPUs with AMX or AVX512_BF16: the detected ISA is printed.

  .venv/bin/python benchmarks/pretraining_step.py --compare                 # full run
  .venv/bin/python benchmarks/pretraining_step.py --compare --precisions fp32 --xla off \\
      --steps 10 --leak_steps 40                                              # quicker
Peers: python3 -m venv .peer-venv && .peer-venv/bin/pip install -r benchmarks/requirements.txt
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Budget, CpuUsage, check_peers, comma_list, isa_note, median, print_machine, worker_command,  # noqa: E402
                     rss_mb, write_result)
from workload import XLA_SETTINGS, build_trainer, hf_train_step, step_gflop, train_more  # noqa: E402

PRECISIONS = ("fp32", "bf16")
ONEDNN = {"default": None, "on": "1", "off": "0"}  # -> TF_ENABLE_ONEDNN_OPTS


def linear_slope(ys: list[float], step: float) -> float:
    """Least-squares slope of ys (sampled every `step` steps) per step."""
    n = len(ys)
    if n < 2:
        return 0.0
    xs = [i * step for i in range(n)]
    mx, my = sum(xs) / n, sum(ys) / n
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


# ---------------------------------------------------------------- ours (in a subprocess)


def run_ours(args, tmp: str) -> dict:
    """One configuration of ours; data, checkpoints and summaries go to `tmp`."""
    import tensorflow as tf

    trainer, policy = build_trainer(args, tmp)
    budget = Budget(args.max_minutes)
    usage = CpuUsage()

    def train(steps: int) -> float:
        with usage:
            return train_more(trainer, steps)

    t0 = time.monotonic()
    first = train(1)  # tracing + (XLA) compilation + one step
    warmup_steps = 1
    if args.warmup > 1 and not budget.over():
        train(args.warmup - 1)
        warmup_steps = args.warmup
    warmup_seconds = time.monotonic() - t0
    print(f"  warm-up: {warmup_steps} steps in {warmup_seconds:.1f} s (first call {first:.1f} s incl. tracing)",
          flush=True)

    chunk_times: list[tuple[int, float]] = []  # (steps, seconds per step)
    usage.reset()
    done = 0
    while done < args.steps:
        n = min(args.chunk, args.steps - done)
        chunk_times.append((n, train(n)))
        done += n
        print(f"  timed: {done}/{args.steps} steps, {chunk_times[-1][1]:.2f} s/step", flush=True)
        if budget.over() and done < args.steps:
            print(f"  --max_minutes reached: stopping after {done} timed steps", flush=True)
            break
    peak_after_timing = rss_mb("VmHWM")
    # What the resident pages are when timing ends: the step's own (anonymous) and the mapped files
    # (TensorFlow's libraries: their resident share varies with what the page cache holds).
    rss_parts = {"anon": rss_mb("RssAnon"), "file": rss_mb("RssFile")}
    cores_busy = usage.cores_busy()

    leak = measure_leak(train, args.leak_steps, args.leak_chunk, Budget(args.max_minutes))
    return {
        "impl": "ours", "precision": args.precision, "policy": policy,
        "xla": args.xla if trainer.xla_compiled == (args.xla != "off") else f"{args.xla}->off",
        "onednn": onednn_enabled(), "cores_busy": cores_busy,
        "warmup_steps": warmup_steps, "timed_steps": done,
        "seconds_per_step": sum(n * s for n, s in chunk_times) / done,
        "best_seconds_per_step": min(s for _, s in chunk_times),
        "peak_rss_mb": peak_after_timing, "peak_rss_mb_all": rss_mb("VmHWM"), "rss_parts_mb": rss_parts, **leak,
        "versions": {"tensorflow": tf.__version__},
        "threads": {"intra_op": tf.config.threading.get_intra_op_parallelism_threads(),
                    "inter_op": tf.config.threading.get_inter_op_parallelism_threads()},
    }


def onednn_enabled() -> str:
    """Whether this TensorFlow process runs its oneDNN kernels ("on"/"off")."""
    try:
        from tensorflow.python.util import _pywrap_util_port  # no public API for this
        return "on" if _pywrap_util_port.IsMklEnabled() else "off"
    except (ImportError, AttributeError):
        return "?"


class RssSampler:
    """Samples this process's VmRSS every `interval` s in a thread: the lowest and highest
    value since the last `reset()` (a single reading after a step says little: the
    activations of a step come and go, and the allocator returns memory when it likes)."""

    def __init__(self, interval: float = 0.05):
        import threading

        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.reset()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            value = rss_mb()
            with self._lock:
                self._low, self._high = min(self._low, value), max(self._high, value)

    def reset(self) -> None:
        value = rss_mb()
        with self._lock:
            self._low = self._high = value

    def window(self) -> tuple[float, float]:
        value = rss_mb()
        with self._lock:
            return min(self._low, value), max(self._high, value)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def measure_leak(train, leak_steps: int, leak_chunk: int, budget: Budget) -> dict:
    """Runs `leak_steps` steps in loops of `leak_chunk`; per loop the highest and lowest RSS.

    A leak shows as a rising peak (every step allocates the same activations, so the peak
    of a loop is stable otherwise) and a rising floor.  Growth = median peak of the second
    half of the loops - median peak of the first half (single loops jump by +-100 MiB).
    Past the time budget it stops early (after at least two loops).
    """
    if leak_steps <= 0:
        return {"leak_steps": 0}
    sampler = RssSampler()
    peaks, floors = [], []
    done = 0
    try:
        while done < leak_steps:
            n = min(leak_chunk, leak_steps - done)
            sampler.reset()
            train(n)
            done += n
            low, high = sampler.window()
            peaks.append(round(high))
            floors.append(round(low))
            print(f"  RSS after {done}/{leak_steps} steps: peak {high:.0f} MiB, floor {low:.0f} MiB", flush=True)
            if budget.over() and len(peaks) >= 2 and done < leak_steps:
                print(f"  --max_minutes reached: RSS run stopped after {done} steps", flush=True)
                break
    finally:
        sampler.close()
    half = len(peaks) // 2
    return {"leak_steps": done, "rss_peaks_mb": peaks, "rss_floors_mb": floors,
            "rss_growth_mb": median(peaks[-half:]) - median(peaks[:half]),
            "rss_slope_mb_per_100": 100 * linear_slope(peaks, leak_chunk)}


# ---------------------------------------------------------------- HF (in a subprocess)


def run_hf(args) -> dict:
    import contextlib

    import numpy as np
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
        torch.set_num_interop_threads(args.threads)
    torch.manual_seed(args.seed)
    config = transformers.AlbertConfig(
        vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12,
        num_attention_heads=12, intermediate_size=3072, hidden_act="gelu_new",
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=512,
        type_vocab_size=2, initializer_range=0.02)  # albert-base-v2
    model = transformers.AlbertForPreTraining(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.00176, weight_decay=0.01, eps=1e-6)

    rng = np.random.default_rng(args.seed)
    b, s, p = args.batch_size, args.seq_length, args.max_predictions
    batches = []
    for _ in range(4):
        labels = np.full([b, s], -100, np.int64)
        for row in range(b):
            positions = rng.choice(np.arange(1, s - 1), p, replace=False)
            labels[row, positions] = rng.integers(5, 30000, p)
        first = rng.integers(s // 4, 3 * s // 4, b)
        batches.append({
            "input_ids": torch.from_numpy(rng.integers(5, 30000, [b, s])),
            "attention_mask": torch.ones([b, s], dtype=torch.long),
            "token_type_ids": torch.from_numpy((np.arange(s)[None, :] >= first[:, None]).astype(np.int64)),
            "labels": torch.from_numpy(labels),
            "sentence_order_label": torch.from_numpy(rng.integers(0, 2, b)),
        })

    def autocast():
        if args.precision == "bf16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    step_index = [0]
    usage = CpuUsage()

    def step() -> float:
        batch = batches[step_index[0] % len(batches)]
        step_index[0] += 1
        start = time.perf_counter()
        with usage:
            hf_train_step(model, optimizer, batch, autocast)
        return time.perf_counter() - start

    budget = Budget(args.max_minutes)
    t0 = time.monotonic()
    warmup_steps = 0
    while warmup_steps < args.warmup:
        step()
        warmup_steps += 1
        if budget.over():
            break
    print(f"  warm-up: {warmup_steps} steps in {time.monotonic() - t0:.1f} s", flush=True)
    times = []
    usage.reset()
    while len(times) < args.steps:
        times.append(step())
        if len(times) % args.chunk == 0 or len(times) == args.steps:
            print(f"  timed: {len(times)}/{args.steps} steps, last {times[-1]:.2f} s/step", flush=True)
        if budget.over() and len(times) < args.steps:
            print(f"  --max_minutes reached: stopping after {len(times)} timed steps", flush=True)
            break
    best_chunk = min(sum(times[i:i + args.chunk]) / len(times[i:i + args.chunk])
                     for i in range(0, len(times), args.chunk))
    return {
        "impl": "hf", "precision": args.precision, "xla": "-", "onednn": "-",
        "cores_busy": usage.cores_busy(),
        "warmup_steps": warmup_steps, "timed_steps": len(times),
        "seconds_per_step": sum(times) / len(times), "best_seconds_per_step": best_chunk,
        "peak_rss_mb": rss_mb("VmHWM"), "peak_rss_mb_all": rss_mb("VmHWM"), "leak_steps": 0,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "threads": {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()},
        "attention": getattr(model.config, "_attn_implementation", "?"),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


# ---------------------------------------------------------------- driver
def worker_main(args) -> None:
    if args.worker == "hf":
        result = run_hf(args)
    else:
        with tempfile.TemporaryDirectory(prefix="albert_bench_") as tmp:
            result = run_ours(args, tmp)
    write_result(args.result, result)


def run_config(args, worker: str, precision: str, xla: str, tmp: str, onednn: str,
               round_index: int) -> dict | None:
    label = f"{worker} {precision}" + (f" XLA {xla} oneDNN {onednn}" if worker == "ours" else "")
    print(f"\n== round {round_index + 1}/{args.rounds}: {label}  (load {os.getloadavg()[0]:.1f})", flush=True)
    name = f"{worker}-{precision}-{xla}-{onednn}-{round_index}"
    result_path = os.path.join(tmp, name + ".json")
    log_path = os.path.join(tmp, name + ".log")
    python, env = worker_command(worker == "hf")
    command = [*python, os.path.abspath(__file__), "--worker", worker, "--precision", precision,
               "--xla_setting", xla, "--onednn_setting", onednn, "--result", result_path]
    for name in ("steps", "warmup", "chunk", "leak_chunk", "batch_size", "seq_length",
                 "max_predictions", "max_minutes", "seed", "threads"):
        command += [f"--{name}", str(getattr(args, name))]
    # The RSS-growth run (long) only in the first round.
    command += ["--leak_steps", str(args.leak_steps if round_index == 0 and worker == "ours" else 0)]
    env["TF_CPP_MIN_LOG_LEVEL"] = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")
    if ONEDNN.get(onednn) is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = ONEDNN[onednn]
    # Hard stop well past the budget: warm-up + timed + leak each get --max_minutes.
    timeout = 3 * args.max_minutes * 60 + 600
    start = time.monotonic()
    with open(log_path, "w", encoding="utf-8") as log:
        try:
            proc = subprocess.run(command, stdout=None, stderr=log, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            print(f"  timed out after {timeout / 60:.0f} min; log: {log_path}")
            return None
    if proc.returncode != 0 or not os.path.exists(result_path):
        with open(log_path, encoding="utf-8") as f:
            tail = f.read()[-3000:]
        print(f"  FAILED (exit {proc.returncode}):\n{tail}")
        return None
    with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    result["wall_seconds"] = time.monotonic() - start
    return result


def _key(r: dict) -> tuple:
    return (r["impl"], r["precision"], r["xla"], r["onednn"])


def print_table(rows: list[dict], args, gflop: float) -> None:
    """One line per configuration: medians over rounds; ours/HF from the same round."""
    configs: dict[tuple, list[dict]] = {}
    for r in rows:
        configs.setdefault(_key(r), []).append(r)
    hf_by_round = {(r["round"], r["precision"]): r for r in rows if r["impl"] == "hf"}
    print(f"\nALBERT-base pretraining step, batch {args.batch_size}, seq {args.seq_length}, "
          f"{args.max_predictions} predictions; {gflop:.1f} GFLOP/step (useful work, both sides); "
          f"{args.rounds} round(s)")
    header = (f"{'impl':<5} {'prec':<5} {'XLA':<7} {'oneDNN':<6} {'steps':>6} {'s/step':>7} {'ex/s':>6} "
              f"{'best ex/s':>9} {'GFLOP/s':>8} {'cores':>5} {'ours/HF':>7} {'peak RSS MB':>11} {'RSS growth MB':>16}")
    print(header)
    print("-" * len(header))
    for key, runs in configs.items():
        impl, precision, xla, onednn = key
        sps = median([r["seconds_per_step"] for r in runs])
        best = args.batch_size / min(r["best_seconds_per_step"] for r in runs)
        ratios = [hf_by_round[(r["round"], precision)]["seconds_per_step"] / r["seconds_per_step"]
                  for r in runs if impl == "ours" and (r["round"], precision) in hf_by_round]
        ratio = f"{median(ratios):.2f}x" if ratios else "-"
        leaks = [r for r in runs if r.get("leak_steps")]
        growth = (f"{max(r['rss_growth_mb'] for r in leaks):+.0f}/{leaks[0]['leak_steps']} st" if leaks else "-")
        steps = f"{runs[0]['warmup_steps']}+{runs[0]['timed_steps']}"
        print(f"{impl:<5} {precision:<5} {xla:<7} {onednn:<6} {steps:>6} {sps:>7.2f} {args.batch_size / sps:>6.2f} "
              f"{best:>9.2f} {gflop / sps:>8.1f} {median([r['cores_busy'] for r in runs]):>5.2f} {ratio:>7} "
              f"{max(r['peak_rss_mb'] for r in runs):>11.0f} "
              f"{growth:>16}")
    print(f"steps: warm-up + timed (per round).  s/step, ex/s: median over rounds of the mean over the timed "
          f"steps;\nbest ex/s: fastest loop of {args.chunk} steps.  cores: process CPU s / wall s while timing "
          "(ours: includes the checkpoint written after each loop).  ours/HF: HF s/step / ours s/step at the "
          "same precision in the same round (> 1: ours faster), median over rounds.\n"
          "Targets (issue 4, set for an AMX CPU): fp32 >= 1.2x HF fp32, bf16 >= 2x HF bf16.\n"
          f"RSS growth (RSS run of --leak_steps): median peak RSS of the loops of {args.leak_chunk} steps in its "
          "second half minus that in its first half.")
    if args.rounds > 1:
        for key, runs in configs.items():
            if key[0] == "ours":
                per_round = [f"{hf_by_round[(r['round'], key[1])]['seconds_per_step'] / r['seconds_per_step']:.2f}"
                             for r in runs if (r["round"], key[1]) in hf_by_round]
                print(f"ours/HF per round, {key[1]} XLA {key[2]} oneDNN {key[3]}: {', '.join(per_round)}")
    for r in rows:
        if r.get("rss_parts_mb"):
            print(f"RSS ours {r['precision']} XLA {r['xla']} oneDNN {r['onednn']} (round {r['round'] + 1}) when timing "
                  f"ended: {r['rss_parts_mb']['anon']:.0f} MiB anonymous + {r['rss_parts_mb']['file']:.0f} MiB of "
                  f"mapped files (peak {r['peak_rss_mb']:.0f})")
    for r in rows:
        if r.get("leak_steps"):
            print(f"RSS ours {r['precision']} XLA {r['xla']} oneDNN {r['onednn']} (round {r['round']}), per loop "
                  f"of {args.leak_chunk} steps: peaks {r['rss_peaks_mb']} MiB (slope "
                  f"{r['rss_slope_mb_per_100']:+.1f} MiB/100 steps), floors {r['rss_floors_mb']} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", default="fp32,bf16", help="comma list of fp32, bf16")
    parser.add_argument("--xla", default="off,on",
                        help="comma list of off, on, force (ours only): on = --enable_xla, which the loop "
                             "ignores for bf16 on CPU (shown as on->off); force = --enable_xla=force")
    parser.add_argument("--onednn", default="default",
                        help="comma list of default, on, off: TF_ENABLE_ONEDNN_OPTS for ours (TF turns oneDNN "
                             "on by default only on CPUs with AVX-512 VNNI/BF16 or AMX)")
    parser.add_argument("--compare", action="store_true", help="also run HF transformers' PyTorch ALBERT")
    parser.add_argument("--ceiling", action="store_true",
                        help="also time TF's dense matmuls at these shapes in every round (matmul_ceiling.py) "
                             "and print ours as a share of that ceiling")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat every configuration this many times (medians; ratios per round)")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per configuration")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up steps (tracing, compilation)")
    parser.add_argument("--chunk", type=int, default=5, help="steps per timed Trainer loop")
    parser.add_argument("--leak_steps", type=int, default=200, help="steps of the RSS-growth run (0: skip)")
    parser.add_argument("--leak_chunk", type=int, default=20, help="RSS is sampled every this many steps")
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op (and inter-op) threads of both frameworks; 0: their defaults. "
                             "--threads 1 compares per-core efficiency, which a busy machine disturbs least")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--max_predictions", type=int, default=20)
    parser.add_argument("--max_minutes", type=float, default=30.0,
                        help="time budget per configuration for warm-up + timing, and again for the RSS run: "
                             "past it, stop early (at least 1 warm-up and 1 timed step; 2 RSS loops). For bf16 "
                             "on CPUs without bf16 hardware, where HF takes minutes per step")
    parser.add_argument("--seed", type=int, default=12345)
    # Internal: one configuration in this process.
    parser.add_argument("--worker", choices=("ours", "hf"), help=argparse.SUPPRESS)
    parser.add_argument("--precision", choices=PRECISIONS, help=argparse.SUPPRESS)
    parser.add_argument("--xla_setting", dest="xla_setting", default="off", help=argparse.SUPPRESS)
    parser.add_argument("--onednn_setting", default="default", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("rounds", "steps", "warmup", "chunk", "leak_chunk", "batch_size", "seq_length", "max_predictions"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")

    if args.worker:
        args.xla = args.xla_setting
        worker_main(args)
        return

    precisions = comma_list(parser, "precisions", args.precisions, PRECISIONS)
    xlas = comma_list(parser, "xla", args.xla, XLA_SETTINGS)
    onednns = comma_list(parser, "onednn", args.onednn, ONEDNN)
    if args.compare:
        check_peers(parser)

    info = print_machine()
    gflop = step_gflop(30000, 128, 768, 12, 3072, args.batch_size, args.seq_length, args.max_predictions)
    print(f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())} "
          "(other processes share these cores: read ratios, not absolute figures)")
    rows, ceilings = [], []
    with tempfile.TemporaryDirectory(prefix="albert_bench_runs_") as tmp:
        # Per precision: ours and HF close in time, so that their ratio sees the same load;
        # the order flips every round.
        for round_index in range(args.rounds):
            for precision in precisions:
                jobs = [("ours", precision, xla, onednn) for onednn in onednns for xla in xlas]
                if args.compare:
                    jobs.append(("hf", precision, "-", "-"))
                if args.ceiling:
                    jobs.insert(1 if len(jobs) > 1 else 0, ("ceiling", precision, "-", "-"))
                if round_index % 2:
                    jobs.reverse()
                for worker, prec, xla, onednn in jobs:
                    if worker == "ceiling":
                        ceilings.append((round_index, prec, ceiling_gflop_per_s(args, prec, tmp)))
                        continue
                    result = run_config(args, worker, prec, xla, tmp, onednn, round_index)
                    if result:
                        result["round"] = round_index
                        rows.append(result)
    print(f"\nload average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    versions = {}
    for r in rows:
        versions.update(r["versions"])
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) +
          "; threads: " + ", ".join(f"{r['impl']} {r['threads']}" for r in rows[:1] + [
              r for r in rows if r["impl"] == "hf"][:1]))
    for r in rows:
        if r["impl"] == "hf":
            print(f"HF attention implementation: {r['attention']}, torch CPU capability: {r['cpu_capability']}")
            break
    print_table(rows, args, gflop)
    print_ceiling_shares(rows, ceilings, gflop)
    print(f"ISA: {isa_note(info)}")


def ceiling_gflop_per_s(args, precision: str, tmp: str) -> float | None:
    """TensorFlow's dense-matmul rate for a training step at this batch's shapes, or None if it failed."""
    import matmul_ceiling

    return matmul_ceiling.tf_training_rate(precision, args.batch_size * args.seq_length, tmp, args.threads)


def print_ceiling_shares(rows: list[dict], ceilings: list, gflop: float) -> None:
    """Per round and precision: TF's matmul ceiling, the step time it allows, and ours as a share of it."""
    for round_index, precision, rate in ceilings:
        if rate is None:
            continue
        ours = [r for r in rows if r["impl"] == "ours" and r["round"] == round_index and r["precision"] == precision]
        for r in ours:
            print(f"round {round_index + 1}, {precision} XLA {r['xla']} oneDNN {r['onednn']}: TF's matmul ceiling "
                  f"{rate:.0f} GFLOP/s = {gflop / rate:.3f} s/step; ours {r['seconds_per_step']:.3f} s/step = "
                  f"{100 * gflop / rate / r['seconds_per_step']:.0f}% of it")


if __name__ == "__main__":
    main()
