"""Dropout whose masks are a pure function of (seed, step, micro-batch, replica, call site).

Why: exact resume.  A stateful RNG (Keras' default dropout) would have to be
checkpointed per replica and per layer, and its state advances differently under
XLA, gradient accumulation or another device count.  Instead the training loop opens
``dropout_seed_scope(seed)`` around each forward pass with a seed derived from the
run's ``--seed``, the global step, the micro-batch index and the replica id; every
``StatelessDropout`` call inside draws its mask with ``stateless_dropout`` from that
seed folded with its call index (the order of calls while tracing, which is fixed by
the model's code).  A resumed run therefore draws the very masks the uninterrupted
run drew, with nothing to store.  A layer applied several times (ALBERT's shared
layers) gets a different mask at each application.

Outside any scope (a user calling ``model(x, training=True)`` directly) the layer
falls back to ordinary random dropout.
"""
from __future__ import annotations

import contextlib
import threading

import tensorflow as tf

from albert_tf.keras import keras

_local = threading.local()


class _SeedState:
    def __init__(self, seed: tf.Tensor):
        self.seed = seed
        self.calls = 0


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


@contextlib.contextmanager
def dropout_seed_scope(seed: tf.Tensor):
    """Within this scope, ``StatelessDropout`` layers draw masks from ``seed`` (int shape [2])."""
    stack = _stack()
    stack.append(_SeedState(tf.cast(seed, tf.int64)))
    try:
        yield
    finally:
        stack.pop()


def next_dropout_seed() -> tf.Tensor | None:
    """A fresh seed for the next dropout call in the current scope, or None outside one."""
    stack = _stack()
    if not stack:
        return None
    state = stack[-1]
    seed = tf.random.experimental.stateless_fold_in(state.seed, state.calls)
    state.calls += 1
    return seed


def step_seed(base_seed: int, step: tf.Tensor, micro_step: tf.Tensor, replica_id) -> tf.Tensor:
    """The seed the training loop gives one forward pass (one micro-batch on one replica)."""
    seed = tf.constant([base_seed, 0x5EED], tf.int64)
    for value in (step, micro_step, replica_id):
        seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(value, tf.int64))
    return seed


def dropout(x: tf.Tensor, rate: float, training: bool | tf.Tensor | None) -> tf.Tensor:
    """Dropout for use inside model code: stateless within the loop's seed scope."""
    if not training or rate == 0.0:
        return x
    seed = next_dropout_seed()
    if seed is None:
        return tf.nn.dropout(x, rate=rate)
    return tf.nn.experimental.stateless_dropout(x, rate=rate, seed=seed)


class StatelessDropout(keras.layers.Layer):
    """Drop-in for ``keras.layers.Dropout(rate)`` that resumes exactly (see the module doc)."""

    def __init__(self, rate: float, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
        self.rate = float(rate)
        self.supports_masking = True

    def call(self, inputs, training=None):
        if training is None:
            training = keras.backend.learning_phase()
        if isinstance(training, bool) or training is None or isinstance(training, int):
            return dropout(inputs, self.rate, bool(training))
        # A symbolic training flag: choose at run time.
        return tf.cond(
            tf.cast(training, tf.bool),
            lambda: dropout(inputs, self.rate, True),
            lambda: tf.identity(inputs),
        )

    def get_config(self) -> dict:
        config = super().get_config()
        config["rate"] = self.rate
        return config
