"""AdamW and LAMB exactly as Google's ALBERT computes them, as tf_keras optimizers.

Per variable ``w`` with gradient ``g`` (the update math of the original's
``AdamWeightDecayOptimizer`` and ``LAMBOptimizer``):

    m = b1*m + (1-b1)*g
    v = b2*v + (1-b2)*g^2
    u = m / (sqrt(v) + eps)                 # NO bias correction
    u += weight_decay_rate * w              # decoupled; skipped for excluded names
    r = ||w|| / ||u||  (1 if either is 0)   # LAMB only; 1 for excluded names
    w -= r * lr * u

Exclusions match variable names with ``re.search`` as the original (by default
the substrings ``LayerNorm``, ``layer_norm``, ``bias``); LAMB's layer-adaptation
exclusions default to the weight-decay ones.  Slots are float32 ``adam_m`` /
``adam_v`` per variable, saved by ``tf.train.Checkpoint`` with the optimizer.

They subclass the Keras-2 ``keras.optimizers.Optimizer`` (``build`` /
``update_step``), so they work under every ``tf.distribute`` strategy and can
be wrapped by ``keras.mixed_precision.LossScaleOptimizer``.  Gradient clipping
is not done here: the training loop clips the all-reduced gradient (as
``create_optimizer`` of the original did around ``apply_gradients``).
"""
from __future__ import annotations

import re
from typing import Sequence

import tensorflow as tf

from albert_tf.fused import fused
from albert_tf.keras import keras
from albert_tf.training.schedule import AlbertLearningRateSchedule

# The original's exclusion list for weight decay (and, for LAMB, layer adaptation).
EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")

OPTIMIZERS = ("adamw", "lamb")


def variable_name(variable: tf.Variable) -> str:
    """The variable's name without the ``:0`` output suffix (as the original matched)."""
    name = variable.name
    match = re.match(r"^(.*):\d+$", name)
    return match.group(1) if match else name


def _matches_any(name: str, patterns: Sequence[str] | None) -> bool:
    return any(re.search(p, name) is not None for p in (patterns or ()))


def _update(gradient, variable, m, v, lr, beta_1: float, beta_2: float, epsilon: float, decay: float,
            adapt: bool):
    """One variable's new (value, m, v): the module docstring's arithmetic, op by op."""
    next_m = beta_1 * m + (1.0 - beta_1) * gradient
    next_v = beta_2 * v + (1.0 - beta_2) * tf.square(gradient)
    update = next_m / (tf.sqrt(next_v) + epsilon)
    if decay:
        update += decay * variable
    if adapt:
        w_norm = tf.norm(variable, ord=2)
        u_norm = tf.norm(update, ord=2)
        ratio = tf.where(w_norm > 0, tf.where(u_norm > 0, w_norm / u_norm, 1.0), 1.0)
        update_with_lr = ratio * lr * update
    else:
        update_with_lr = lr * update
    return variable - update_with_lr, next_m, next_v


# One pass over the variable and its slots (`albert_tf.fused`); the hyperparameters are Python
# values: one traced function per combination in use.
_fused_update = fused(_update)


class AdamWeightDecay(keras.optimizers.Optimizer):
    """Adam with decoupled weight decay and no bias correction (ALBERT's ``adamw``)."""

    _layer_adaptation = False

    def __init__(
        self,
        learning_rate=0.001,
        weight_decay_rate: float = 0.0,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-6,
        exclude_from_weight_decay: Sequence[str] | None = None,
        name: str = "AdamWeightDecay",
        **kwargs,
    ):
        # weight_decay=None turns off Keras' own (differently placed) decay;
        # jit_compile=False: the loop decides about XLA for the whole step.
        kwargs.setdefault("jit_compile", False)
        super().__init__(name=name, weight_decay=None, **kwargs)
        self._learning_rate = self._build_learning_rate(learning_rate)
        self.weight_decay_rate = float(weight_decay_rate)
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.exclude_from_weight_decay = list(exclude_from_weight_decay or [])

    # -- which variables get decay / adaptation (decided once, by name) --
    def _do_use_weight_decay(self, name: str) -> bool:
        if not self.weight_decay_rate:
            return False
        return not _matches_any(name, self.exclude_from_weight_decay)

    def _do_layer_adaptation(self, name: str) -> bool:
        return False

    def build(self, var_list):
        super().build(var_list)
        if getattr(self, "_built", False):
            return
        self._built = True
        self._adam_m, self._adam_v = [], []
        self._use_decay, self._use_adaptation = [], []
        for var in var_list:
            self._adam_m.append(self.add_variable_from_reference(var, "adam_m"))
            self._adam_v.append(self.add_variable_from_reference(var, "adam_v"))
            name = variable_name(var)
            self._use_decay.append(self._do_use_weight_decay(name))
            self._use_adaptation.append(self._do_layer_adaptation(name))

    def update_step(self, gradient, variable):
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        # Nothing of the update may run before its gradient exists: b1*m, b2*v and the
        # decay term need no gradient, and TensorFlow's executor would otherwise compute
        # them at the start of the step and hold them (three float32 copies of the
        # model, ~150 MB for ALBERT-base) through the whole forward and backward pass.
        with tf.control_dependencies([gradient]):
            self._apply_update(gradient, variable)

    def _apply_update(self, gradient, variable):
        index = self._index_dict[self._var_key(variable)]
        m, v = self._adam_m[index], self._adam_v[index]
        dtype = variable.dtype
        adapt = self._use_adaptation[index]
        # LAMB's trust-ratio updates stay plain ops: compiled, they saved no time in the pretraining
        # step and each weight shape's executable added to the process's memory (40 MB in all).
        update = _update if adapt else _fused_update
        new_variable, next_m, next_v = update(
            tf.cast(gradient, dtype), tf.convert_to_tensor(variable), tf.convert_to_tensor(m),
            tf.convert_to_tensor(v), tf.cast(self.learning_rate, dtype),
            self.beta_1, self.beta_2, self.epsilon,
            self.weight_decay_rate if self._use_decay[index] else 0.0, adapt)
        variable.assign(new_variable)
        m.assign(next_m)
        v.assign(next_v)

    @property
    def learning_rate_schedule(self) -> keras.optimizers.schedules.LearningRateSchedule | None:
        """The schedule this optimizer was built with (None for a constant rate)."""
        rate = self._learning_rate
        return rate if isinstance(rate, keras.optimizers.schedules.LearningRateSchedule) else None

    def get_config(self) -> dict:
        config = super().get_config()
        config.update(
            {
                "learning_rate": self._serialize_hyperparameter(self._learning_rate),
                "weight_decay_rate": self.weight_decay_rate,
                "beta_1": self.beta_1,
                "beta_2": self.beta_2,
                "epsilon": self.epsilon,
                "exclude_from_weight_decay": self.exclude_from_weight_decay,
            }
        )
        config.pop("weight_decay", None)
        return config


class LAMB(AdamWeightDecay):
    """LAMB: the AdamW update scaled per variable by the trust ratio ``||w|| / ||u||``."""

    def __init__(self, *args, exclude_from_layer_adaptation: Sequence[str] | None = None, name: str = "LAMB",
                 **kwargs):
        """AdamWeightDecay's arguments, and the variables whose update is not scaled by the trust ratio."""
        super().__init__(*args, name=name, **kwargs)
        # As the original: an empty/None list falls back to the weight-decay exclusions.
        self.exclude_from_layer_adaptation = list(
            exclude_from_layer_adaptation or self.exclude_from_weight_decay
        )

    def _do_layer_adaptation(self, name: str) -> bool:
        return not _matches_any(name, self.exclude_from_layer_adaptation)

    def get_config(self) -> dict:
        config = super().get_config()
        config["exclude_from_layer_adaptation"] = self.exclude_from_layer_adaptation
        return config


def learning_rate_at(optimizer: keras.optimizers.Optimizer, step: int) -> float:
    """The learning rate of update ``step`` (0-based) of any of the loop's optimizers, also
    when wrapped in a ``LossScaleOptimizer``: our schedules are evaluated at ``step``; another
    Keras optimizer reports its ``learning_rate`` (a constant, or its last update's rate)."""
    if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    schedule = optimizer.learning_rate_schedule if isinstance(optimizer, AdamWeightDecay) else None
    if schedule is not None:
        return float(schedule(step))
    return float(tf.convert_to_tensor(optimizer.learning_rate).numpy())


def create_optimizer(
    init_lr: float,
    num_train_steps: int,
    num_warmup_steps: int,
    optimizer: str = "lamb",
    poly_power: float = 1.0,
    start_warmup_step: int = 0,
    weight_decay_rate: float = 0.01,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-6,
    exclude_from_weight_decay: Sequence[str] = EXCLUDE_FROM_WEIGHT_DECAY,
) -> AdamWeightDecay:
    """The original's optimizer: AdamW or LAMB on the ALBERT schedule.

    Call inside ``strategy.scope()``.  Clipping to global norm 1.0 is the
    training loop's job (``TrainConfig.clip_norm``); fp16 loss scaling is added
    by the loop when the Keras policy is ``mixed_float16``.
    """
    schedule = AlbertLearningRateSchedule(
        init_lr,
        num_train_steps=num_train_steps,
        num_warmup_steps=num_warmup_steps,
        poly_power=poly_power,
        start_warmup_step=start_warmup_step,
    )
    common = dict(
        learning_rate=schedule,
        weight_decay_rate=weight_decay_rate,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        exclude_from_weight_decay=list(exclude_from_weight_decay),
    )
    name = optimizer.lower()
    if name == "adamw":
        return AdamWeightDecay(**common)
    if name == "lamb":
        return LAMB(**common)
    raise ValueError(f"unknown optimizer {optimizer!r}: expected one of {', '.join(OPTIMIZERS)}")
