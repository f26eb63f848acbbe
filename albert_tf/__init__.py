"""albert_tf: Google's ALBERT on TensorFlow 2 / Keras 2 (tf_keras).

Public names are imported lazily so that light modules (tokenization, data
tools, the SQuAD evaluator) do not pay for building Keras on import.
"""
import importlib
from typing import Any

__version__ = "0.1.0"

_PUBLIC = {
    "AlbertConfig": "albert_tf.config",
    "AlbertModel": "albert_tf.modeling.encoder",
    "AlbertPretrainer": "albert_tf.modeling.models",
    "load_checkpoint": "albert_tf.weights.loading",
    "FullTokenizer": "albert_tf.tokenization",
    "TFTokenizer": "albert_tf.tokenization",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'albert_tf' has no attribute {name!r}")
