"""The activation names the original accepts, each against its NumPy formula, and the
config's hidden_act reaching the FFN and MLM-transform layers."""
import math

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.modeling.activations import gelu_forward_only, get_activation

# Wide enough that the names differ by far more than test tolerances (relu(-1) = 0,
# gelu(-1) = -0.159, tanh(3) = 0.995, linear(3) = 3).
X = np.linspace(-4.0, 4.0, 33).astype(np.float32)

NUMPY = {
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
    "gelu": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
    "linear": lambda x: x,
}


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_activation_table(name):
    function = get_activation(name)
    got = X if function is None else function(tf.constant(X)).numpy()
    np.testing.assert_allclose(got, NUMPY[name](X.astype(np.float64)), rtol=0, atol=1e-6)
    # Names are matched case-insensitively, as the original's get_activation lower-cases them.
    upper = get_activation(name.upper())
    assert upper is function


def test_gelu_forward_only_is_the_same_function():
    np.testing.assert_allclose(gelu_forward_only(tf.constant(X)).numpy(), NUMPY["gelu"](X.astype(np.float64)),
                               rtol=0, atol=1e-6)


def test_linear_and_empty_mean_no_activation():
    assert get_activation("linear") is None and get_activation("") is None and get_activation(None) is None


@pytest.mark.parametrize("name", sorted(NUMPY))
def test_hidden_act_reaches_the_ffn_and_mlm_transform(name):
    config = AlbertConfig(vocab_size=30, embedding_size=6, hidden_size=8, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=10, hidden_act=name)
    model = AlbertPretrainer(config)
    model(model.dummy_inputs())
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((2, 3, 8)) * 3).astype(np.float32)
    for layer in (model.encoder.groups[0][0].intermediate, model.masked_lm.transform):
        kernel, bias = (w.numpy() for w in layer.weights)
        pre = x.astype(np.float64) @ kernel + bias
        for training in (False, True):  # the FFN's GELU has a forward-only form
            np.testing.assert_allclose(layer(tf.constant(x), training=training).numpy(), NUMPY[name](pre), rtol=0,
                                       atol=1e-5, err_msg=f"{layer.name} training={training}")
