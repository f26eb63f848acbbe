"""albert_tf: Google's ALBERT on TensorFlow 2 / Keras 2 (tf_keras).

Public names are imported lazily so that light modules (tokenization, data
tools, the SQuAD evaluator) do not pay for building Keras on import.
"""
from albert_tf.lazy import lazy_exports

__version__ = "0.1.0"

_PUBLIC = {
    "AlbertConfig": "albert_tf.config",
    "AlbertModel": "albert_tf.modeling.encoder",
    "AlbertPretrainer": "albert_tf.modeling.models",
    "load_checkpoint": "albert_tf.weights.loading",
    "from_pretrained": "albert_tf.pretrained",
    "FullTokenizer": "albert_tf.tokenization",
    "TFTokenizer": "albert_tf.tokenization",
}

__all__, __getattr__ = lazy_exports(__name__, _PUBLIC)
