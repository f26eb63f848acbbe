"""Activations by the names the original's `get_activation` accepts, plus the
exact (erf) GELU that Hugging Face configs call "gelu"."""
from __future__ import annotations

import math
from typing import Callable, Optional

import tensorflow as tf


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_CUBIC = 0.044715


@tf.custom_gradient
def gelu(x: tf.Tensor) -> tf.Tensor:
    """GELU, tanh approximation: what the original means by "gelu".

    Computed in the input's dtype (bf16 under a mixed policy).  The gradient is written
    out: TensorFlow's derived one keeps about six [tokens, intermediate] tensors per layer
    alive until the backward pass (the largest activations of the step); this one keeps
    the input and the cdf and takes nine elementwise ops.
    """
    cdf = 0.5 * (1.0 + tf.tanh(_SQRT_2_OVER_PI * (x + _CUBIC * tf.pow(x, 3))))

    def backward(dy):
        # d/dx x*cdf = cdf + x*cdf';  cdf' = 0.5*(1 - tanh(u)^2) * du/dx with 1 - tanh(u)^2 = 4*cdf*(1 - cdf)
        # and du/dx = sqrt(2/pi) * (1 + 3*0.044715*x^2).
        slope = (2.0 * _SQRT_2_OVER_PI) + (6.0 * _SQRT_2_OVER_PI * _CUBIC) * (x * x)
        return dy * (cdf + x * (cdf * (1.0 - cdf)) * slope)

    return x * cdf, backward


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

# Hugging Face `hidden_act` name -> ours, for the functions both have. The first
# HF name listed for one of ours is the one written when exporting.
HF_ACTIVATIONS: tuple[tuple[str, str], ...] = (
    ("gelu_new", "gelu"),            # the original's tanh approximation ...
    ("gelu_pytorch_tanh", "gelu"),   # ... computed by torch's fused kernel
    ("gelu_fast", "gelu"),           # ... with the terms rearranged
    ("gelu", "gelu_erf"),            # the exact erf form
    ("gelu_python", "gelu_erf"),
    ("relu", "relu"),
    ("tanh", "tanh"),
    ("linear", "linear"),
)


def from_hf_activation(name: str) -> str:
    """Our activation name for a Hugging Face `hidden_act`; ValueError if none fits."""
    for hf_name, ours in HF_ACTIVATIONS:
        if name == hf_name:
            return ours
    known = ", ".join(hf for hf, _ in HF_ACTIVATIONS)
    raise ValueError(f"Hugging Face activation '{name}' has no albert_tf counterpart; supported: {known}")


def to_hf_activation(name: str) -> str:
    """The Hugging Face `hidden_act` that computes our activation `name`."""
    key = (name or "linear").lower()
    for hf_name, ours in HF_ACTIVATIONS:
        if ours == key:
            return hf_name
    raise ValueError(f"activation '{name}' has no Hugging Face counterpart")


def get_activation(name: Optional[str]) -> Optional[Callable]:
    """Maps a config string to a function; empty or "linear" means none."""
    if name is None or name == "":
        return None
    key = name.lower()
    if key not in _ACTIVATIONS:
        raise ValueError(f"unsupported activation '{name}'; expected one of {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[key]
