"""The dense layers' bias gradient (`albert_tf.modeling.bias`): under bfloat16 the float32 sum of
the rows rounded once, against the float64 sum; the forward op and float32 unchanged; and the
encoder's bf16 training step runs no `BiasAddGrad`."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertModel
from albert_tf.modeling.bias import bias_add, bias_gradient
from albert_tf.training import set_mixed_precision


def _gradient(rng, shape, dtype):
    return tf.cast(tf.constant(rng.normal(0.0, 1.0, shape), tf.float32), dtype)


def _bias_grad(fn, d_outputs):
    x = tf.zeros_like(d_outputs)
    bias = tf.zeros([d_outputs.shape[-1]], d_outputs.dtype)
    with tf.GradientTape() as tape:
        tape.watch([x, bias])
        y = fn(x, bias)
    return tape.gradient(y, [x, bias], output_gradients=d_outputs)


@pytest.mark.parametrize("shape", [(1024, 768), (8, 128, 3072)])  # ALBERT-base's rows of a batch of 8 x 128
def test_bf16_bias_gradient_is_the_float32_sum_rounded_once(shape):
    d_outputs = _gradient(np.random.default_rng(0), shape, tf.bfloat16)
    exact = d_outputs.numpy().astype(np.float64).reshape(-1, shape[-1]).sum(0)
    d_x, d_bias = _bias_grad(bias_add, d_outputs)
    assert d_bias.dtype == tf.bfloat16 and d_bias.shape == [shape[-1]]
    assert np.array_equal(d_x.numpy(), d_outputs.numpy())
    # Half a bf16 step (2^-8 relative) from the exact sum, plus float32's accumulation error.
    error = np.abs(d_bias.numpy().astype(np.float64) - exact)
    assert np.all(error <= 2.0 ** -8 * np.abs(exact) + 1e-3), error.max()
    # Why: TensorFlow's own gradient of bias_add sums in bfloat16 (at these sizes errors of a few
    # percent); ours is at least ten times closer.
    _, plain = _bias_grad(tf.nn.bias_add, d_outputs)
    plain_error = np.abs(plain.numpy().astype(np.float64) - exact)
    assert error.max() * 10 <= plain_error.max(), (error.max(), plain_error.max())
    np.testing.assert_array_equal(bias_gradient(d_outputs).numpy(), d_bias.numpy())


def test_float32_keeps_tensorflows_bias_add_and_its_gradient():
    rng = np.random.default_rng(1)
    x, d_outputs = _gradient(rng, [64, 48], tf.float32), _gradient(rng, [64, 48], tf.float32)
    bias = _gradient(rng, [48], tf.float32)
    np.testing.assert_array_equal(bias_add(x, bias).numpy(), tf.nn.bias_add(x, bias).numpy())
    got, want = _bias_grad(bias_add, d_outputs), _bias_grad(tf.nn.bias_add, d_outputs)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w.numpy())
    np.testing.assert_array_equal(bias_gradient(d_outputs).numpy(), want[1].numpy())


def test_bf16_forward_is_tensorflows_bias_add():
    rng = np.random.default_rng(2)
    x, bias = _gradient(rng, [16, 40], tf.bfloat16), _gradient(rng, [40], tf.bfloat16)
    np.testing.assert_array_equal(bias_add(x, bias).numpy(), tf.nn.bias_add(x, bias).numpy())


def _training_step_op_types(policy: str) -> list[str]:
    """Op types of the traced forward + backward pass of a small encoder in training."""
    set_mixed_precision(policy)
    try:
        config = AlbertConfig(vocab_size=50, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=64)
        model = AlbertModel(config)
        inputs = model.dummy_inputs(2, 8)
        model(inputs)

        @tf.function
        def step(inputs):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.cast(model(inputs, training=True)["sequence_output"], tf.float32))
            return tape.gradient(loss, model.trainable_variables)

        graph = step.get_concrete_function(inputs).graph
        return [op.type for op in graph.get_operations()]
    finally:
        set_mixed_precision("none")


def test_encoder_bf16_training_sums_every_dense_bias_gradient_in_float32():
    """Every dense layer of the encoder (Q/K/V, attention output, both FFN layers, the embedding
    mapping; 2 layers here) takes its bias gradient from `bias_gradient`, none from BiasAddGrad;
    float32 keeps BiasAddGrad for each."""
    assert "BiasAddGrad" not in _training_step_op_types("bf16")
    assert _training_step_op_types("none").count("BiasAddGrad") == 2 * 6 + 1
