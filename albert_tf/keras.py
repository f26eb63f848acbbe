"""The single place this package imports Keras.

albert_tf targets Keras 2 (the ``tf_keras`` package): it supports
MultiWorkerMirroredStrategy, TF1-style variable names and deferred checkpoint
restore, where Keras 3 does not. Every other module does
``from albert_tf.keras import keras``.

``tf_keras`` is imported directly and no environment variable is set, so the
process's own ``tf.keras`` (Keras 3 in TensorFlow 2.21, unless the user sets
``TF_USE_LEGACY_KERAS``) is left as it was: a user's Keras 3 models run beside ours.
"""
import tf_keras as keras

__all__ = ["keras"]
