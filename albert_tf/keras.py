"""The single place this package imports Keras.

albert_tf targets Keras 2 (the ``tf_keras`` package): it supports
MultiWorkerMirroredStrategy, TF1-style variable names and deferred checkpoint
restore, where Keras 3 does not. Every other module does
``from albert_tf.keras import keras``.
"""
import os

# Keep any stray `import tensorflow.keras` on Keras 2 as well.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tf_keras as keras  # noqa: E402

__all__ = ["keras"]
