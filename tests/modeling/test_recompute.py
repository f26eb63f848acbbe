"""The block steps whose backward pass recomputes instead of keeping
(`albert_tf.modeling.recompute`): the same numbers as the plain ops, forward and backward
(to the last bits their kernels differ in), and fewer forward tensors kept for the
backward pass."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.modeling.activations import gelu
from albert_tf.modeling import recompute
from albert_tf.modeling.recompute import attention_context, gelu_dense


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


def _plain_attention_context(query, key, adder, value, scale):
    scores = tf.matmul(query, key, transpose_b=True)
    probs = tf.nn.softmax(tf.cast(scores, tf.float32) * scale + adder, axis=-1)
    return tf.matmul(tf.cast(probs, value.dtype), value)


def _attention_inputs(rng, dtype, shape=(2, 3, 8, 4), padded=2):
    """Query, key, a mask's additive term (the last `padded` keys of the second row masked), value."""
    batch, heads, seq, width = shape
    query = _random(rng, [batch, heads, seq, width], dtype, 2.0)
    key = _random(rng, [batch, heads, seq, width], dtype, 2.0)
    mask = np.ones([batch, seq], np.float32)
    mask[1, -padded:] = 0.0
    adder = tf.constant((1.0 - mask[:, None, None, :]) * -10000.0)
    return query, key, adder, _random(rng, [batch, heads, seq, width], dtype)


_ATTENTION_OUTPUTS = ("context", "d_query", "d_key", "d_value")


def _plain_gelu_dense(pre, kernel, bias):
    rank = pre.shape.rank
    y = tf.tensordot(gelu(pre), kernel, [[rank - 1], [0]]) if rank == 3 else tf.matmul(gelu(pre), kernel)
    return tf.nn.bias_add(y, bias) if bias is not None else y


def _random(rng, shape, dtype, scale=1.0):
    return tf.cast(tf.constant(rng.normal(0.0, scale, shape), tf.float32), dtype)


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float32])
def test_attention_context_matches_the_plain_ops(dtype):
    """The same formula and gradient: in float32 the same ops; under bf16 XLA's softmax and
    TensorFlow's differ in the last bits of float32 (a rounding flip is one bf16 step)."""
    rng = np.random.default_rng(0)
    query, key, adder, value = _attention_inputs(rng, dtype)
    scale = 0.5
    got = _value_and_grads(lambda q, k, v: attention_context(q, k, adder, v, scale), [query, key, value])
    want = _value_and_grads(lambda q, k, v: _plain_attention_context(q, k, adder, v, scale), [query, key, value])
    tolerance = {"rtol": 0, "atol": 0} if dtype == tf.float32 else {"rtol": 2.0 ** -7, "atol": 2e-2}
    for name, g, w in zip(_ATTENTION_OUTPUTS, got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        np.testing.assert_allclose(g.numpy().astype(np.float64), w.numpy().astype(np.float64), err_msg=name,
                                   **tolerance)
    # Masked keys get no probability, hence no gradient.
    assert not np.any(got[2].numpy()[1, :, -2:, :].astype(np.float32))


def _attention_context_of_scores(scores, adder, value, scale):
    """The compiled softmax and its written-out gradient on given scores: `attention_context`
    before it recomputed the scores, which it kept."""

    @tf.custom_gradient
    def forward(scores, value):
        def backward(d_context):
            d_probs = tf.matmul(d_context, value, transpose_b=True)
            d_scores, probs = recompute._attention_probs_grad(scores, adder, d_probs, scale)
            return d_scores, tf.matmul(probs, d_context, transpose_a=True)

        return tf.matmul(recompute._attention_probs(scores, adder, scale), value), backward

    return forward(scores, value)


def test_recomputed_scores_give_tensorflows_matmul_gradients_bit_for_bit():
    """At a pretraining batch's shapes under bf16: the same values and gradients, bit for bit, as
    TensorFlow's own gradient of ``q k^T`` with the scores kept from the forward pass: recomputing
    them changes no number."""
    rng = np.random.default_rng(7)
    query, key, adder, value = _attention_inputs(rng, tf.bfloat16, shape=(2, 12, 128, 64), padded=91)

    def kept(q, k, v):
        return _attention_context_of_scores(tf.matmul(q, k, transpose_b=True), adder, v, 0.125)

    def traced(fn):
        return tf.function(lambda q, k, v: _value_and_grads(fn, [q, k, v]))(query, key, value)

    got = traced(lambda q, k, v: attention_context(q, k, adder, v, 0.125))
    want = traced(kept)
    for name, g, w in zip(_ATTENTION_OUTPUTS, got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=name)


def test_attention_context_is_as_accurate_as_the_plain_ops_at_albert_base_shapes():
    """At a pretraining batch's shapes (12 heads, 128 positions, one row padded after 37): the
    compiled bf16 path's values and gradients are as close to the float64 formula as the plain
    bf16 ops' (relative Frobenius error, within 20% of theirs)."""
    rng = np.random.default_rng(6)
    query, key, adder, value = _attention_inputs(rng, tf.bfloat16, shape=(2, 12, 128, 64), padded=91)
    args = [query, key, value]

    def plain64(q, k, v):
        s = tf.matmul(q, k, transpose_b=True)
        return tf.matmul(tf.nn.softmax(s * 0.125 + tf.cast(adder, tf.float64), axis=-1), v)

    want = _value_and_grads(plain64, [tf.cast(a, tf.float64) for a in args])
    ours = _value_and_grads(lambda q, k, v: attention_context(q, k, adder, v, 0.125), args)
    plain = _value_and_grads(lambda q, k, v: _plain_attention_context(q, k, adder, v, 0.125), args)

    def error(got, reference):
        reference = reference.numpy()
        return np.linalg.norm(got.numpy().astype(np.float64) - reference) / np.linalg.norm(reference)

    for name, o, p, w in zip(_ATTENTION_OUTPUTS, ours, plain, want):
        assert error(o, w) <= 1.2 * error(p, w), (name, error(o, w), error(p, w))


def test_attention_context_runs_the_plain_ops_for_a_key_length_known_at_run_time():
    """Batches cut to their longest row have a traced length of None: no compiled function (one
    more compilation per length), the plain ops' values and gradients bit for bit."""
    rng = np.random.default_rng(5)
    query, key, adder, value = _attention_inputs(rng, tf.bfloat16)
    spec = [tf.TensorSpec([2, 3, None, 4], tf.bfloat16), tf.TensorSpec([2, 3, None, 4], tf.bfloat16),
            tf.TensorSpec([2, 1, 1, None], tf.float32), tf.TensorSpec([2, 3, None, 4], tf.bfloat16)]

    def traced(fn, signature=spec):
        def run(query, key, adder, value):
            return _value_and_grads(lambda q, k, v: fn(q, k, adder, v, 0.5), [query, key, value])
        return tf.function(run, input_signature=signature)

    def compiled_calls(function) -> list:
        graph = function.get_concrete_function().graph.as_graph_def()
        return [f.signature.name for f in graph.library.function if "_attention_probs" in f.signature.name]

    ours = traced(attention_context)
    assert not compiled_calls(ours)
    static = [tf.TensorSpec(t.shape, t.dtype) for t in (query, key, adder, value)]
    assert compiled_calls(traced(attention_context, static))  # a known length: compiled
    got, want = ours(query, key, adder, value), traced(_plain_attention_context)(query, key, adder, value)
    for name, g, w in zip(_ATTENTION_OUTPUTS, got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy(), err_msg=name)


def test_attention_context_gradient_against_float64():
    """The written-out bf16 gradient against TensorFlow's derived one of the plain formula in
    float64, on bf16 inputs (exact in float64): within bf16's rounding of d_scores and d_value."""
    rng = np.random.default_rng(4)
    query, key, adder, value = _attention_inputs(rng, tf.bfloat16)
    got = _value_and_grads(lambda q, k, v: attention_context(q, k, adder, v, 0.5), [query, key, value])

    def plain64(q, k, v):
        probs = tf.nn.softmax(tf.matmul(q, k, transpose_b=True) * 0.5 + tf.cast(adder, tf.float64), axis=-1)
        return tf.matmul(probs, v)

    want = _value_and_grads(plain64, [tf.cast(t, tf.float64) for t in (query, key, value)])
    for name, g, w in zip(_ATTENTION_OUTPUTS, got, want):
        np.testing.assert_allclose(g.numpy().astype(np.float64), w.numpy(), rtol=2.0 ** -6, atol=2e-2,
                                   err_msg=name)


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


def test_attention_context_keeps_nothing_of_the_scores_size():
    """The plain ops keep the float32 probabilities and their bf16 cast; attention_context keeps
    no [B, N, S, S] tensor: it recomputes the scores from the query and key."""
    rng = np.random.default_rng(3)
    query, key, adder, value = _attention_inputs(rng, tf.bfloat16)
    shape = [2, 3, 8, 8]
    plain = lambda q, k, v: _plain_attention_context(q, k, adder, v, 0.5)  # noqa: E731
    ours = lambda q, k, v: attention_context(q, k, adder, v, 0.5)  # noqa: E731
    args = [query, key, value]
    assert _kept_for_backward(plain, args, shape, tf.float32) == 1
    assert _kept_for_backward(plain, args, shape, tf.bfloat16) == 1
    assert _kept_for_backward(ours, args, shape, tf.float32) == 0
    assert _kept_for_backward(ours, args, shape, tf.bfloat16) == 0
