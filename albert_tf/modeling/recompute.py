"""Two steps of the transformer block whose backward pass recomputes cheap elementwise
results instead of keeping them from the forward pass.

Why: a training step's peak memory is the activations its backward pass needs, held
from the forward pass (for ALBERT-base at batch 8 x 128, at the turn from forward to
backward).  Two of them are elementwise functions of tensors that are kept anyway or
are cheap to recompute:

- ``probs_times_values``: under a mixed policy TensorFlow's derived gradients keep the
  attention's float32 probabilities (softmax gradient) and also their 16-bit cast
  (gradient of the values).  The cast is recomputed: 3 MB per layer less.
- ``gelu_dense``: GELU between the FFN's two matmuls.  Kept by the plain layers: the
  GELU input (for its gradient) and output (for the second matmul's kernel gradient), two
  [B, S, intermediate] tensors; kept here: only the GELU input, and the backward pass
  recomputes the output with the GELU's gradient, in one compiled loop
  (`albert_tf.fused`: about the cost of one GELU per layer).  6 MB per layer less.

Recomputations run after the incoming gradient (a control dependency, or an input that
depends on it): otherwise TensorFlow's executor runs every op whose inputs are ready at
once, computing them in the forward pass and holding the results, and grappler's
common-subexpression pass merges them with the forward ops.  The forward pass is the
plain layers' arithmetic; the gradients are TensorFlow's for MatMul, BiasAdd and Cast,
and our GELU's.
"""
from __future__ import annotations

import tensorflow as tf

from albert_tf.modeling.activations import gelu_value, gelu_value_and_grad


def probs_times_values(probs: tf.Tensor, value: tf.Tensor) -> tf.Tensor:
    """``matmul(cast(probs, value.dtype), value)`` for float32 attention probabilities
    ([..., S, S]) and values ([..., S, D]) in the compute dtype.  The softmax stays
    outside: only tensors the backward pass keeps anyway enter the custom gradient
    (which holds its inputs until its forward pass is done)."""
    if probs.dtype == value.dtype:  # float32: nothing to recompute
        return tf.matmul(probs, value)

    @tf.custom_gradient
    def forward(probs, value):
        context = tf.matmul(tf.cast(probs, value.dtype), value)

        def backward(d_context):
            with tf.control_dependencies([d_context]):
                probs_cast = tf.cast(probs, value.dtype)
            d_probs = tf.cast(tf.matmul(d_context, value, transpose_b=True), probs.dtype)
            d_value = tf.matmul(probs_cast, d_context, transpose_a=True)
            return d_probs, d_value

        return context, backward

    return forward(probs, value)


def gelu_dense(pre: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None) -> tf.Tensor:
    """``gelu(pre) @ kernel + bias`` over the last axis of `pre` (rank 2 or 3): the
    original's GELU (tanh form) and then a dense layer, as `SharedDense` computes them."""
    args = [pre, kernel] + ([bias] if bias is not None else [])

    @tf.custom_gradient
    def forward(*args):
        pre, kernel = args[0], args[1]
        width, units = tf.shape(pre)[-1], tf.shape(kernel)[-1]
        outputs = tf.matmul(tf.reshape(gelu_value(pre), [-1, width]), kernel)
        if len(args) == 3:  # on the 2-D product: grappler fuses MatMul + BiasAdd
            outputs = tf.nn.bias_add(outputs, args[2])
        outputs = tf.reshape(outputs, tf.concat([tf.shape(pre)[:-1], [units]], 0))

        def backward(d_outputs):
            # The GELU output is recomputed with its gradient, in one pass over `pre`, once the
            # incoming gradient is there (it needs d_hidden, which needs d_outputs).
            d_flat = tf.reshape(d_outputs, [-1, units])
            d_hidden = tf.reshape(tf.matmul(d_flat, kernel, transpose_b=True), tf.shape(pre))
            hidden, d_pre = gelu_value_and_grad(pre, d_hidden)
            d_kernel = tf.matmul(tf.reshape(hidden, [-1, width]), d_flat, transpose_a=True)
            grads = [d_pre, d_kernel]
            if len(args) == 3:
                grads.append(tf.raw_ops.BiasAddGrad(out_backprop=d_outputs))
            return grads

        return outputs, backward

    return forward(*args)
