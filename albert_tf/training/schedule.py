"""The learning-rate schedule of Google's ALBERT (`optimization.create_optimizer`).

Polynomial decay from ``init_lr`` to 0 over ``num_train_steps`` (``poly_power``,
default 1 = linear), with a linear warmup that replaces it while
``step - start_warmup_step < num_warmup_steps``:

    lr = init_lr * (step - start_warmup_step) / num_warmup_steps

``step`` is the number of updates already applied (the original's
``global_step`` before its increment), so the first update of a run with
warmup uses lr 0, exactly as the original.  The arithmetic follows the
original's dtypes: the decay in float32, the warmup's step difference in int32.
As in the original, a step before ``start_warmup_step`` gives a negative
warmup rate; ``start_warmup_step`` is meant for restarting warmup at a step
already reached.
"""
from __future__ import annotations

import tensorflow as tf

from albert_tf.keras import keras


class AlbertLearningRateSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Warmup + polynomial decay to zero, as Google's ALBERT computes it."""

    def __init__(
        self,
        init_lr: float,
        num_train_steps: int,
        num_warmup_steps: int = 0,
        poly_power: float = 1.0,
        start_warmup_step: int = 0,
        name: str = "AlbertLearningRateSchedule",
    ):
        super().__init__()
        if num_train_steps <= 0:
            raise ValueError(f"num_train_steps must be > 0 (the decay length), got {num_train_steps}")
        if num_warmup_steps < 0:
            raise ValueError(f"num_warmup_steps must be >= 0, got {num_warmup_steps}")
        self.init_lr = float(init_lr)
        self.num_train_steps = int(num_train_steps)
        self.num_warmup_steps = int(num_warmup_steps)
        self.poly_power = float(poly_power)
        self.start_warmup_step = int(start_warmup_step)
        self.name = name

    def __call__(self, step) -> tf.Tensor:
        with tf.name_scope(self.name):
            step_float = tf.cast(step, tf.float32)
            decay_steps = tf.constant(self.num_train_steps, tf.float32)
            p = tf.minimum(step_float, decay_steps) / decay_steps
            init_lr = tf.constant(self.init_lr, tf.float32)
            # tf.compat.v1.train.polynomial_decay with end_learning_rate 0, cycle False.
            decayed = init_lr * tf.pow(1.0 - p, self.poly_power)
            if not self.num_warmup_steps:
                return decayed
            steps_int = tf.cast(step, tf.int32) - tf.constant(self.start_warmup_step, tf.int32)
            warmup_int = tf.constant(self.num_warmup_steps, tf.int32)
            warmup_lr = self.init_lr * (tf.cast(steps_int, tf.float32) / tf.cast(warmup_int, tf.float32))
            is_warmup = tf.cast(steps_int < warmup_int, tf.float32)
            return (1.0 - is_warmup) * decayed + is_warmup * warmup_lr

    def get_config(self) -> dict:
        return {
            "init_lr": self.init_lr,
            "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps,
            "poly_power": self.poly_power,
            "start_warmup_step": self.start_warmup_step,
            "name": self.name,
        }
