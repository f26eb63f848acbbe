"""What this CPU's matmuls can do: GFLOP/s of the ALBERT-base encoder's own dense matmul shapes in
TensorFlow (oneDNN where TF enables it) and in PyTorch, float32 and bf16, and the fastest training
step and inference batch those rates allow.

Issue 12's speed targets are ratios against HuggingFace (training >= 2x, inference >= 1.7x, bf16). A
ratio is bounded by the hardware: if HF already runs near the CPU's matmul rate, no implementation can
be 2x faster. This script measures that bound instead of estimating it from FLOP per cycle.

Shapes (tokens T = batch x sequence): [T, 768] x [768, 768] (Q, K, V, attention output: 4 per layer),
[T, 768] x [768, 3072] and [T, 3072] x [768] (the FFN, 1 each per layer); the per-layer mix weights
them by their FLOPs.  A training step does each forward matmul three times (forward, two gradients);
the two gradient matmuls have transposed operands, timed here too (``x^T dy``, ``dy W^T``).
Attention's batched score/context matmuls (3% of the FLOPs) and everything elementwise are left out,
so the ceilings are optimistic: a real step is slower.

  .venv/bin/python benchmarks/matmul_ceiling.py                   # TF and torch, fp32 and bf16
  .venv/bin/python benchmarks/matmul_ceiling.py --frameworks tf --precisions bf16
Each framework runs in its own process (their thread pools would compete).
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
from harness import comma_list, print_machine, worker_command, write_result  # noqa: E402
from workload import encoder_forward_flop, step_gflop  # noqa: E402

VOCAB, EMBEDDING, HIDDEN, INTERMEDIATE, LAYERS, SEQ = 30000, 128, 768, 3072, 12, 128
# (name, k, n, uses per layer) of a dense layer x[T, k] W[k, n]
DENSE = (("attention HxH", HIDDEN, HIDDEN, 4), ("FFN in HxI", HIDDEN, INTERMEDIATE, 1),
         ("FFN out IxH", INTERMEDIATE, HIDDEN, 1))
# Forward y = x W; backward dx = dy W^T and dW = x^T dy (as a training step computes them).
PASSES = ("forward", "dx", "dW")


def operand_shapes(tokens: int, k: int, n: int, which: str) -> tuple[tuple, tuple, bool, bool]:
    """(a shape, b shape, transpose_a, transpose_b) of one matmul of a dense layer x[T,k] W[k,n]."""
    if which == "forward":
        return (tokens, k), (k, n), False, False
    if which == "dx":  # dy[T,n] W^T -> [T,k]
        return (tokens, n), (k, n), False, True
    return (tokens, k), (tokens, n), True, False  # x^T dy -> [k,n]


def time_tf(args, precision: str, tokens: int) -> dict:
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    dtype = tf.bfloat16 if precision == "bf16" else tf.float32
    rates = {}
    for name, k, n, _ in DENSE:
        for which in PASSES:
            a_shape, b_shape, ta, tb = operand_shapes(tokens, k, n, which)
            a = tf.cast(tf.random.stateless_normal(a_shape, [1, 2]), dtype)
            b = tf.cast(tf.random.stateless_normal(b_shape, [3, 4]), dtype)
            # A graph function, so TF's oneDNN rewrite (_MklMatMul) applies as in the training step.
            matmul = tf.function(lambda a, b, ta=ta, tb=tb: tf.linalg.matmul(a, b, transpose_a=ta, transpose_b=tb))
            # A tf.function call on the CPU returns when its outputs are computed: no copy-out timed.
            rates[f"{name} {which}"] = _rate(lambda: matmul(a, b), 2 * tokens * k * n, args)
    return rates


def time_torch(args, precision: str, tokens: int) -> dict:
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    generator = torch.Generator().manual_seed(0)
    rates = {}
    with torch.inference_mode():
        for name, k, n, _ in DENSE:
            for which in PASSES:
                a_shape, b_shape, ta, tb = operand_shapes(tokens, k, n, which)
                a = torch.randn(a_shape, generator=generator).to(dtype)
                b = torch.randn(b_shape, generator=generator).to(dtype)
                a_op, b_op = (a.t() if ta else a), (b.t() if tb else b)
                rates[f"{name} {which}"] = _rate(lambda: torch.matmul(a_op, b_op), 2 * tokens * k * n, args)
    return rates


def _rate(call, flop: int, args) -> float:
    """GFLOP/s of the fastest of --repeats timed calls after --warmup calls: a ceiling is what the
    hardware does at best; other processes on the machine only ever slow a call down."""
    for _ in range(args.warmup):
        call()
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return flop / min(times) / 1e9


def layer_rate(rates: dict, passes: tuple[str, ...]) -> float:
    """GFLOP/s of one layer's dense matmuls in `passes`, each shape weighted by its FLOPs
    (total FLOP / total time)."""
    flop = seconds = 0.0
    for name, k, n, uses in DENSE:
        for which in passes:
            flop += uses * k * n
            seconds += uses * k * n / rates[f"{name} {which}"]
    return flop / seconds


def best_rates(earlier: dict, new: dict) -> dict:
    """Each shape's higher rate of two rounds' results."""
    return {key: {shape: max(rate, earlier.get(key, {}).get(shape, 0.0)) for shape, rate in rates.items()}
            for key, rates in new.items()}


def worker_main(args) -> None:
    timer = time_tf if args.worker == "tf" else time_torch
    result = {f"{p} T={t}": timer(args, p, t) for p in args.precision_list for t in (args.train_tokens,
                                                                                       args.infer_tokens)}
    write_result(args.result, result)


def run_worker(args, framework: str, tmp: str) -> dict | None:
    print(f"== {framework} (load {os.getloadavg()[0]:.1f})", flush=True)
    result_path = os.path.join(tmp, framework + ".json")
    python, env = worker_command(framework == "torch")
    command = [*python, os.path.abspath(__file__), "--worker", framework, "--result", result_path,
               "--precisions", args.precisions]
    for name in ("threads", "warmup", "repeats", "train_tokens", "infer_tokens"):
        command += [f"--{name}", str(getattr(args, name))]
    env["TF_CPP_MIN_LOG_LEVEL"] = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(command, env=env, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        print(f"  FAILED (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return None
    with open(result_path, encoding="utf-8") as f:
        return json.load(f)


def add_ceiling_flags(parser: argparse.ArgumentParser, what: str) -> None:
    """``--ceiling`` (print ``what`` as a share of the step time TF's matmul ceiling allows, timed at the
    timed steps' mean rows) and ``--ceiling_rounds``, for the benchmarks that time a step of their own."""
    parser.add_argument("--ceiling", action="store_true",
                        help=f"also time TF's dense matmuls at the timed steps' mean rows and print {what} as a "
                             "share of the step time they allow")
    parser.add_argument("--ceiling_rounds", type=int, default=2,
                        help="time the ceiling this many times and keep each shape's best rate (other processes "
                             "on the machine only ever slow a round down)")


def tf_training_rate(precision: str, rows: int, tmp: str, threads: int = 0, rounds: int = 1) -> float | None:
    """TensorFlow's dense-matmul rate (GFLOP/s) of a training step whose matmuls have ``rows`` rows:
    the tf worker's fastest of 25 calls per shape (over ``rounds`` workers), each shape weighted by its
    FLOPs; None if every round failed.  The benchmarks that print a step's share of the ceiling time it
    with this, in their own run."""
    settings = argparse.Namespace(precisions=precision, threads=threads, warmup=3, repeats=25,
                                  train_tokens=rows, infer_tokens=rows)
    best: dict = {}
    for _ in range(rounds):
        print(f"\n== ceiling {precision}: TF's dense matmuls at {rows} rows", end=" ", flush=True)
        result = run_worker(settings, "tf", tmp)
        if result:
            best = best_rates(best, result)
    return layer_rate(best[f"{precision} T={rows}"], PASSES) if best else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frameworks", default="tf,torch", help="comma list of tf, torch")
    parser.add_argument("--precisions", default="fp32,bf16", help="comma list of fp32, bf16")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads; 0: the frameworks' defaults")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the frameworks' workers this many times, alternating, and keep each shape's "
                             "best rate (a busy neighbour only ever slows a round down)")
    parser.add_argument("--train_tokens", type=int, default=8 * 128,
                        help="tokens of a training batch (pretraining_step.py: batch 8 x seq 128)")
    parser.add_argument("--infer_tokens", type=int, default=32 * 128,
                        help="tokens of an inference batch (inference.py: batch 32 x seq 128)")
    parser.add_argument("--worker", choices=("tf", "torch"), help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.precision_list = comma_list(parser, "precisions", args.precisions, ("fp32", "bf16"))
    if args.worker:
        worker_main(args)
        return
    frameworks = comma_list(parser, "frameworks", args.frameworks, ("tf", "torch"))
    print_machine()
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="albert_matmul_") as tmp:
        for _ in range(args.rounds):
            for fw in frameworks:
                result = run_worker(args, fw, tmp)
                if result:
                    results[fw] = best_rates(results.get(fw, {}), result)

    print("\nGFLOP/s of the encoder's dense matmuls (fastest of "
          f"{args.repeats} calls in each of {args.rounds} round(s); T = tokens of the batch)")
    header = f"{'framework':<9} {'prec':<5} {'T':>5} " + " ".join(f"{n + ' ' + w:>22}" for n, *_ in DENSE
                                                                  for w in PASSES)
    print(header)
    print("-" * len(header))
    for fw, result in results.items():
        for key, rates in result.items():
            precision, tokens = key.split(" T=")
            print(f"{fw:<9} {precision:<5} {tokens:>5} " + " ".join(f"{rates[n + ' ' + w]:>22.0f}"
                                                                   for n, *_ in DENSE for w in PASSES))

    train_gflop = step_gflop(VOCAB, EMBEDDING, HIDDEN, LAYERS, INTERMEDIATE, args.train_tokens // SEQ, SEQ, 20)
    infer_gflop = encoder_forward_flop(EMBEDDING, HIDDEN, LAYERS, INTERMEDIATE, args.infer_tokens // SEQ, SEQ) / 1e9
    print(f"\nCeilings: every FLOP at the dense-matmul rate above (training step {train_gflop:.1f} GFLOP at "
          f"batch {args.train_tokens // SEQ} x {SEQ}; inference batch {infer_gflop:.1f} GFLOP at batch "
          f"{args.infer_tokens // SEQ} x {SEQ}). Real runs are slower: elementwise work, softmax, LayerNorm.")
    print(f"{'framework':<9} {'prec':<5} {'train GFLOP/s':>13} {'min s/step':>10} {'infer GFLOP/s':>13} "
          f"{'min s/batch':>11}")
    for fw, result in results.items():
        for precision in args.precision_list:
            train = layer_rate(result[f"{precision} T={args.train_tokens}"], PASSES)
            infer = layer_rate(result[f"{precision} T={args.infer_tokens}"], ("forward",))
            print(f"{fw:<9} {precision:<5} {train:>13.0f} {train_gflop / train:>10.2f} {infer:>13.0f} "
                  f"{infer_gflop / infer:>11.2f}")
    print("Compare with pretraining_step.py / inference.py on the same machine: a target of k x HF needs "
          "HF's s/step / k, which must not be below the min s/step of the faster framework.")


if __name__ == "__main__":
    main()
