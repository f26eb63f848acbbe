"""The in-graph training step of ``loop.Trainer``: ``steps_per_loop`` updates in one ``tf.function``.

How a step runs: each replica takes its per-replica batch, splits it into
``gradient_accumulation_steps`` micro-batches and sums their gradients (one
update for the whole batch), all-reduces gradients, loss and metrics in one
collective, unscales (fp16), clips the all-reduced gradient to ``clip_norm`` and
applies the optimizer.  Every forward pass of step ``s`` drops out with the seed
``step_seed(seed, s)``, keyed by the example's position in the global batch
(``albert_tf.modeling.dropout``), so masks do not depend on the topology.

A loss normalized by a data-dependent count (the MLM loss's ``sum(w)``) is normalized
by the global count: the task's ``loss_denominators_fn`` gives the counts, the step
all-reduces them before the forward pass, and each micro-batch's loss is its share of
the global loss.  The loop over steps is a ``tf.while_loop``, cut short by a stop
request (any replica's) or a non-finite loss.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import tensorflow as tf

from albert_tf.keras import keras
from albert_tf.modeling.dropout import SEED_ALGORITHM, dropout_seed_scope
from albert_tf.training.distribution import replica_device_type
from albert_tf.training.xla import XlaSetting, use_xla

# A metric is a scalar (averaged over batches) or a (numerator, denominator) pair whose
# sums over all batches are divided at the end (exact streaming accuracy / weighted mean).
MetricValue = Any
MetricParts = dict[str, tuple[tf.Tensor, tf.Tensor]]
LossFn = Callable[[keras.Model, Any, bool], Any]


def step_seed(base_seed: int, step: tf.Tensor) -> tf.Tensor:
    """The seed of every forward pass of one training step (all replicas and micro-batches:
    examples are told apart by their position, see ``albert_tf.modeling.dropout``)."""
    seed = tf.constant([base_seed, 0x5EED], tf.int64)
    return tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int64), alg=SEED_ALGORITHM)


def scalar(value) -> tf.Tensor:
    """A float32 scalar (losses and metrics must be scalars; this also fixes unknown shapes)."""
    return tf.reshape(tf.cast(value, tf.float32), [])


def split_loss_output(output) -> tuple[tf.Tensor, Mapping[str, MetricValue]]:
    """``loss_fn``'s ``(loss, metrics)`` or bare ``loss``, as ``(loss, metrics)``."""
    if isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(output[1], Mapping):
        return output[0], output[1]
    return output, {}


def metric_parts(kinds: Mapping[str, bool], metrics: Mapping[str, MetricValue]) -> MetricParts:
    """Each metric as a (numerator, denominator) pair; ``kinds[name]``: is it a pair already."""
    parts = {}
    for name, is_pair in kinds.items():
        if name not in metrics:
            raise KeyError(f"loss_fn returned no metric {name!r} in this call (it did on the first)")
        value = metrics[name]
        if is_pair:
            parts[name] = (scalar(value[0]), scalar(value[1]))
        else:
            parts[name] = (scalar(value), tf.constant(1.0))
    return parts


def zero_metric_parts(kinds: Mapping[str, bool]) -> MetricParts:
    return {name: (tf.constant(0.0), tf.constant(0.0)) for name in kinds}


def with_loss_scaling(optimizer: keras.optimizers.Optimizer) -> keras.optimizers.Optimizer:
    """Wraps the optimizer in a ``LossScaleOptimizer`` under the ``mixed_float16`` policy."""
    if (keras.mixed_precision.global_policy().name == "mixed_float16"
            and not isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)):
        return keras.mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer


def compiles_with_xla(setting: XlaSetting, strategy: tf.distribute.Strategy) -> bool:
    """``--enable_xla`` for the gradient computation, unless bf16 on CPU overrules it (``xla.use_xla``)."""
    return use_xla(setting, keras.mixed_precision.global_policy().compute_dtype, replica_device_type(strategy))


@dataclasses.dataclass(frozen=True)
class StepSettings:
    train_batch_size: int  # global batch of one update
    num_replicas: int
    gradient_accumulation_steps: int
    clip_norm: float | None
    seed: int
    xla: bool

    def check_batch_split(self) -> None:
        """The global batch must split evenly into replicas and micro-batches."""
        per_replica, rem = divmod(self.train_batch_size, self.num_replicas)
        if rem:
            raise ValueError(f"train_batch_size {self.train_batch_size} is not divisible by the "
                             f"{self.num_replicas} replicas")
        if per_replica % self.gradient_accumulation_steps:
            raise ValueError(
                f"the per-replica batch {per_replica} (train_batch_size {self.train_batch_size} / "
                f"{self.num_replicas} replicas) is not divisible by gradient_accumulation_steps "
                f"{self.gradient_accumulation_steps}")

    def check_batches(self, element_spec) -> None:
        """The training dataset must yield per-replica batches (where their size is static)."""
        per_replica = self.train_batch_size // self.num_replicas
        for spec in tf.nest.flatten(element_spec):
            size = spec.shape[0] if spec.shape.rank else None
            if size is not None and size != per_replica:
                raise ValueError(
                    f"train_dataset_fn yields per-replica batches of {size}, expected {per_replica} "
                    f"(train_batch_size {self.train_batch_size} / {self.num_replicas} replicas)")


class TrainStep:
    """Builds the ``train_steps(iterator, num_steps)`` function of one model and optimizer.

    It returns the sums over the steps it ran of the loss, the gradient norm and the metric
    parts, the number of steps, and whether it stopped on a request or a non-finite loss.
    """

    def __init__(self, model: keras.Model, optimizer: keras.optimizers.Optimizer, loss_fn: LossFn,
                 denominators_fn: Callable[[Any], Mapping[str, tf.Tensor]] | None,
                 metric_kinds: Mapping[str, bool], global_step: tf.Variable, stop_flag: tf.Variable,
                 settings: StepSettings):
        self.model, self.optimizer, self.loss_fn = model, optimizer, loss_fn
        self.denominators_fn = denominators_fn
        self.metric_kinds = dict(metric_kinds)
        self.global_step, self.stop_flag, self.settings = global_step, stop_flag, settings
        self.loss_scale = optimizer if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer) else None
        self._gradients_fn = (tf.function(self._replica_gradients, jit_compile=True)
                              if settings.xla else self._replica_gradients)

    def _micro_gradients(self, features, step, micro_step, replica_id, denominators):
        variables = self.model.trainable_variables
        micro_size = tf.shape(tf.nest.flatten(features)[0])[0]
        per_replica = self.settings.train_batch_size // self.settings.num_replicas
        # This micro-batch's first example's position in the global batch (keys dropout masks).
        offset = (tf.cast(replica_id, tf.int64) * per_replica
                  + tf.cast(micro_step, tf.int64) * tf.cast(micro_size, tf.int64))
        kwargs = {} if denominators is None else {"denominators": denominators}
        with tf.GradientTape() as tape:
            with dropout_seed_scope(step_seed(self.settings.seed, step), offset):
                loss, metrics = split_loss_output(self.loss_fn(self.model, features, True, **kwargs))
            loss = scalar(loss)
            scaled = self.loss_scale.get_scaled_loss(loss) if self.loss_scale else loss
        grads = tape.gradient(scaled, variables)
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        return grads, loss, metric_parts(self.metric_kinds, metrics)

    def _replica_gradients(self, features, step, replica_id, denominators=None):
        """Gradients summed over the micro-batches of this replica's batch (divided by their count
        when the losses are per-batch means, i.e. without ``denominators``)."""
        count = self.settings.gradient_accumulation_steps
        if count == 1:
            return self._micro_gradients(features, step, 0, replica_id, denominators)
        variables = self.model.trainable_variables
        micro = tf.nest.map_structure(
            lambda t: tf.reshape(t, tf.concat([[count, -1], tf.shape(t)[1:]], 0)), features)
        has_grad = []  # filled while tracing the body: which variables get a gradient

        def body(i, grads, loss, metrics):
            batch = tf.nest.map_structure(lambda t: t[i], micro)
            g, l, m = self._micro_gradients(batch, step, i, replica_id, denominators)
            has_grad[:] = [x is not None for x in g]
            # Snapshot: Grappler would otherwise merge this sum with the gradient's own (AddN of a shared or
            # tied weight's parts), and its memory optimizer turns such a large AddN into a TemporaryVariable
            # that fails in this nested loop (AlreadyExistsError at ALBERT-base sizes).  Same values.
            g = [tf.zeros_like(v) if x is None else tf.raw_ops.Snapshot(input=x) for x, v in zip(g, variables)]
            return (i + 1, [a + b for a, b in zip(grads, g)], loss + l,
                    tf.nest.map_structure(tf.add, metrics, m))

        init = (tf.constant(0), [tf.zeros_like(v) for v in variables], tf.constant(0.0),
                zero_metric_parts(self.metric_kinds))
        _, grads, loss, metrics = tf.while_loop(lambda i, *_: i < count, body, init)
        divisor = count if denominators is None else 1  # shares of a global loss just add up
        grads = [g / divisor if keep else None for g, keep in zip(grads, has_grad)]
        return grads, loss / divisor, metrics

    def _replica_train_step(self, features, step, stop_flag):
        ctx = tf.distribute.get_replica_context()
        denominators = None
        if self.denominators_fn is not None:
            local = {name: scalar(v) for name, v in self.denominators_fn(features).items()}
            denominators = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local)
        grads, loss, metrics = self._gradients_fn(features, step, ctx.replica_id_in_sync_group, denominators)
        pairs = [(g, v) for g, v in zip(grads, self.model.trainable_variables) if g is not None]
        if not pairs:
            raise ValueError("loss_fn's loss does not depend on any trainable variable")
        payload = {"grads": [g for g, _ in pairs], "loss": loss, "metrics": metrics,
                   "stop": tf.identity(stop_flag)}
        payload = ctx.all_reduce(tf.distribute.ReduceOp.SUM, payload)
        replicas = self.settings.num_replicas if denominators is None else 1
        grads = [g / replicas for g in payload["grads"]]
        if self.loss_scale:
            grads = self.loss_scale.get_unscaled_gradients(grads)
        grad_norm = tf.linalg.global_norm(grads)
        if self.settings.clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.settings.clip_norm, use_norm=grad_norm)
        self.optimizer.apply_gradients(zip(grads, [v for _, v in pairs]), skip_gradients_aggregation=True)
        return {"loss": payload["loss"] / replicas, "metrics": payload["metrics"],
                "grad_norm": grad_norm, "stop": payload["stop"]}

    def build(self, strategy: tf.distribute.Strategy):
        """The ``tf.function`` running up to ``num_steps`` updates from ``iterator``."""
        check_grad_norm = self.loss_scale is None  # fp16 skips non-finite steps by design
        global_step, stop_flag = self.global_step, self.stop_flag

        @tf.function
        def train_steps(iterator, num_steps):
            loss_sum = tf.constant(0.0)
            norm_sum = tf.constant(0.0)
            metric_sums = zero_metric_parts(self.metric_kinds)
            done = tf.constant(0)
            stopped = tf.constant(False)
            non_finite = tf.constant(False)
            last_loss = tf.constant(0.0)
            for _ in tf.range(num_steps):
                features = strategy.experimental_distribute_values_from_function(lambda ctx: next(iterator))
                out = strategy.run(self._replica_train_step,
                                   args=(features, global_step.read_value(), stop_flag.read_value()))
                out = tf.nest.map_structure(lambda x: strategy.experimental_local_results(x)[0], out)
                with tf.control_dependencies([out["loss"]]):  # count only a step that ran
                    global_step.assign_add(1)
                done += 1
                last_loss = out["loss"]
                loss_sum += out["loss"]
                norm_sum += out["grad_norm"]
                metric_sums = tf.nest.map_structure(tf.add, metric_sums, out["metrics"])
                finite = tf.math.is_finite(out["loss"])
                if check_grad_norm:
                    finite = tf.logical_and(finite, tf.math.is_finite(out["grad_norm"]))
                if not finite:
                    non_finite = tf.constant(True)
                    break
                if out["stop"] > 0:
                    stopped = tf.constant(True)
                    break
            return {"loss_sum": loss_sum, "grad_norm_sum": norm_sum, "metrics": metric_sums,
                    "steps": done, "stopped": stopped, "non_finite": non_finite, "last_loss": last_loss}

        return train_steps
