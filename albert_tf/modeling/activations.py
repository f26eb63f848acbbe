"""Activations by the names the original's `get_activation` accepts, plus the
exact (erf) GELU that Hugging Face configs call "gelu".

The names (and their Hugging Face spellings) are config facts and live in
`albert_tf.config`; this module maps them to functions, so the config never imports
the model."""
from __future__ import annotations

import math
from typing import Callable, Optional

import tensorflow as tf

from albert_tf.config import ACTIVATIONS
from albert_tf.fused import fused


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


def gelu_cdf(x: tf.Tensor) -> tf.Tensor:
    """The tanh approximation of Φ(x) that the original's GELU multiplies x by."""
    # x * x * x is what grappler makes of the original's tf.pow(x, 3) (the same products);
    # written out, the ops it becomes keep a recomputation's control dependency.
    return 0.5 * (1.0 + tf.tanh(_SQRT_2_OVER_PI * (x + _CUBIC * (x * x * x))))


def gelu_backward(dy: tf.Tensor, x: tf.Tensor, cdf: tf.Tensor) -> tf.Tensor:
    """The gradient of x * gelu_cdf(x) for the output gradient dy, from x and its cdf."""
    # d/dx x*cdf = cdf + x*cdf';  cdf' = 0.5*(1 - tanh(u)^2) * du/dx with 1 - tanh(u)^2 = 4*cdf*(1 - cdf)
    # and du/dx = sqrt(2/pi) * (1 + 3*0.044715*x^2).
    slope = (2.0 * _SQRT_2_OVER_PI) + (6.0 * _SQRT_2_OVER_PI * _CUBIC) * (x * x)
    return dy * (cdf + x * (cdf * (1.0 - cdf)) * slope)


def _widened(x: tf.Tensor) -> tf.Tensor:
    """x in float32 if it is narrower (16-bit), else as it is."""
    return tf.cast(x, tf.float32) if x.dtype.size < 4 else x


def _gelu_rounded(x: tf.Tensor) -> tf.Tensor:
    """x · gelu_cdf(x), computed in float32 (or x's wider dtype) and rounded once to x's dtype."""
    wide = _widened(x)
    return tf.cast(wide * gelu_cdf(wide), x.dtype)


@fused
def gelu_value(x: tf.Tensor) -> tf.Tensor:
    """`_gelu_rounded` as one compiled loop: training's FFN (`recompute.gelu_dense`)."""
    return _gelu_rounded(x)


@fused
def gelu_value_and_grad(x: tf.Tensor, dy: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """`gelu_value(x)` and its gradient for the output gradient dy, in one pass (float32
    inside): what a backward pass that recomputes the GELU output needs."""
    wide = _widened(x)
    cdf = gelu_cdf(wide)
    return tf.cast(wide * cdf, x.dtype), tf.cast(gelu_backward(tf.cast(dy, wide.dtype), wide, cdf), x.dtype)


@tf.custom_gradient
def gelu(x: tf.Tensor) -> tf.Tensor:
    """GELU, tanh approximation: what the original means by "gelu".

    Computed in float32 whatever the input's dtype, and rounded once (as Hugging Face's and
    oneDNN's fused GELU do under bf16).  The forward pass is plain TensorFlow ops, so models
    exported with it need no XLA; the gradient is written out, recomputes the cdf (only the
    input is kept for the backward pass) and runs compiled (`gelu_value_and_grad`).  A
    transformer block's FFN runs `albert_tf.modeling.recompute.gelu_dense` in training instead.
    """

    def backward(dy):
        return gelu_value_and_grad(x, dy)[1]

    return _gelu_rounded(x), backward


def gelu_forward_only(x: tf.Tensor) -> tf.Tensor:
    """`gelu` in the form TensorFlow's grappler fuses into the MatMul + BiasAdd before it
    (oneDNN's fused matmul with a GeluApproximate post-op, where TensorFlow enables oneDNN):
    ``tf.nn.gelu(approximate=True)``, 0.5·x·(1 + tanh(…)) rather than x·(0.5·(1 + tanh(…))).

    The same function, within a rounding step of `gelu` (the fused kernel computes it in
    float32 even for bf16 inputs). For passes without a backward pass (``training`` false):
    its gradient is TensorFlow's derived one, correct but keeping more than `gelu`'s; and
    `gelu`'s custom gradient would stand between the matmul and the GELU and stop the fusion.
    """
    return tf.nn.gelu(x, approximate=True)


def gelu_erf(x: tf.Tensor) -> tf.Tensor:
    """GELU, exact form x·Φ(x) = x·(1 + erf(x/√2))/2: Hugging Face's "gelu". Only
    configs imported from Hugging Face carry it (HF's v1 ALBERT configs name it,
    although Google trained v1 with the tanh form)."""
    return 0.5 * x * (1.0 + tf.math.erf(x / math.sqrt(2.0)))


_ACTIVATIONS: dict[str, Optional[Callable]] = {
    "linear": None,
    "relu": tf.nn.relu,
    "gelu": gelu,
    "gelu_erf": gelu_erf,
    "tanh": tf.tanh,
}
if tuple(_ACTIVATIONS) != ACTIVATIONS:
    raise RuntimeError("albert_tf.config.ACTIVATIONS and the functions of albert_tf.modeling.activations differ")

def get_activation(name: Optional[str]) -> Optional[Callable]:
    """Maps a config string to a function; empty or "linear" means none."""
    if name is None or name == "":
        return None
    key = name.lower()
    if key not in _ACTIVATIONS:
        raise ValueError(f"unsupported activation '{name}'; expected one of {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[key]
