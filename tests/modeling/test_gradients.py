"""Written-out gradients (LayerNorm, GELU) against TensorFlow's derived gradient of the
plain formulas, written here again, in float64."""
import math

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.modeling import layers
from albert_tf.modeling.activations import get_activation


def _plain_layer_norm(x, gamma, beta, epsilon):
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / tf.sqrt(variance + epsilon) * gamma + beta


def _gradients(fn, *args):
    args = [tf.constant(a) for a in args]
    with tf.GradientTape() as tape:
        tape.watch(args)
        y = fn(*args)
        # A loss that weights every output differently, so each gradient entry matters.
        loss = tf.reduce_sum(y * tf.reshape(tf.range(tf.size(y), dtype=y.dtype) / 7.0 % 1.3, tf.shape(y)))
    return y.numpy(), [g.numpy() for g in tape.gradient(loss, args)]


@pytest.mark.parametrize("shape", [(3, 5, 16), (4, 7)])
def test_layer_norm_gradient(shape):
    rng = np.random.default_rng(0)
    x = rng.normal(0.5, 2.0, shape)
    gamma, beta = rng.normal(1.0, 0.3, shape[-1]), rng.normal(0.0, 0.3, shape[-1])
    got_y, got = _gradients(lambda a, g, b: layers.layer_norm(a, g, b, 1e-12), x, gamma, beta)
    want_y, want = _gradients(lambda a, g, b: _plain_layer_norm(a, g, b, 1e-12), x, gamma, beta)
    np.testing.assert_allclose(got_y, want_y, atol=1e-12)
    for name, g, w in zip(("x", "gamma", "beta"), got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10, err_msg=name)


@pytest.mark.parametrize("shape", [(3, 5, 16), (4, 7)])
def test_residual_layer_norm_gradient(shape):
    """The compiled residual LayerNorm of training steps: x + branch, normalised, and its
    gradients to x, branch, gamma and beta, against the plain formula's derived ones."""
    rng = np.random.default_rng(1)
    x, branch = rng.normal(0.5, 2.0, shape), rng.normal(-0.2, 1.0, shape)
    gamma, beta = rng.normal(1.0, 0.3, shape[-1]), rng.normal(0.0, 0.3, shape[-1])
    got_y, got = _gradients(lambda a, r, g, b: layers.residual_layer_norm(a, r, g, b, 1e-12), x, branch, gamma, beta)
    want_y, want = _gradients(lambda a, r, g, b: _plain_layer_norm(a + r, g, b, 1e-12), x, branch, gamma, beta)
    np.testing.assert_allclose(got_y, want_y, atol=1e-12)
    for name, g, w in zip(("x", "branch", "gamma", "beta"), got, want):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-10, err_msg=name)


def test_residual_layer_norm_takes_a_bfloat16_branch_and_returns_its_gradient_in_bfloat16():
    """Under mixed precision the branch is bf16: added in float32, its gradient the float32
    gradient of the sum rounded once to bf16 (what TensorFlow's Cast gradient gives)."""
    rng = np.random.default_rng(2)
    x = tf.constant(rng.normal(0.0, 1.0, (6, 32)), tf.float32)
    branch = tf.cast(tf.constant(rng.normal(0.0, 1.0, (6, 32)), tf.float32), tf.bfloat16)
    gamma, beta = tf.constant(rng.normal(1.0, 0.3, 32), tf.float32), tf.zeros([32])
    weights = tf.constant(rng.normal(0.0, 1.0, (6, 32)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, branch])
        got = layers.residual_layer_norm(x, branch, gamma, beta, 1e-12)
        want = layers.layer_norm(x + tf.cast(branch, tf.float32), gamma, beta, 1e-12)
        got_loss, want_loss = tf.reduce_sum(got * weights), tf.reduce_sum(want * weights)
    got_dx, got_db = tape.gradient(got_loss, [x, branch])
    want_dx, want_db = tape.gradient(want_loss, [x, branch])
    assert got.dtype == tf.float32 and got_db.dtype == tf.bfloat16
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_dx.numpy(), want_dx.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tf.cast(got_db, tf.float32).numpy(), tf.cast(tf.cast(want_dx, tf.bfloat16), tf.float32).numpy(),
                               rtol=2 ** -7, atol=1e-6)


def _plain_gelu(x):
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def test_gelu_value_and_gradient():
    x = np.linspace(-6.0, 6.0, 241)
    got_y, (got,) = _gradients(get_activation("gelu"), x)
    want_y, (want,) = _gradients(_plain_gelu, x)
    np.testing.assert_allclose(got_y, want_y, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_gelu_in_bfloat16_is_rounded_once():
    """In bf16 the GELU and its gradient are computed in float32 and rounded once: each within
    half a bf16 step (2^-8 of the value at most) of the float64 values at the same bf16 inputs, where the
    tanh form is not lost to float32 cancellation (1 + tanh(u) for u far below 0: 1e-5 absolute)."""
    xb = tf.constant(np.linspace(-6.0, 6.0, 241), tf.bfloat16)
    dyb = tf.constant(np.arange(241) / 7.0 % 1.3 + 0.1, tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(xb)
        y = get_activation("gelu")(xb)
    got = tape.gradient(y, xb, output_gradients=dyb)
    assert y.dtype == got.dtype == tf.bfloat16
    x64, dy64 = tf.cast(xb, tf.float64), tf.cast(dyb, tf.float64)
    with tf.GradientTape() as tape:
        tape.watch(x64)
        want_y = _plain_gelu(x64)
    want = tape.gradient(want_y, x64, output_gradients=dy64).numpy()
    for name, g, w in (("value", y, want_y.numpy()), ("gradient", got, want)):
        error = np.abs(g.numpy().astype(np.float64) - w)
        bound = 2.0 ** -8 * np.abs(w) * 1.01 + 1e-5
        assert np.all(error <= bound), (name, (error / bound).max())


@pytest.fixture
def bf16_policy():
    from albert_tf.keras import keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def test_shared_dense_cast_once_equals_keras_dense_casting_per_call(bf16_policy):
    """Two calls sharing one bf16 copy of the weights (their uses chained by use_weights) give
    Keras Dense's outputs and float32 gradients (which casts at each call and adds the calls'
    gradients in float32), bit for bit.  The reference adds its bias by broadcasting, whose
    gradient TensorFlow sums with `Sum` (float32 accumulation, as `albert_tf.modeling.bias`);
    Keras' BiasAdd gradient sums bfloat16 in bfloat16 (tests/modeling/test_bias.py)."""
    from albert_tf.keras import keras

    class BroadcastBiasDense(keras.layers.Dense):
        def call(self, inputs):
            flat = tf.matmul(tf.reshape(inputs, [-1, inputs.shape[-1]]), self.kernel)
            return self.activation(tf.reshape(flat, tf.concat([tf.shape(inputs)[:-1], [self.units]], 0)) + self.bias)

    reference = BroadcastBiasDense(8, activation=get_activation("gelu"), kernel_initializer=layers.initializer(0.02))
    shared = layers.dense(8, 0.02, "intermediate", "gelu", layer_class=layers.SharedDense)
    x = tf.random.stateless_normal([2, 5, 8], [3, 4])
    reference(x), shared(x)
    shared.kernel.assign(reference.kernel.numpy())
    shared.bias.assign(tf.random.stateless_normal([8], [5, 6]) * 0.1)
    reference.bias.assign(shared.bias)

    def run(layer, once):
        with tf.GradientTape() as tape:
            if once:  # the two uses chained as the encoder chains a group's layers
                first, following = layers.use_weights({"d": layer.cast_weights()}, last=False)
                second, _ = layers.use_weights(following, last=True)
                # training=True: outside training the GELU takes its forward-only form
                y = layer(layer(x, weights=first["d"], training=True), weights=second["d"], training=True)
            else:
                y = layer(layer(x))
            loss = tf.reduce_sum(tf.cast(y, tf.float32) * tf.range(8, dtype=tf.float32))
        return y, tape.gradient(loss, [layer.kernel, layer.bias])

    want_y, want = run(reference, once=False)
    got_y, got = run(shared, once=True)
    assert got_y.dtype == tf.bfloat16 and got[0].dtype == tf.float32
    np.testing.assert_array_equal(got_y.numpy(), want_y.numpy())
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert [v.name for v in shared.weights] == ["intermediate/kernel:0", "intermediate/bias:0"]
