"""The block steps whose backward pass recomputes instead of keeping
(`albert_tf.modeling.recompute`): the same numbers as the plain ops, forward and backward
(bit for bit where both run the same kernels), and fewer forward tensors kept for the
backward pass."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.modeling.activations import gelu
from albert_tf.modeling.recompute import gelu_dense, probs_times_values


def _weighted_loss(y):
    # Every output entry weighted differently, so each gradient entry matters.
    w = tf.reshape(tf.range(tf.size(y), dtype=tf.float32) / 7.0 % 1.3, tf.shape(y))
    return tf.reduce_sum(tf.cast(y, tf.float32) * w)


def _value_and_grads(fn, args):
    with tf.GradientTape() as tape:
        tape.watch(args)
        y = fn(*args)
        loss = _weighted_loss(y)
    return [y] + tape.gradient(loss, args)


def _plain_probs_times_values(probs, value):
    return tf.matmul(tf.cast(probs, value.dtype), value)


def _plain_gelu_dense(pre, kernel, bias):
    rank = pre.shape.rank
    y = tf.tensordot(gelu(pre), kernel, [[rank - 1], [0]]) if rank == 3 else tf.matmul(gelu(pre), kernel)
    return tf.nn.bias_add(y, bias) if bias is not None else y


def _random(rng, shape, dtype, scale=1.0):
    return tf.cast(tf.constant(rng.normal(0.0, scale, shape), tf.float32), dtype)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float32])
def test_probs_times_values_matches_the_plain_ops_bit_for_bit(dtype):
    rng = np.random.default_rng(0)
    probs = tf.nn.softmax(_random(rng, [2, 3, 8, 8], tf.float32, 2.0), axis=-1)
    value = _random(rng, [2, 3, 8, 4], dtype)
    got = _value_and_grads(probs_times_values, [probs, value])
    want = _value_and_grads(_plain_probs_times_values, [probs, value])
    for name, g, w in zip(("context", "d_probs", "d_value"), got, want):
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=name)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float32])
@pytest.mark.parametrize("shape", [(2, 5, 12), (6, 12)])
@pytest.mark.parametrize("use_bias", [True, False])
def test_gelu_dense_matches_gelu_then_dense(dtype, shape, use_bias):
    """The same formula; the GELU is XLA-compiled in gelu_dense and plain ops in `gelu`, whose tanh
    kernels differ in the last bit of float32 (one bf16 rounding step after a rounding flip)."""
    rng = np.random.default_rng(1)
    pre = _random(rng, shape, dtype, 2.0)
    kernel = _random(rng, [shape[-1], 7], dtype, 0.3)
    args = [pre, kernel] + ([_random(rng, [7], dtype, 0.3)] if use_bias else [])

    def ours(pre, kernel, *bias):
        return gelu_dense(pre, kernel, bias[0] if bias else None)

    def plain(pre, kernel, *bias):
        return _plain_gelu_dense(pre, kernel, bias[0] if bias else None)

    got = _value_and_grads(ours, args)
    want = _value_and_grads(plain, args)
    tolerance = {"rtol": 1e-5, "atol": 1e-6} if dtype == tf.float32 else {"rtol": 2.0 ** -7, "atol": 2e-2}
    for name, g, w in zip(("outputs", "d_pre", "d_kernel", "d_bias"), got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        np.testing.assert_allclose(g.numpy().astype(np.float64), w.numpy().astype(np.float64), err_msg=name,
                                   **tolerance)


def _kept_for_backward(fn, args, shape, dtype) -> int:
    """How many forward tensors of `shape`/`dtype` the backward ops read, in the traced graph
    of a forward + backward pass (what TensorFlow must hold from one to the other)."""

    @tf.function
    def step(*args):
        with tf.GradientTape() as tape:
            tape.watch(args)
            loss = _weighted_loss(fn(*args))
        return [loss] + tape.gradient(loss, list(args))

    graph = step.get_concrete_function(*args).graph

    def ancestors(tensors):
        seen, stack = set(), [t.op for t in tensors]
        while stack:
            op = stack.pop()
            if op.name not in seen:
                seen.add(op.name)
                stack.extend(t.op for t in op.inputs)
                stack.extend(op.control_inputs)
        return seen

    forward = ancestors(graph.outputs[:1])
    backward = ancestors(graph.outputs[1:]) - forward
    views = ("Identity", "IdentityN", "Reshape")
    kept = set()
    for op in graph.get_operations():
        if op.name not in backward:
            continue
        for t in op.inputs:
            while t.op.type in views and t.op.name in forward:  # a view's buffer is its input's
                t = t.op.inputs[t.value_index if t.op.type == "IdentityN" else 0]
            if t.op.name in forward and t.shape.as_list() == list(shape) and t.dtype == dtype:
                kept.add(t.name)
    return len(kept)


def test_gelu_dense_keeps_only_its_input_for_the_backward_pass():
    rng = np.random.default_rng(2)
    shape = [2, 5, 12]
    pre, kernel, bias = _random(rng, shape, tf.bfloat16), _random(rng, [12, 7], tf.bfloat16), _random(
        rng, [7], tf.bfloat16)
    # The plain layers keep the GELU's input (for its gradient) and output (for the kernel's);
    # gelu_dense keeps the input only.
    assert _kept_for_backward(_plain_gelu_dense, [pre, kernel, bias], shape, tf.bfloat16) == 2
    assert _kept_for_backward(gelu_dense, [pre, kernel, bias], shape, tf.bfloat16) == 1


def test_probs_times_values_keeps_no_16_bit_probabilities():
    rng = np.random.default_rng(3)
    probs = tf.nn.softmax(_random(rng, [2, 3, 8, 8], tf.float32), axis=-1)
    value = _random(rng, [2, 3, 8, 4], tf.bfloat16)
    shape = [2, 3, 8, 8]
    assert _kept_for_backward(_plain_probs_times_values, [probs, value], shape, tf.bfloat16) == 1
    assert _kept_for_backward(probs_times_values, [probs, value], shape, tf.bfloat16) == 0
