"""Self-attention layouts for ALBERT-base (batch 8, seq 128, H 768, 12 heads): forward +
backward time, op counts and bytes moved of each, in fp32 or bf16, interleaved so that a
shared machine's load hits all variants alike.

Each step runs the attention --layers times with the same weights (as ALBERT's layers
share them) and differentiates through all of them.  Variants (same arithmetic, different
kernels):
  separate_einsum  three [H,H] matmuls; scores/context by einsum on [B,S,N,D] (before)
  fused_einsum     one [H,3H] matmul on query/key/value kernels concatenated at every call
  fused_bmm        the same, then one transpose to [3,B,N,S,D], batched matmuls
  separate_bmm     three matmuls, transposes to [B,N,S,D], scores/context as batched matmuls
  hoisted_bmm      fused [H,3H] kernel concatenated (and cast) once per step, tf.split into
                   q/k/v, batched matmuls

  .venv/bin/python benchmarks/attention_layout.py --precision fp32 --rounds 5
  TF_ENABLE_ONEDNN_OPTS=1 .venv/bin/python benchmarks/attention_layout.py   # oneDNN kernels
"""
from __future__ import annotations

from albert_tf.startup import quiet_startup  # before TensorFlow: hides its start-up lines

quiet_startup()

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

B, S, H, N = 8, 128, 768, 12
D = H // N


def make_variants(tf, dtype):
    scale = 1.0 / math.sqrt(D)

    def heads(t):  # [B,S,H] -> [B,S,N,D]
        return tf.reshape(t, [B, S, N, D])

    def finish(context, w):  # context [B,S,H] in dtype -> output dense, f32
        return tf.cast(tf.matmul(tf.reshape(context, [B * S, H]), tf.cast(w["o"], dtype)), tf.float32)

    def softmax(scores, adder):
        return tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32) * scale + adder, axis=-1), dtype)

    def separate_einsum(x, adder, w):
        x16 = tf.cast(tf.reshape(x, [B * S, H]), dtype)
        q, k, v = (heads(tf.matmul(x16, tf.cast(w[n], dtype))) for n in "qkv")
        probs = softmax(tf.einsum("bfnd,btnd->bnft", q, k), adder)
        context = tf.einsum("bnft,btnd->bfnd", probs, v)
        return finish(tf.reshape(context, [B, S, H]), w)

    def fused_qkv(x, w):
        x16 = tf.cast(tf.reshape(x, [B * S, H]), dtype)
        kernel = tf.cast(tf.concat([w["q"], w["k"], w["v"]], axis=1), dtype)
        return tf.matmul(x16, kernel)  # [B*S, 3H]

    def fused_einsum(x, adder, w):
        qkv = tf.reshape(fused_qkv(x, w), [B, S, 3, N, D])
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        probs = softmax(tf.einsum("bfnd,btnd->bnft", q, k), adder)
        context = tf.einsum("bnft,btnd->bfnd", probs, v)
        return finish(tf.reshape(context, [B, S, H]), w)

    def fused_bmm(x, adder, w):
        qkv = tf.transpose(tf.reshape(fused_qkv(x, w), [B, S, 3, N, D]), [2, 0, 3, 1, 4])  # [3,B,N,S,D]
        q, k, v = qkv[0], qkv[1], qkv[2]
        probs = softmax(tf.matmul(q, k, transpose_b=True), adder)
        context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])  # [B,S,N,D]
        return finish(tf.reshape(context, [B, S, H]), w)

    def separate_bmm(x, adder, w):
        x16 = tf.cast(tf.reshape(x, [B * S, H]), dtype)
        q, k, v = (tf.transpose(heads(tf.matmul(x16, tf.cast(w[n], dtype))), [0, 2, 1, 3]) for n in "qkv")
        probs = softmax(tf.matmul(q, k, transpose_b=True), adder)
        context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])
        return finish(tf.reshape(context, [B, S, H]), w)

    def hoisted_bmm(x, adder, w):
        x16 = tf.cast(tf.reshape(x, [B * S, H]), dtype)
        q, k, v = (tf.transpose(heads(t), [0, 2, 1, 3])
                   for t in tf.split(tf.matmul(x16, w["qkv"]), 3, axis=1))
        probs = softmax(tf.matmul(q, k, transpose_b=True), adder)
        context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])
        return finish(tf.reshape(context, [B, S, H]), w)

    return {"separate_einsum": separate_einsum, "fused_einsum": fused_einsum,
            "fused_bmm": fused_bmm, "separate_bmm": separate_bmm, "hoisted_bmm": hoisted_bmm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (median reported)")
    parser.add_argument("--repeats", type=int, default=5, help="forward+backward calls per round and variant")
    parser.add_argument("--layers", type=int, default=4, help="attention calls per step sharing the weights")
    args = parser.parse_args()

    import tensorflow as tf

    from profile_step import graph_volumes

    dtype = tf.bfloat16 if args.precision == "bf16" else tf.float32
    rng = tf.random.Generator.from_seed(1)
    w = {n: tf.Variable(rng.normal([H, H], stddev=0.02)) for n in "qkvo"}
    x = rng.normal([B, S, H])
    adder = tf.zeros([B, 1, 1, S])
    variants = make_variants(tf, dtype)

    def step_fn(name, fn):
        @tf.function
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                weights = dict(w)
                if name == "hoisted_bmm":  # once per step, shared by every layer
                    weights["qkv"] = tf.cast(tf.concat([w["q"], w["k"], w["v"]], axis=1), dtype)
                y = x
                for _ in range(args.layers):
                    y = y + tf.reshape(fn(y, adder, weights), [B, S, H])
                loss = tf.reduce_sum(y ** 2)
            return tape.gradient(loss, [x] + list(w.values()))
        return step

    steps = {name: step_fn(name, fn) for name, fn in variants.items()}
    reference = None
    print(f"{args.precision}, B {B} S {S} H {H} heads {N}, {args.layers} layers sharing weights; "
          f"load {os.getloadavg()[0]:.1f}")
    for name, step in steps.items():
        grads = step(x)
        if reference is None:
            reference = grads
        diff = max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(grads, reference))
        volumes = graph_volumes(step.get_concrete_function(x).graph)
        moved = sum(mb for _, mb in volumes["per_type"].values())
        ops = sum(n for n, _ in volumes["per_type"].values())
        casts = sum(n for n, _ in volumes["casts"].values())
        print(f"  {name:<16} {ops:>4} computing ops, {casts:>3} casts, {moved:>6.0f} MiB moved; "
              f"max |grad - separate_einsum| {diff:.2e}")
    times = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            start = time.perf_counter()
            for _ in range(args.repeats):
                step(x)[0].numpy()
            times[name].append((time.perf_counter() - start) / args.repeats)
    base = statistics.median(times["separate_einsum"])
    print(f"forward+backward ms (median of {args.rounds} rounds of {args.repeats}); load {os.getloadavg()[0]:.1f}")
    for name, values in times.items():
        med = statistics.median(values)
        print(f"  {name:<16} {1000 * med:7.2f} ms  ({base / med:.2f}x separate_einsum)")


if __name__ == "__main__":
    main()
