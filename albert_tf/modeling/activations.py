"""Activations by the names the original's `get_activation` accepts."""
from __future__ import annotations

import math
from typing import Callable, Optional

import tensorflow as tf


def gelu(x: tf.Tensor) -> tf.Tensor:
    """GELU, tanh approximation: what the original means by "gelu"."""
    cdf = 0.5 * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * tf.pow(x, 3))))
    return x * cdf


_ACTIVATIONS: dict[str, Optional[Callable]] = {
    "linear": None,
    "relu": tf.nn.relu,
    "gelu": gelu,
    "tanh": tf.tanh,
}


def get_activation(name: Optional[str]) -> Optional[Callable]:
    """Maps a config string to a function; empty or "linear" means none."""
    if name is None or name == "":
        return None
    key = name.lower()
    if key not in _ACTIVATIONS:
        raise ValueError(f"unsupported activation '{name}'; expected one of {', '.join(_ACTIVATIONS)}")
    return _ACTIVATIONS[key]
