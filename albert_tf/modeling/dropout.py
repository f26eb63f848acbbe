"""Dropout whose masks are a pure function of (seed, step, call site, example position).

It lives with the model (every layer that drops uses it) while the training loop only
opens the scope, so the model floor needs nothing from ``albert_tf.training``.

Why: exact resume and one-device semantics on every topology.  A stateful RNG
(Keras' default dropout) would have to be checkpointed per replica and per layer, and
its masks would change with the device count.  Instead the training loop opens
``dropout_seed_scope(seed, example_offset)`` around each forward pass:

- ``seed`` comes from the run's ``--seed`` and the global step only (the loop's
  ``step_seed``);
- ``example_offset`` is the global position, in the step's global batch, of the first
  example of the micro-batch on this replica.

Every ``StatelessDropout`` call inside draws its mask from a Philox stream keyed by the
seed folded with its call index (the order of calls while tracing, fixed by the model's
code).  Example ``p`` of the global batch reads the stream from counter
``p * counters_per_example`` on, so its mask is the same whether it sits on one device,
on replica 3 of 8, on another worker or in the second of several accumulated
micro-batches.  (Philox is counter-based: moving the counter start by ``k`` shifts the
generated numbers by ``4k`` exactly; ``tests/modeling/test_dropout.py`` checks this.)
A resumed run draws the very masks the uninterrupted run drew, with nothing to store.
A layer applied several times (ALBERT's shared layers) gets a different mask at each
application.  Under XLA the same holds, with XLA's own (different) Philox numbers.

Outside any scope (a user calling ``model(x, training=True)`` directly) the layer
falls back to ordinary random dropout.
"""
from __future__ import annotations

import contextlib
import threading

import tensorflow as tf

from albert_tf.keras import keras

_local = threading.local()
_PHILOX = 1  # tf.random.Algorithm.PHILOX
_VALUES_PER_COUNTER = 4  # Philox yields four 32-bit numbers per counter value


class _SeedState:
    def __init__(self, seed: tf.Tensor, example_offset: tf.Tensor):
        self.seed = seed
        self.example_offset = example_offset
        self.calls = 0


def _stack() -> list:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


@contextlib.contextmanager
def dropout_seed_scope(seed: tf.Tensor, example_offset: tf.Tensor | int = 0):
    """Within this scope, ``StatelessDropout`` layers draw masks from ``seed`` (int shape [2]);
    row ``i`` of a dropped tensor is example ``example_offset + i`` of the global batch."""
    stack = _stack()
    stack.append(_SeedState(tf.cast(seed, tf.int64), tf.cast(example_offset, tf.int64)))
    try:
        yield
    finally:
        stack.pop()


@contextlib.contextmanager
def rows_per_example(rows: int):
    """Within this scope the dropped tensors hold ``rows`` consecutive rows per example
    (a multiple-choice model runs its ``[B, choices, S]`` inputs as ``[B * choices, S]``):
    row ``i`` is keyed ``rows * example_offset + i``, so every choice row of every
    example keeps its own mask whatever the device count. Outside a seed scope, nothing."""
    stack = _stack()
    if not stack or rows == 1:
        yield
        return
    state = stack[-1]
    offset = state.example_offset
    state.example_offset = offset * rows  # the call counter goes on: masks stay distinct per call
    try:
        yield
    finally:
        state.example_offset = offset


def _next_call() -> tuple[tf.Tensor, tf.Tensor] | None:
    """(seed, example_offset) for the next dropout call in the current scope, or None outside one."""
    stack = _stack()
    if not stack:
        return None
    state = stack[-1]
    seed = tf.random.experimental.stateless_fold_in(state.seed, state.calls)
    state.calls += 1
    return seed, state.example_offset


def next_dropout_seed() -> tf.Tensor | None:
    """A fresh seed for the next dropout call in the current scope, or None outside one."""
    call = _next_call()
    return None if call is None else call[0]


def uniform_by_example(shape: tf.Tensor, seed: tf.Tensor, example_offset: tf.Tensor) -> tf.Tensor:
    """float32 uniforms in [0, 1) of ``shape`` ([batch, ...]) whose row ``i`` depends only on
    ``seed`` and the global example index ``example_offset + i``."""
    shape = tf.cast(shape, tf.int64)
    per_example = tf.reduce_prod(shape[1:])
    counters_per_example = (per_example + _VALUES_PER_COUNTER - 1) // _VALUES_PER_COUNTER
    key, counter = tf.raw_ops.StatelessRandomGetKeyCounter(seed=seed)
    start = tf.cast(example_offset * counters_per_example, tf.uint64)
    counter = tf.stack([start, counter[1]])
    values = tf.raw_ops.StatelessRandomUniformV2(
        shape=tf.stack([shape[0], counters_per_example * _VALUES_PER_COUNTER]), key=key, counter=counter,
        alg=_PHILOX, dtype=tf.float32)
    return tf.reshape(values[:, :per_example], shape)


def dropout(x: tf.Tensor, rate: float, training: bool | tf.Tensor | None) -> tf.Tensor:
    """Dropout for use inside model code: stateless and keyed by example within the loop's scope.

    The mask is drawn in float32 whatever ``x``'s dtype, so mixed precision drops the same units.
    """
    if not training or rate == 0.0:
        return x
    call = _next_call()
    if call is None:
        return tf.nn.dropout(x, rate=rate)
    seed, example_offset = call
    keep = uniform_by_example(tf.shape(x), seed, example_offset) >= rate
    scale = tf.cast(1.0 / (1.0 - rate), x.dtype)
    return tf.where(keep, x * scale, tf.zeros_like(x))


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
