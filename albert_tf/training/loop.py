"""The one custom training loop used by pretraining, GLUE and SQuAD.

A driver describes its job as a ``Task`` (build the model, compute the loss,
make the datasets, optionally initialize from a checkpoint) and hands it with an
optimizer factory and a ``TrainConfig`` to a ``Trainer``:

    trainer = Trainer(task, strategy, optimizer_fn, config)
    trainer.add_save_hook(evaluator.after_save)   # e.g. evaluate each checkpoint
    trainer.train()                     # resumes from output_dir if it holds a checkpoint
    results = trainer.evaluate(max_eval_steps=100)

This module is the step and its loop; when to save, what to keep and how to resume
are ``checkpoint_policy``'s, the scalars ``summaries``', signals ``signals``', and
evaluation runs through ``evaluation.BatchRunner``.

How a step runs: each replica takes its per-replica batch, splits it into
``gradient_accumulation_steps`` micro-batches and sums their gradients (one
update for the whole batch), all-reduces gradients, loss and metrics in one
collective, unscales (fp16), clips the all-reduced gradient to ``clip_norm`` and
applies the optimizer.

One-device semantics on every topology: the same flags and data give the same
weights on one device, N replicas, N workers or with gradient accumulation.  The
global batch of a step is the same on all of them (``data.py``), dropout masks are
keyed by an example's position in it (``albert_tf.modeling.dropout``), and a loss normalized by
a data-dependent count (the MLM loss's ``sum(w)``) is normalized by the global count:
the task's ``loss_denominators_fn`` gives the counts, the loop all-reduces them before
the forward pass, and each micro-batch's loss is its share of the global loss.
``steps_per_loop`` steps run inside one ``tf.function`` call (a ``tf.while_loop``),
cut short at log/save boundaries.

Resume is exact: a checkpoint holds the model, the optimizer (slots, iteration
count, fp16 loss scale) and ``global_step``; each worker also saves its input
iterator's position with the topology it was saved under; dropout masks are a
function of (seed, step, example position) — see ``albert_tf.modeling.dropout``.  Resuming on
another topology fast-forwards the input stream by ``global_step`` global batches
instead.  SIGTERM/SIGINT stop the run after the current step with a
checkpoint and exit code 0.  A NaN/Inf loss stops it with ``NonFiniteLossError``
naming the step and writes no checkpoint.
"""
from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable, Mapping

import tensorflow as tf
from absl import logging

from albert_tf.errors import RunError
from albert_tf.keras import keras
from albert_tf.modeling.dropout import dropout_seed_scope
from albert_tf.training.checkpoint_policy import CheckpointPolicy
from albert_tf.data.input_pipeline import TrainInputContext
from albert_tf.training.distribution import worker_info
from albert_tf.training.evaluation import BatchRunner
from albert_tf.training.signals import StopSignals, TrainingInterrupted, run_interruptibly
from albert_tf.training.summaries import LazySummaryWriter, format_duration, write_scalar_summary, write_scalars
from albert_tf.training.xla import XlaSetting, parse_xla_setting, use_xla
from albert_tf.weights import files

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]
# A metric is a scalar (averaged over batches) or a (numerator, denominator) pair whose
# sums over all batches are divided at the end (exact streaming accuracy / weighted mean).
MetricValue = Any
LossFn = Callable[[keras.Model, Any, bool], Any]


@dataclasses.dataclass
class Task:
    """What a driver trains.

    build_model: returns the Keras model; called inside ``strategy.scope()``.  It need not
      be built: the Trainer calls ``loss_fn`` once on a zero batch to create its variables.
    loss_fn: ``loss_fn(model, features, training) -> (loss, metrics)`` with ``loss`` the
      scalar mean over this replica's batch and ``metrics`` a dict of scalars or
      ``(numerator, denominator)`` pairs (e.g. ``(sum(w * correct), sum(w))``).
    train_dataset_fn / eval_dataset_fn: ``fn(input_context) -> tf.data.Dataset`` of
      per-replica batches (``input_context.get_per_replica_batch_size(global_batch)``),
      sharded by ``input_context.input_pipeline_id``; training data must repeat.
      ``data.make_tfrecord_dataset`` builds such datasets.
    init_fn: ``init_fn(model)``, run only when ``output_dir`` has no checkpoint yet
      (e.g. loading ``--init_checkpoint``).
    loss_denominators_fn: optional ``fn(features) -> {name: scalar}``, sums over the
      batch's examples (e.g. the MLM weights).  When given, training calls
      ``loss_fn(model, features, True, denominators=...)`` with those sums over the whole
      global batch (all replicas and micro-batches), and ``loss`` must be this
      micro-batch's share of the global loss (e.g. ``sum(w * nll) / (global sum(w) + eps)``):
      the loop adds the shares instead of averaging per-batch losses.  Evaluation still
      calls ``loss_fn(model, features, False)``.
    """

    build_model: Callable[[], keras.Model]
    loss_fn: LossFn
    train_dataset_fn: DatasetFn | None = None
    eval_dataset_fn: DatasetFn | None = None
    init_fn: Callable[[keras.Model], None] | None = None
    loss_denominators_fn: Callable[[Any], Mapping[str, tf.Tensor]] | None = None


@dataclasses.dataclass
class TrainConfig:
    """Loop settings (the drivers map their flags onto these)."""

    output_dir: str
    num_train_steps: int
    train_batch_size: int  # global batch of one update (all replicas, all micro-batches)
    steps_per_loop: int = 1000  # the original's iterations_per_loop
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_steps: int = 100
    gradient_accumulation_steps: int = 1
    clip_norm: float | None = 1.0
    enable_xla: XlaSetting = False  # True, False or "force" (xla.use_xla decides)
    seed: int = 12345  # the one default of --seed (training.flags reads it from here)
    handle_signals: bool = True

    def validate(self) -> None:
        for name in ("num_train_steps", "train_batch_size", "steps_per_loop", "save_checkpoints_steps",
                     "log_steps", "gradient_accumulation_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        parse_xla_setting(self.enable_xla)
        if self.clip_norm is not None and self.clip_norm <= 0:
            raise ValueError(f"clip_norm must be > 0 or None, got {self.clip_norm}")


@dataclasses.dataclass
class TrainResult:
    global_step: int
    checkpoint_path: str | None
    logs: dict[str, float]


class NonFiniteLossError(RunError):
    """The loss (or gradient) became NaN/Inf; no checkpoint of that state was written."""


def step_seed(base_seed: int, step: tf.Tensor) -> tf.Tensor:
    """The seed of every forward pass of one training step (all replicas and micro-batches:
    examples are told apart by their position, see ``albert_tf.modeling.dropout``)."""
    seed = tf.constant([base_seed, 0x5EED], tf.int64)
    return tf.random.experimental.stateless_fold_in(seed, tf.cast(step, tf.int64))


def _scalar(value) -> tf.Tensor:
    """A float32 scalar (losses and metrics must be scalars; this also fixes unknown shapes)."""
    return tf.reshape(tf.cast(value, tf.float32), [])


def _split_loss_output(output) -> tuple[tf.Tensor, Mapping[str, MetricValue]]:
    if isinstance(output, (tuple, list)) and len(output) == 2 and isinstance(output[1], Mapping):
        return output[0], output[1]
    return output, {}


class Trainer:
    """Trains and evaluates one ``Task`` under one ``tf.distribute`` strategy."""

    def __init__(
        self,
        task: Task,
        strategy: tf.distribute.Strategy,
        optimizer_fn: Callable[[], keras.optimizers.Optimizer],
        config: TrainConfig,
    ):
        config.validate()
        if tf.distribute.has_strategy():
            raise ValueError("create the Trainer outside strategy.scope(): it enters the scope itself")
        self.task, self.strategy, self.config = task, strategy, config
        self.worker = worker_info(strategy)
        self.num_replicas = strategy.num_replicas_in_sync
        self.num_local_replicas = len(strategy.extended.worker_devices)
        # Same initial weights in every fresh run (multi-worker runs broadcast worker 0's anyway).
        keras.utils.set_random_seed(config.seed)
        with strategy.scope():
            self.model = task.build_model()
            optimizer = optimizer_fn()
            if (keras.mixed_precision.global_policy().name == "mixed_float16"
                    and not isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)):
                optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
            self.optimizer = optimizer
            self.global_step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        self._loss_scale = optimizer if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer) else None
        # --enable_xla, unless bf16 on CPU overrules it (xla.use_xla).
        self.xla_compiled = use_xla(config.enable_xla, keras.mixed_precision.global_policy().compute_dtype,
                                    tf.DeviceSpec.from_string(strategy.extended.worker_devices[0]).device_type
                                    or "CPU")
        inner = self._loss_scale.inner_optimizer if self._loss_scale else optimizer
        items = dict(model=self.model, optimizer=inner, global_step=self.global_step)
        if self._loss_scale:
            items["loss_scale_optimizer"] = self._loss_scale
        self.checkpoint = tf.train.Checkpoint(**items)
        # Read by the in-graph loop every step; set from the main thread on SIGTERM/SIGINT.
        self._stop_flag = tf.Variable(0.0, trainable=False, name="stop_requested")
        self._metric_kinds: dict[str, bool] | None = None  # name -> is a (num, den) pair
        self._train_fn = None
        self._eval_runner: BatchRunner | None = None
        self._last_saved_step: int | None = None
        self.policy = CheckpointPolicy(config.output_dir, config.save_checkpoints_steps,
                                       config.keep_checkpoint_max, self.worker, self._barrier)
        self.save_hooks: list[Callable[[str], Any]] = []
        # What ran, for the log (and the topology tests): one-device semantics make it invisible otherwise.
        logging.info("Topology: %d worker(s), %d replica(s) in sync, %d micro-batch(es) per replica per step",
                     self.worker.num_workers, self.num_replicas, config.gradient_accumulation_steps)

    # ------------------------------------------------------------------ setup
    def _input_context(self, global_batches_to_skip: int = 0) -> TrainInputContext:
        return TrainInputContext(
            num_input_pipelines=self.worker.num_workers,
            input_pipeline_id=self.worker.worker_index,
            num_replicas_in_sync=self.num_replicas,
            global_batches_to_skip=global_batches_to_skip,
        )

    @property
    def _topology(self) -> list[int]:
        """What an input position saved by this worker depends on."""
        return [self.worker.num_workers, self.num_local_replicas, self.config.train_batch_size]

    def _ensure_built(self, element_spec) -> None:
        """Creates the model's and optimizer's variables; learns the metrics' structure."""
        if self._metric_kinds is not None:
            return

        def zeros(spec):
            shape = [1 if d is None else d for d in spec.shape.as_list()]
            return tf.zeros(shape, spec.dtype)

        features = tf.nest.map_structure(zeros, element_spec)
        with self.strategy.scope():
            _, metrics = _split_loss_output(self.task.loss_fn(self.model, features, False))
            if not self.model.trainable_variables:
                raise ValueError("the model has no trainable variables after calling loss_fn")
            self.optimizer.build(self.model.trainable_variables)
        self._metric_kinds = {name: isinstance(v, (tuple, list)) for name, v in metrics.items()}
        if "loss" in self._metric_kinds:
            raise ValueError("loss_fn's metrics must not be named 'loss' (the loop reports the loss)")
        for layer in self.model.submodules:
            if isinstance(layer, keras.layers.Dropout) and layer.rate > 0:
                logging.warning(
                    "Layer %s is a keras.layers.Dropout: its masks are not reproduced on resume. "
                    "Use albert_tf.modeling.dropout.StatelessDropout for exact resume.", layer.name)
                break

    def _metric_parts(self, metrics: Mapping[str, MetricValue]) -> dict[str, tuple[tf.Tensor, tf.Tensor]]:
        parts = {}
        for name, is_pair in self._metric_kinds.items():
            if name not in metrics:
                raise KeyError(f"loss_fn returned no metric {name!r} in this call (it did on the first)")
            value = metrics[name]
            if is_pair:
                parts[name] = (_scalar(value[0]), _scalar(value[1]))
            else:
                parts[name] = (_scalar(value), tf.constant(1.0))
        return parts

    def _zero_metric_parts(self) -> dict[str, tuple[tf.Tensor, tf.Tensor]]:
        return {name: (tf.constant(0.0), tf.constant(0.0)) for name in self._metric_kinds}

    # ------------------------------------------------------------------ one step
    def _micro_gradients(self, features, step, micro_step, replica_id, denominators):
        variables = self.model.trainable_variables
        micro_size = tf.shape(tf.nest.flatten(features)[0])[0]
        per_replica = self.config.train_batch_size // self.num_replicas
        # This micro-batch's first example's position in the global batch (keys dropout masks).
        offset = (tf.cast(replica_id, tf.int64) * per_replica
                  + tf.cast(micro_step, tf.int64) * tf.cast(micro_size, tf.int64))
        kwargs = {} if denominators is None else {"denominators": denominators}
        with tf.GradientTape() as tape:
            with dropout_seed_scope(step_seed(self.config.seed, step), offset):
                loss, metrics = _split_loss_output(self.task.loss_fn(self.model, features, True, **kwargs))
            loss = _scalar(loss)
            scaled = self._loss_scale.get_scaled_loss(loss) if self._loss_scale else loss
        grads = tape.gradient(scaled, variables)
        grads = [None if g is None else tf.convert_to_tensor(g) for g in grads]
        return grads, loss, self._metric_parts(metrics)

    def _replica_gradients(self, features, step, replica_id, denominators=None):
        """Gradients summed over the micro-batches of this replica's batch (divided by their count
        when the losses are per-batch means, i.e. without ``denominators``)."""
        count = self.config.gradient_accumulation_steps
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
            g = [tf.zeros_like(v) if x is None else x for x, v in zip(g, variables)]
            return (i + 1, [a + b for a, b in zip(grads, g)], loss + l,
                    tf.nest.map_structure(tf.add, metrics, m))

        init = (tf.constant(0), [tf.zeros_like(v) for v in variables], tf.constant(0.0),
                self._zero_metric_parts())
        _, grads, loss, metrics = tf.while_loop(lambda i, *_: i < count, body, init)
        divisor = count if denominators is None else 1  # shares of a global loss just add up
        grads = [g / divisor if keep else None for g, keep in zip(grads, has_grad)]
        return grads, loss / divisor, metrics

    def _replica_train_step(self, features, step, stop_flag):
        ctx = tf.distribute.get_replica_context()
        denominators = None
        if self.task.loss_denominators_fn is not None:
            local = {name: _scalar(v) for name, v in self.task.loss_denominators_fn(features).items()}
            denominators = ctx.all_reduce(tf.distribute.ReduceOp.SUM, local)
        grads, loss, metrics = self._gradients_fn(features, step, ctx.replica_id_in_sync_group, denominators)
        pairs = [(g, v) for g, v in zip(grads, self.model.trainable_variables) if g is not None]
        if not pairs:
            raise ValueError("loss_fn's loss does not depend on any trainable variable")
        payload = {"grads": [g for g, _ in pairs], "loss": loss, "metrics": metrics,
                   "stop": tf.identity(stop_flag)}
        payload = ctx.all_reduce(tf.distribute.ReduceOp.SUM, payload)
        replicas = self.num_replicas if denominators is None else 1
        grads = [g / replicas for g in payload["grads"]]
        if self._loss_scale:
            grads = self._loss_scale.get_unscaled_gradients(grads)
        grad_norm = tf.linalg.global_norm(grads)
        if self.config.clip_norm:
            grads, _ = tf.clip_by_global_norm(grads, self.config.clip_norm, use_norm=grad_norm)
        self.optimizer.apply_gradients(zip(grads, [v for _, v in pairs]), skip_gradients_aggregation=True)
        return {"loss": payload["loss"] / replicas, "metrics": payload["metrics"],
                "grad_norm": grad_norm, "stop": payload["stop"]}

    def _build_train_fn(self):
        strategy = self.strategy
        self._gradients_fn = (tf.function(self._replica_gradients, jit_compile=True)
                              if self.xla_compiled else self._replica_gradients)
        check_grad_norm = self._loss_scale is None  # fp16 skips non-finite steps by design

        @tf.function
        def train_steps(iterator, num_steps):
            loss_sum = tf.constant(0.0)
            norm_sum = tf.constant(0.0)
            metric_sums = self._zero_metric_parts()
            done = tf.constant(0)
            stopped = tf.constant(False)
            non_finite = tf.constant(False)
            last_loss = tf.constant(0.0)
            for _ in tf.range(num_steps):
                features = strategy.experimental_distribute_values_from_function(lambda ctx: next(iterator))
                out = strategy.run(self._replica_train_step,
                                   args=(features, self.global_step.read_value(), self._stop_flag.read_value()))
                out = tf.nest.map_structure(lambda x: strategy.experimental_local_results(x)[0], out)
                with tf.control_dependencies([out["loss"]]):  # count only a step that ran
                    self.global_step.assign_add(1)
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

    # ------------------------------------------------------------------ checkpoints
    def add_save_hook(self, hook: Callable[[str], Any]) -> None:
        """``hook(checkpoint_path)`` runs on every worker after each checkpoint ``train`` saves
        (not after the save that a stop signal forces), while the model holds its weights."""
        self.save_hooks.append(hook)

    def _latest_checkpoint(self) -> str | None:
        latest = self.policy.latest()
        self._check_workers_see_the_same_checkpoint(latest)
        return latest

    def _restore_or_initialize(self, latest: str | None, input_checkpoint: tf.train.Checkpoint,
                               input_prefix: str | None) -> str | None:
        output_dir = self.config.output_dir
        if latest is None:
            if self.task.init_fn is not None:
                logging.info("No checkpoint in %s: initializing with the task's init_fn.", output_dir)
                self.task.init_fn(self.model)
            return None
        status = self.checkpoint.read(latest)
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            raise ValueError(
                f"checkpoint {latest} does not match this model/optimizer (was output_dir used by a "
                f"different configuration?): {e}") from e
        status.expect_partial()
        if input_prefix is not None:
            input_checkpoint.read(input_prefix).assert_consumed()
        logging.info("Resumed from %s at step %d.", latest, int(self.global_step.numpy()))
        return latest

    def _check_workers_see_the_same_checkpoint(self, latest: str | None) -> None:
        """Multi-worker: every worker must resume from the same step (shared output_dir)."""
        if self.worker.num_workers <= 1:
            return
        step = -1 if latest is None else (files.step_of(latest) or 0)
        values = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant([step], tf.int64))
        steps = sorted(set(self.strategy.gather(values, axis=0).numpy().tolist()))
        if len(steps) > 1:
            raise ValueError(
                f"workers see different latest checkpoints in --output_dir (steps {steps}, -1 = none): "
                f"for multi-worker training output_dir must be on storage shared by all workers "
                f"(e.g. GCS or NFS)")

    def _all_weights_finite(self) -> bool:
        return bool(tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in self.model.variables]))

    def _barrier(self) -> None:
        if self.worker.num_workers > 1:
            ones = self.strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(1.0))
            self.strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None)

    def save_checkpoint(self, input_checkpoint: tf.train.Checkpoint | None = None) -> str:
        """Writes ``model.ckpt-<step>`` (+ this worker's input position) atomically."""
        step = int(self.global_step.numpy())
        if not self._all_weights_finite():
            raise NonFiniteLossError(f"weights are NaN/Inf at step {step}: not writing a checkpoint")
        prefix = self.policy.save(step, self.checkpoint, input_checkpoint)
        self._last_saved_step = step
        logging.info("Saved checkpoint %s", prefix)
        return prefix

    # ------------------------------------------------------------------ train
    def _check_batch_split(self) -> None:
        cfg = self.config
        per_replica, rem = divmod(cfg.train_batch_size, self.num_replicas)
        if rem:
            raise ValueError(f"train_batch_size {cfg.train_batch_size} is not divisible by the "
                             f"{self.num_replicas} replicas")
        if per_replica % cfg.gradient_accumulation_steps:
            raise ValueError(
                f"the per-replica batch {per_replica} (train_batch_size {cfg.train_batch_size} / "
                f"{self.num_replicas} replicas) is not divisible by gradient_accumulation_steps "
                f"{cfg.gradient_accumulation_steps}")

    def _check_train_batches(self, element_spec) -> None:
        cfg = self.config
        per_replica = cfg.train_batch_size // self.num_replicas
        for spec in tf.nest.flatten(element_spec):
            size = spec.shape[0] if spec.shape.rank else None
            if size is not None and size != per_replica:
                raise ValueError(
                    f"train_dataset_fn yields per-replica batches of {size}, expected {per_replica} "
                    f"(train_batch_size {cfg.train_batch_size} / {self.num_replicas} replicas)")

    def _steps_to_boundary(self, step: int) -> int:
        cfg = self.config
        limits = [cfg.steps_per_loop, cfg.num_train_steps - step,
                  cfg.log_steps - step % cfg.log_steps,
                  self.policy.steps_to_next_save(step)]
        return max(1, min(limits))

    def train(self) -> TrainResult:
        """Trains to ``num_train_steps``, resuming from ``output_dir``'s latest checkpoint."""
        cfg = self.config
        if self.task.train_dataset_fn is None:
            raise ValueError("the task has no train_dataset_fn")
        tf.io.gfile.makedirs(cfg.output_dir)
        self._check_batch_split()
        latest = self._latest_checkpoint()
        to_skip, input_prefix = self.policy.input_resume_plan(latest, self._topology)
        dataset = self.task.train_dataset_fn(self._input_context(to_skip))
        self._check_train_batches(dataset.element_spec)
        self._ensure_built(dataset.element_spec)
        iterator = iter(dataset)
        input_checkpoint = tf.train.Checkpoint(
            iterator=iterator, topology=tf.Variable(self._topology, dtype=tf.int64, trainable=False))
        latest = self._restore_or_initialize(latest, input_checkpoint, input_prefix)
        step = int(self.global_step.numpy())
        if latest is not None:
            self._last_saved_step = step
        if step >= cfg.num_train_steps:
            logging.info("Step %d already reached num_train_steps=%d: nothing to train.", step, cfg.num_train_steps)
            return TrainResult(step, latest, {})
        if self._train_fn is None:
            self._train_fn = self._build_train_fn()
        writer = LazySummaryWriter(cfg.output_dir if self.worker.is_chief else None)
        schedule = self._learning_rate_schedule()
        logs: dict[str, float] = {}
        interval = self._new_interval(step)
        checkpoint_path = latest
        self._stop_flag.assign(0.0)
        with StopSignals(cfg.handle_signals) as signals:
            while step < cfg.num_train_steps:
                try:
                    out = run_interruptibly(self._train_fn, iterator, tf.constant(self._steps_to_boundary(step)),
                                            signals=signals, stop_flag=self._stop_flag)
                except tf.errors.OutOfRangeError as e:
                    raise ValueError(f"the training dataset ended at step {int(self.global_step.numpy())}: "
                                     f"train_dataset_fn must return a repeating dataset") from e
                step = int(self.global_step.numpy())
                if bool(out["non_finite"]):
                    raise NonFiniteLossError(
                        f"loss {float(out['last_loss'])} (or its gradient) is NaN/Inf at step {step}; training "
                        f"stopped. No checkpoint of this state was written; the last good one is "
                        f"{tf.train.latest_checkpoint(cfg.output_dir)}.")
                self._accumulate(interval, out)
                stopped = bool(out["stopped"])
                if step % cfg.log_steps == 0 or step == cfg.num_train_steps or stopped:
                    logs = self._log(interval, step, schedule, writer)
                    interval = self._new_interval(step)
                if self.policy.is_due(step, cfg.num_train_steps, stopped) and self._last_saved_step != step:
                    checkpoint_path = self.save_checkpoint(input_checkpoint)
                    if not stopped and self.save_hooks:
                        started = time.time()
                        for hook in self.save_hooks:
                            hook(checkpoint_path)
                        interval["start_time"] += time.time() - started  # examples/s counts training only
                if stopped:
                    writer.flush()
                    message = (f"Stopped by {signals.received or 'a signal on another worker'} at step {step}; "
                               f"checkpoint {checkpoint_path} written. Rerun the same command to resume.")
                    logging.warning(message)
                    raise TrainingInterrupted(message)
        writer.flush()
        return TrainResult(step, checkpoint_path, logs)

    def _learning_rate_schedule(self) -> Callable[[int], float]:
        inner = self._loss_scale.inner_optimizer if self._loss_scale else self.optimizer
        lr = inner._learning_rate  # the schedule object or the variable
        if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
            return lambda step: float(lr(step))
        return lambda step: float(lr.numpy())

    def _new_interval(self, step: int) -> dict:
        return {"start_step": step, "start_time": time.time(), "steps": 0, "loss": 0.0,
                "grad_norm": 0.0, "metrics": {name: [0.0, 0.0] for name in self._metric_kinds}}

    @staticmethod
    def _accumulate(interval: dict, out: dict) -> None:
        interval["steps"] += int(out["steps"])
        interval["loss"] += float(out["loss_sum"])
        interval["grad_norm"] += float(out["grad_norm_sum"])
        for name, (num, den) in out["metrics"].items():
            interval["metrics"][name][0] += float(num)
            interval["metrics"][name][1] += float(den)

    def _log(self, interval: dict, step: int, schedule, writer) -> dict[str, float]:
        cfg = self.config
        steps = max(interval["steps"], 1)
        elapsed = max(time.time() - interval["start_time"], 1e-9)
        seconds_per_step = elapsed / steps
        logs = {
            "loss": interval["loss"] / steps,
            "learning_rate": schedule(max(step - 1, 0)),  # the rate of the last update
            "gradient_norm": interval["grad_norm"] / steps,
            "examples_per_second": cfg.train_batch_size / seconds_per_step,
            "steps_per_second": 1.0 / seconds_per_step,
        }
        for name, (num, den) in interval["metrics"].items():
            logs[name] = num / den if den else float("nan")
        eta = (cfg.num_train_steps - step) * seconds_per_step
        extra = "".join(f", {name} = {logs[name]:.4f}" for name in interval["metrics"])
        logging.info("step %d/%d: loss = %.4f, lr = %.3e, examples/s = %.1f, ETA %s%s",
                     step, cfg.num_train_steps, logs["loss"], logs["learning_rate"],
                     logs["examples_per_second"], format_duration(eta), extra)
        with writer.as_default(step=step):
            for name, value in logs.items():
                write_scalar_summary(name, value)
        return logs

    # ------------------------------------------------------------------ eval
    def _eval_parts(self, features) -> dict[str, tf.Tensor]:
        """One batch's loss and metric sums: ``<name>/num`` and ``<name>/den`` scalars.

        Scalars are batch means: each is weighted by the batch's size, so that the result is a
        mean over examples whatever the batching, sharding or final partial batch."""
        loss, metrics = _split_loss_output(self.task.loss_fn(self.model, features, False))
        size = tf.cast(tf.shape(tf.nest.flatten(features)[0])[0], tf.float32)
        parts = {"loss": (_scalar(loss), tf.constant(1.0)), **self._metric_parts(metrics)}
        out = {}
        for name, (num, den) in parts.items():
            if name == "loss" or not self._metric_kinds[name]:
                num, den = num * size, den * size
            out[f"{name}/num"], out[f"{name}/den"] = num, den
        return out

    def evaluate(
        self,
        max_eval_steps: int | None = None,
        checkpoint_path: str | None = None,
        dataset_fn: DatasetFn | None = None,
    ) -> dict[str, float]:
        """Averages the loss and metrics over the eval data (or ``max_eval_steps`` steps of
        one batch per replica).  With ``checkpoint_path``, evaluates that checkpoint's weights.

        Pair metrics are sum(numerators) / sum(denominators) over every example seen;
        ``loss`` and scalar metrics (batch means) are averaged with each batch weighted by its
        size, i.e. over examples.  Adds ``global_step``.
        """
        dataset_fn = dataset_fn or self.task.eval_dataset_fn
        if dataset_fn is None:
            raise ValueError("the task has no eval_dataset_fn")
        dataset = dataset_fn(self._input_context())
        self._ensure_built(dataset.element_spec)
        if checkpoint_path is not None:
            tf.train.Checkpoint(model=self.model, global_step=self.global_step).read(
                checkpoint_path).expect_partial()
        if self._eval_runner is None:
            self._eval_runner = BatchRunner(self._eval_parts, self.strategy)
        parts = self._eval_runner.gather(dataset, max_eval_steps)
        names = ["loss", *self._metric_kinds]
        # Summed in float64 on the host, batch by batch in the dataset's order.
        flat = [sum(float(x) for x in parts.get(f"{name}/{part}", ())) for name in names for part in ("num", "den")]
        if self.worker.num_workers > 1:  # one collective: every worker's sums
            first = [True]

            def local_values(ctx):
                values = tf.constant(flat if first[0] else [0.0] * len(flat), tf.float32)
                first[0] = False
                return values

            total = self.strategy.reduce(
                tf.distribute.ReduceOp.SUM,
                self.strategy.experimental_distribute_values_from_function(local_values), axis=None)
            flat = total.numpy().tolist()
        results = {name: (flat[2 * i] / flat[2 * i + 1] if flat[2 * i + 1] else float("nan"))
                   for i, name in enumerate(names)}
        results["global_step"] = int(self.global_step.numpy())
        if self.worker.is_chief:
            write_scalars(os.path.join(self.config.output_dir, "eval"), results["global_step"],
                          {name: results[name] for name in names})
        return results
