"""The dense layers' bias add, whose bias gradient sums in float32 under bfloat16 compute.

Why: TensorFlow's CPU `BiasAddGrad` sums a bfloat16 gradient over the rows in bfloat16.  Over
the 1,024 rows of an ALBERT-base batch of 8 x 128 its sums are off by up to a few percent of
their size; `Sum` of the same bfloat16 tensor accumulates in float32 and rounds once, twenty
times closer to the float64 sum (`tests/modeling/test_bias.py`), and is no slower
(`benchmarks/fused_steps.py`, "bias gradient").  Float32 keeps TensorFlow's own gradient.
"""
from __future__ import annotations

import tensorflow as tf


def column_sums(gradient: tf.Tensor) -> tf.Tensor:
    """Sums of `gradient` ([..., units]) over every axis but the last, in its dtype (TensorFlow's
    `Sum` accumulates bfloat16 in float32)."""
    return tf.reduce_sum(tf.reshape(gradient, [-1, tf.shape(gradient)[-1]]), 0)


def bias_add(x: tf.Tensor, bias: tf.Tensor) -> tf.Tensor:
    """``tf.nn.bias_add(x, bias)``; under bfloat16 its bias gradient is `column_sums`.  The forward
    op is TensorFlow's BiasAdd either way, which grappler fuses into the matmul before it."""
    if x.dtype != tf.bfloat16:
        return tf.nn.bias_add(x, bias)

    @tf.custom_gradient
    def forward(x, bias):
        def backward(d_outputs):
            return d_outputs, column_sums(d_outputs)

        return tf.nn.bias_add(x, bias), backward

    return forward(x, bias)


def bias_gradient(d_outputs: tf.Tensor) -> tf.Tensor:
    """The gradient of `bias_add`'s bias for the gradient `d_outputs` of its result."""
    if d_outputs.dtype != tf.bfloat16:
        return tf.raw_ops.BiasAddGrad(out_backprop=d_outputs)
    return column_sums(d_outputs)
