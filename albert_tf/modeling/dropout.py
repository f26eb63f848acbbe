"""Dropout whose masks are a pure function of (seed, step, call site, example, coordinates).

It lives with the model (every layer that drops uses it) while the training loop only
opens the scope, so the model floor needs nothing from ``albert_tf.training``.

Why: exact resume, one-device semantics on every topology, and the same numbers at any
padded length.  A stateful RNG (Keras' default dropout) would have to be checkpointed per
replica and per layer, and its masks would change with the device count.  Instead the
training loop opens ``dropout_seed_scope(seed, example_offset)`` around each forward pass:

- ``seed`` comes from the run's ``--seed`` and the global step only (the loop's
  ``step_seed``);
- ``example_offset`` is the global position, in the step's global batch, of the first
  example of the micro-batch on this replica.

Every ``StatelessDropout`` call inside folds its call index (the order of calls while
tracing, fixed by the model's code) into the seed, and decides element
``[i, c1, ..., ck]`` of the dropped tensor from a counter-based hash of the global example
index ``example_offset + i`` and the coordinates ``c1..ck`` themselves — never from the
element's flat index, which moves when the batch is padded to another length.  So:

- example ``p`` of the global batch gets the same mask whether it sits on one device, on
  replica 3 of 8, on another worker or in the second of several accumulated micro-batches;
- a row's mask at a real position (token ``t``; attention from ``q`` to ``k``) is the same
  whether the batch is padded to its longest row, to a bucket or to ``max_seq_length``,
  so trimming padding changes no number;
- a resumed run draws the very masks the uninterrupted run drew, with nothing to store.

The hash is evaluated axis by axis (``h = mix(h + mix(c + salt_axis))``, ``mix`` a 32-bit
integer finalizer with full avalanche), so only the last axis' step runs over the whole
tensor: about ten integer ops per element, as fast as the Philox draw it replaced (2-core
AMX Xeon, graph mode, mask + apply: [32, 12, 128, 128] bf16 17.5-18.1 ms against 18.2-23.5 ms,
[32, 128, 768] float32 3.7-4.3 ms against 3.5-4.3 ms; a whole ALBERT-base step alike within
the shared machine's noise).  XLA computes the same integers, so masks
agree with and without ``jit_compile``.  A layer applied several times (ALBERT's shared
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


# Named, not "auto_select": under XLA (--enable_xla, TPUs) auto_select picks another generator than on a
# CPU or GPU without it, and the masks would change with the compiler. Philox is what auto_select gives there.
SEED_ALGORITHM = "philox"


def _next_call() -> tuple[tf.Tensor, tf.Tensor] | None:
    """(seed, example_offset) for the next dropout call in the current scope, or None outside one."""
    stack = _stack()
    if not stack:
        return None
    state = stack[-1]
    seed = tf.random.experimental.stateless_fold_in(state.seed, state.calls, alg=SEED_ALGORITHM)
    state.calls += 1
    return seed, state.example_offset


def next_dropout_seed() -> tf.Tensor | None:
    """A fresh seed for the next dropout call in the current scope, or None outside one."""
    call = _next_call()
    return None if call is None else call[0]


def _u32(value) -> tf.Tensor:
    return tf.constant(value, tf.uint32)


def _mix(x: tf.Tensor) -> tf.Tensor:
    """A bijective 32-bit finalizer with full avalanche (xorshift-multiply, "lowbias32")."""
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))
    x = x * _u32(0x7FEB352D)
    x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(15)))
    x = x * _u32(0x846CA68B)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, _u32(16)))


def bits_by_coordinates(shape: tf.Tensor, seed: tf.Tensor, example_offset: tf.Tensor) -> tf.Tensor:
    """uint32 hash bits of ``shape`` ([batch, ...]) whose element ``[i, c1, ..., ck]`` depends only
    on ``seed``, the global example index ``example_offset + i`` and ``c1..ck`` (not on the
    tensor's other dimensions: a prefix of any axis is the same at any length of it)."""
    shape = tf.cast(shape, tf.int32)
    rank = shape.shape[0]
    keys = tf.random.stateless_uniform([2], seed, minval=None, maxval=None, dtype=tf.uint32, alg=SEED_ALGORITHM)
    examples = tf.cast(tf.cast(example_offset, tf.int64) + tf.range(tf.cast(shape[0], tf.int64)), tf.uint32)
    h = _mix(tf.bitwise.bitwise_xor(examples, keys[0]))
    for axis in range(1, rank):
        # The axis' salt: distinct per axis and per call, so rows and columns hash apart.
        salt = keys[1] + _u32((0x9E3779B9 * axis) & 0xFFFFFFFF)
        coordinates = _mix(tf.bitwise.bitwise_xor(tf.cast(tf.range(shape[axis]), tf.uint32), salt))
        h = _mix(tf.expand_dims(h, -1) + coordinates)  # [..., 1] + [d]: the product of the axes so far
    return h


def uniform_by_example(shape: tf.Tensor, seed: tf.Tensor, example_offset: tf.Tensor) -> tf.Tensor:
    """float32 uniforms in [0, 1) of ``shape`` ([batch, ...]) whose element ``[i, c...]`` depends
    only on ``seed``, the global example index ``example_offset + i`` and the coordinates ``c``."""
    bits = bits_by_coordinates(shape, seed, example_offset)
    return tf.cast(tf.bitwise.right_shift(bits, _u32(8)), tf.float32) * (1.0 / (1 << 24))


def dropout(x: tf.Tensor, rate: float, training: bool | tf.Tensor | None) -> tf.Tensor:
    """Dropout for use inside model code: stateless and keyed by example and coordinates within the
    loop's scope.  The mask does not depend on ``x``'s dtype, so mixed precision drops the same units.
    """
    if not training or rate == 0.0:
        return x
    call = _next_call()
    if call is None:
        return tf.nn.dropout(x, rate=rate)
    seed, example_offset = call
    # Compare the hash bits with rate * 2^32 directly: no float conversion of the whole tensor.
    threshold = _u32(min(int(round(rate * 2.0 ** 32)), 2 ** 32 - 1))
    keep = bits_by_coordinates(tf.shape(x), seed, example_offset) >= threshold
    scale = 1.0 / (1.0 - rate)
    if x.dtype == tf.float32:
        kept = x * scale
    else:  # bf16 holds 1/0.9 as 1.109375: every kept unit 0.16% low. Scaled in float32, rounded once.
        kept = tf.cast(tf.cast(x, tf.float32) * scale, x.dtype)
    return tf.where(keep, kept, tf.zeros_like(x))


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
