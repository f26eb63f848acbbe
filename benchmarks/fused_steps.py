"""Time the training step's elementwise work as separate TensorFlow ops and as the
XLA-compiled functions the model runs (`albert_tf.fused`).

Two steps at a fine-tuning batch's shapes (ALBERT-base, ``--tokens`` rows = batch x length):
- GELU forward + gradient over [tokens, 3072]: the original's tanh formula as separate ops
  in the compute dtype (what the model ran before), against `gelu_value` +
  `gelu_value_and_grad` (what `albert_tf.modeling.recompute.gelu_dense` runs: the backward
  pass recomputes the output), and torch's fused GELU when torch is installed;
- the attention's scale, mask, softmax and cast to the compute dtype, forward + gradient, over
  [batch, 12, length, length] (``--attention_batch``, ``--attention_length``: a pretraining
  batch's): as separate ops with TensorFlow's derived gradient (what the model ran before)
  against `recompute._attention_probs` + `_attention_probs_grad` (what
  `recompute.attention_context` runs: the backward pass recomputes the probabilities);
- the residual add + LayerNorm forward + gradient over [``--attention_batch`` x length, hidden]
  float32 with a bf16 branch: `layers.layer_norm` (written-out gradient) after a plain add,
  against `layers._residual_norm_value` + `_residual_norm_grad` (what `residual_layer_norm` runs);
- the bias gradient of a bf16 dense layer over [``--tokens``, hidden] and [``--tokens``,
  intermediate]: TensorFlow's `BiasAddGrad` (sums in bfloat16) against
  `albert_tf.modeling.bias.column_sums` (`Sum`: float32 accumulation), each with its largest
  error against the float64 sum;
- the AdamW update of one FFN kernel ([768, 3072] float32 weight, slots and gradient): the
  module docstring's arithmetic as separate ops against `optimizers._fused_update`.

Figures are the fastest of ``--repeats`` calls in ms.  Name the CPU beside them (printed).
``TF_NUM_INTRAOP_THREADS=1`` in the environment shows which steps use a second core.

  .venv/bin/python benchmarks/fused_steps.py
  .venv/bin/python benchmarks/fused_steps.py --tokens 4096
"""
from __future__ import annotations

from albert_tf.startup import quiet_startup  # before TensorFlow: hides its start-up lines

quiet_startup()

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import cpu_info, isa_note  # noqa: E402


def fastest_ms(call, repeats: int) -> float:
    """The fastest of `repeats` calls (after 3 warm-ups), in ms.  A function's call on the CPU
    returns when its outputs are computed; they are not copied to numpy (for bf16 outputs that
    copy took longer than the work timed)."""
    for _ in range(3):
        call()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return 1000 * best


def print_comparison(label: str, separate, compiled, inputs: tuple, repeats: int) -> None:
    """One line: `separate` and `compiled` called on `inputs`, fastest ms each, and their ratio."""
    times = [fastest_ms(lambda f=f: f(*inputs), repeats) for f in (separate, compiled)]
    print(f"  {label:9s} separate ops {times[0]:7.2f}   compiled {times[1]:7.2f}   {times[0] / times[1]:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=672, help="rows: batch 32 x length 21")
    parser.add_argument("--intermediate", type=int, default=3072)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--attention_batch", type=int, default=8)
    parser.add_argument("--attention_length", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()

    import tensorflow as tf

    from albert_tf.modeling.activations import gelu_backward, gelu_cdf, gelu_value, gelu_value_and_grad
    from albert_tf.training import optimizers

    info = cpu_info()
    print(f"CPU: {info['model']}; {isa_note(info)}; load {os.getloadavg()[0]:.1f}")
    shape = [args.tokens, args.intermediate]
    print(f"\nGELU forward + gradient, [{args.tokens}, {args.intermediate}] (ms, fastest of {args.repeats})")

    @tf.function
    def separate(x, dy):  # the formula op by op in x's dtype, the cdf recomputed for the gradient
        y = x * gelu_cdf(x)
        return y, x * gelu_cdf(x), gelu_backward(dy, x, gelu_cdf(x))

    @tf.function
    def compiled(x, dy):
        return (gelu_value(x),) + tuple(gelu_value_and_grad(x, dy))

    for dtype in (tf.bfloat16, tf.float32):
        x = tf.cast(tf.random.stateless_normal(shape, [1, 2]), dtype)
        dy = tf.cast(tf.random.stateless_normal(shape, [3, 4]), dtype)
        print_comparison(dtype.name, separate, compiled, (x, dy), args.repeats)
    try:
        import torch
    except ImportError:
        print("  torch not installed: no peer figure")
    else:
        xt = torch.randn(*shape).bfloat16()
        dyt = torch.randn(*shape).bfloat16()

        def torch_gelu():
            x = xt.clone().requires_grad_()
            y = torch.nn.functional.gelu(x, approximate="tanh")
            y.backward(dyt)

        print(f"  torch bf16 (fused kernel, forward + backward) {fastest_ms(torch_gelu, args.repeats):7.2f}")

    attention_softmax(args)
    residual_layer_norm(args)
    bias_gradient(args)

    print(f"\nAdamW update of one [{args.hidden}, {args.intermediate}] float32 weight (ms)")
    weights = [tf.random.stateless_normal([args.hidden, args.intermediate], [i, 5]) for i in range(4)]
    lr = tf.constant(2e-5)
    hyper = (0.9, 0.999, 1e-6, 0.01, False)
    separate_update = tf.function(optimizers._update)
    for name, update in (("separate ops", separate_update), ("compiled", optimizers._fused_update)):
        ms = fastest_ms(lambda u=update: u(*weights, lr, *hyper), args.repeats)
        print(f"  {name:12s} {ms:7.2f}")


def attention_softmax(args) -> None:
    import tensorflow as tf

    from albert_tf.modeling import recompute

    shape = [args.attention_batch, 12, args.attention_length, args.attention_length]
    print(f"\nattention softmax forward + gradient, {shape} (ms, fastest of {args.repeats})")
    scale = 0.125
    mask = tf.cast(tf.sequence_mask(tf.fill([args.attention_batch], args.attention_length - 5),
                                    args.attention_length), tf.float32)
    adder = (1.0 - mask[:, None, None, :]) * -10000.0

    @tf.function
    def separate(scores, d_probs):  # the plain ops, TensorFlow's derived gradient
        with tf.GradientTape() as tape:
            tape.watch(scores)
            probs = tf.cast(recompute.attention_softmax(scores, adder, scale), scores.dtype)
        return probs, tape.gradient(probs, scores, output_gradients=d_probs)

    @tf.function
    def compiled(scores, d_probs):  # the backward pass's probabilities are recomputed
        d_scores, _ = recompute._attention_probs_grad(scores, adder, d_probs, scale)
        return recompute._attention_probs(scores, adder, scale), d_scores

    for dtype in (tf.bfloat16, tf.float32):
        scores = tf.cast(tf.random.stateless_normal(shape, [5, 6]) * 4.0, dtype)
        d_probs = tf.cast(tf.random.stateless_normal(shape, [7, 8]), dtype)
        print_comparison(dtype.name, separate, compiled, (scores, d_probs), args.repeats)


def residual_layer_norm(args) -> None:
    import tensorflow as tf

    from albert_tf.modeling import layers

    shape = [args.attention_batch * args.attention_length, args.hidden]
    print(f"\nresidual add + LayerNorm forward + gradient, {shape} float32 + bf16 branch "
          f"(ms, fastest of {args.repeats})")
    x = tf.random.stateless_normal(shape, [9, 10])
    branch = tf.cast(tf.random.stateless_normal(shape, [11, 12]), tf.bfloat16)
    dy = tf.random.stateless_normal(shape, [13, 14])
    gamma, beta = tf.ones([args.hidden]), tf.zeros([args.hidden])

    @tf.function
    def separate(x, branch, dy):
        with tf.GradientTape() as tape:
            tape.watch([x, branch, gamma, beta])
            y = layers.layer_norm(x + tf.cast(branch, tf.float32), gamma, beta, 1e-12)
        return [y] + tape.gradient(y, [x, branch, gamma, beta], output_gradients=dy)

    @tf.function
    def compiled(x, branch, dy):
        y, total = layers._residual_norm_value(x, branch, gamma, beta, 1e-12)
        return (y,) + tuple(layers._residual_norm_grad(dy, total, gamma, 1e-12, tf.bfloat16))

    print_comparison("float32", separate, compiled, (x, branch, dy), args.repeats)


def bias_gradient(args) -> None:
    import numpy as np
    import tensorflow as tf

    from albert_tf.modeling import bias

    print(f"\nbias gradient of a bf16 dense layer, [{args.tokens}, width] (ms, fastest of {args.repeats}; "
          f"largest error against the float64 sum)")
    plain = tf.function(lambda d: tf.raw_ops.BiasAddGrad(out_backprop=d))
    ours = tf.function(bias.column_sums)
    for width in (args.hidden, args.intermediate):
        d = tf.cast(tf.random.stateless_normal([args.tokens, width], [15, width]), tf.bfloat16)
        exact = d.numpy().astype(np.float64).sum(0)
        errors = [np.abs(f(d).numpy().astype(np.float64) - exact).max() for f in (plain, ours)]
        times = [fastest_ms(lambda f=f: f(d), args.repeats) for f in (plain, ours)]
        print(f"  width {width:5d}  BiasAddGrad {times[0]:6.2f} (error {errors[0]:.3f})   "
              f"column_sums {times[1]:6.2f} (error {errors[1]:.3f})   {times[0] / times[1]:.1f}x")


if __name__ == "__main__":
    main()
