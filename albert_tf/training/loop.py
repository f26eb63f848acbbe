"""The one custom training loop used by pretraining, GLUE and SQuAD.

A driver describes its job as a ``Task`` (build the model, compute the loss,
make the datasets, optionally initialize from a checkpoint) and hands it with an
optimizer factory and a ``TrainConfig`` to a ``Trainer``:

    trainer = Trainer(task, strategy, optimizer_fn, config)
    trainer.add_save_hook(evaluator.after_save)   # e.g. evaluate each checkpoint
    trainer.train()                     # resumes from output_dir's newest intact checkpoint
    results = trainer.evaluate(max_eval_steps=100)

This module is the outer loop (restore, signals, NaN stop, save cadence, hooks); when to
save, what to keep and what to resume from are ``checkpoint_policy``'s, the scalars
``summaries``', signals ``signals``', and evaluation is ``evaluation.ExampleMeans``'.

The in-graph step (micro-batches, all-reduce, loss scaling, clipping, the per-step
dropout seed, XLA) is ``step``'s, the interval reports ``reporting``'s.  One-device
semantics on every topology: the same flags and data give the same weights on one
device, N replicas, N workers or with gradient accumulation (``step``, ``data.py``).
``steps_per_loop`` steps run inside one ``tf.function`` call, cut short at log/save
boundaries; the train function's first call runs one step, during and after which the memory its
building freed goes back to the system (``host_memory``).

Resume is exact: a checkpoint holds the model, the optimizer (slots, iteration
count, fp16 loss scale) and ``global_step``; each worker also saves its input
iterator's position with the topology it was saved under; dropout masks are a
function of (seed, step, example position) — see ``albert_tf.modeling.dropout``.  Resuming on
another topology fast-forwards the input stream by ``global_step`` global batches
instead.  SIGTERM/SIGINT stop the run after the current step with a
checkpoint and exit code 0.  A NaN/Inf loss stops it with ``NonFiniteLossError``
naming the step and writes no checkpoint.  ``train`` holds ``output_dir``'s run lock
(``run_lock``); a full disk or a lost worker ends it with one line (``faults``).
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
from typing import Any, Callable, Mapping

import tensorflow as tf
from absl import logging

from albert_tf.errors import RunError
from albert_tf.keras import keras
from albert_tf.modeling.dropout import dropout_seed_scope  # noqa: F401  (re-exported)
from albert_tf.training import faults
from albert_tf.training.checkpoint_policy import CheckpointPolicy, is_original_checkpoint, refuse_resuming_the_original
from albert_tf.data.input_pipeline import TrainInputContext
from albert_tf.training.distribution import JOB_MESSAGES, worker_info
from albert_tf.training.evaluation import ExampleMeans
from albert_tf.training.host_memory import release_freed_memory
from albert_tf.training.optimizers import learning_rate_at
from albert_tf.training.reporting import Interval, Reporter
from albert_tf.run_lock import output_dir_lock
from albert_tf.training.signals import StopSignals, TrainingInterrupted, run_interruptibly
from albert_tf.training.step import step_seed  # noqa: F401  (re-exported: the public name)
from albert_tf.training.step import (LossFn, StepSettings, TrainStep, compiles_with_xla, split_loss_output,
                                     with_loss_scaling)
from albert_tf.training.summaries import LazySummaryWriter, write_scalars
from albert_tf.training.xla import XlaSetting, parse_xla_setting

DatasetFn = Callable[[tf.distribute.InputContext], tf.data.Dataset]


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
    train_data: what the training data is, for errors reading it (``--input_file=...``, a cache's path).
    describe_data_error: optional ``fn(error) -> str``, the words for an error reading or parsing the
      records (e.g. naming the damaged file, which TensorFlow's words do not); default: TensorFlow's. For a
      file cut short or whose CRC does not match, its words are all that is said (what to do included).
    train_data_fingerprint: changes when the training files do (0: not tracked); an input position
      saved in other files is not restored (the stream is fast-forwarded instead).
    init_fn: ``init_fn(model)``, run only when ``output_dir`` has no checkpoint yet
      (e.g. loading ``--init_checkpoint``).
    init_flag: the flag ``init_fn``'s weights come from, as the user gave it (``--init_checkpoint``,
      ``--albert_hub_module_handle``), for lines about them; None: the run starts from no given weights.
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
    init_flag: str | None = None
    loss_denominators_fn: Callable[[Any], Mapping[str, tf.Tensor]] | None = None
    train_data: str = "the training data"
    train_data_fingerprint: int = 0
    describe_data_error: Callable[[BaseException], str] | None = None


def _not_restored(error: AssertionError, shown: int = 3) -> str:
    """On one line, the first weights a checkpoint read left unset, from TensorFlow's assertion (its text
    holds each variable's value over many lines, or ends its first line in a colon)."""
    names = [name for name in dict.fromkeys(re.findall(r"<tf\.Variable '([^']+?)(?::\d+)?'", str(error)))
             if "/replica_" not in name]  # a mirrored weight's other copies
    if not names:
        return " ".join(str(error).split())
    return f"not restored: {', '.join(names[:shown])}{', ...' if len(names) > shown else ''}"


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
    take_over_run_lock: bool = False  # break another run's lock on output_dir (run_lock)
    # The flag the learning rate came from, for lines about it (train_config_from_flags: "--learning_rate" when the
    # driver has it); None: the Python API, whose user has no flags ("the learning rate").
    learning_rate_flag: str | None = None

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
            self.optimizer = optimizer = with_loss_scaling(optimizer_fn())
            self.global_step = tf.Variable(
                0, dtype=tf.int64, trainable=False, name="global_step",
                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
            )
        self._loss_scale = optimizer if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer) else None
        self.xla_compiled = compiles_with_xla(config.enable_xla, strategy)
        inner = self._loss_scale.inner_optimizer if self._loss_scale else optimizer
        items = dict(model=self.model, optimizer=inner, global_step=self.global_step)
        if self._loss_scale:
            items["loss_scale_optimizer"] = self._loss_scale
        self.checkpoint = tf.train.Checkpoint(**items)
        # Read by the in-graph loop every step; set from the main thread on SIGTERM/SIGINT.
        self._stop_flag = tf.Variable(0.0, trainable=False, name="stop_requested")
        self._metric_kinds: dict[str, bool] | None = None  # name -> is a (num, den) pair
        self._train_fn = None
        self._first_loop = False  # the next loop is the train function's first call: one step
        self._evaluator: ExampleMeans | None = None
        self._last_saved_step: int | None = None
        self.policy = CheckpointPolicy(config.output_dir, config.save_checkpoints_steps,
                                       config.keep_checkpoint_max, self.worker, self._barrier,
                                       size_estimate=lambda: faults.size_of(self.model, self.optimizer),
                                       gather=self._gather)
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
            _, metrics = split_loss_output(self.task.loss_fn(self.model, features, False))
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

    @property
    def _step_settings(self) -> StepSettings:
        cfg = self.config
        return StepSettings(cfg.train_batch_size, self.num_replicas, cfg.gradient_accumulation_steps,
                            cfg.clip_norm, cfg.seed, self.xla_compiled)

    def _build_train_fn(self):
        step = TrainStep(self.model, self.optimizer, self.task.loss_fn, self.task.loss_denominators_fn,
                         self._metric_kinds, self.global_step, self._stop_flag, self._step_settings)
        return step.build(self.strategy)

    # ------------------------------------------------------------------ checkpoints
    def add_save_hook(self, hook: Callable[[str], Any]) -> None:
        """``hook(checkpoint_path)`` runs on every worker after each checkpoint ``train`` saves
        (not after the save that a stop signal forces), while the model holds its weights."""
        self.save_hooks.append(hook)

    def _restore_or_initialize(self, latest: str | None, input_checkpoint: tf.train.Checkpoint,
                               input_prefix: str | None) -> str | None:
        output_dir = self.config.output_dir
        if latest is None:
            if self.task.init_fn is not None:
                logging.info("No checkpoint in %s: initializing with the task's init_fn.", output_dir)
                self.task.init_fn(self.model)
            return None
        self._refuse_another_configuration(latest, "was --output_dir used by a different configuration?")
        status = self.checkpoint.read(latest)
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            raise ValueError(
                f"checkpoint {latest} does not match this model/optimizer (was output_dir used by a "
                f"different configuration?): {_not_restored(e)}") from e
        status.expect_partial()
        if input_prefix is not None:
            input_checkpoint.read(input_prefix).assert_consumed()
        logging.info("Resumed from %s at step %d.", latest, int(self.global_step.numpy()))
        return latest

    def _refuse_another_configuration(self, checkpoint_path: str, question: str) -> None:
        """Before TensorFlow reads one of our checkpoints into a model of a registered kind: the weight
        table names each weight that is missing or of another shape, with the config field to check.
        TensorFlow matches the optimizer's slots by position, so it would report a slot of some other
        weight's shape (or print a warning per unmatched value) instead."""
        from albert_tf.weights import CheckpointError, check_fits, kinds
        from albert_tf.weights.errors import first_lines

        try:
            kinds.kind_of(self.model)
        except TypeError:
            return  # no TF1 names (a model of the tests' toy tasks): TensorFlow's own check follows
        try:
            check_fits(self.model, checkpoint_path)
        except CheckpointError as e:
            raise ValueError(f"{first_lines(e)} ({question})") from None

    def _load_for_evaluation(self, checkpoint_path: str) -> None:
        """Puts the weights and step of ``checkpoint_path`` in the model: one of ours by object, one with TF1
        names (the original's Estimator's; a converted or released model copied in as model.ckpt-N, without
        ``global_step``: the step its name says) through the weights' name table. Either way every model
        weight must come from it: a weight left at its initial value would be scored silently."""
        if is_original_checkpoint(checkpoint_path):
            from albert_tf.weights import checkpoint_step, load_checkpoint

            load_checkpoint(self.model, checkpoint_path)
            self.global_step.assign(checkpoint_step(checkpoint_path))
            return
        self._refuse_another_configuration(checkpoint_path, "was it written for another config?")
        status = tf.train.Checkpoint(model=self.model, global_step=self.global_step).read(checkpoint_path)
        status.expect_partial()  # the optimizer's slots are not needed to evaluate (no warnings about them)
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            raise ValueError(f"checkpoint {checkpoint_path} does not hold every weight of this model (was it "
                             f"written for another config?): {_not_restored(e)}") from None

    def _all_weights_finite(self) -> bool:
        return bool(tf.reduce_all([tf.reduce_all(tf.math.is_finite(v)) for v in self.model.variables]))

    def _gather(self, value: int) -> list[int]:
        """Every worker's ``value`` (a collective: every worker must call it)."""
        values = self.strategy.experimental_distribute_values_from_function(
            lambda ctx: tf.constant([value], tf.int64))
        return self.strategy.gather(values, axis=0).numpy().tolist()

    def _barrier(self) -> None:
        if self.worker.num_workers > 1:
            ones = self.strategy.experimental_distribute_values_from_function(lambda ctx: tf.constant(1.0))
            self.strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None)

    def is_scheduled_save(self, step: int) -> bool:
        """Whether an uninterrupted run saves at ``step`` (a stopped run also saves where it stopped)."""
        return self.policy.is_due(step, self.config.num_train_steps)

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
    def _steps_to_boundary(self, step: int) -> int:
        cfg = self.config
        limits = [cfg.steps_per_loop, cfg.num_train_steps - step,
                  cfg.log_steps - step % cfg.log_steps,
                  self.policy.steps_to_next_save(step)]
        if self._first_loop:  # see `host_memory`: the building's freed pages go before step 2
            limits.append(1)
        return max(1, min(limits))

    def train(self) -> TrainResult:
        """Trains to ``num_train_steps``, resuming from ``output_dir``'s newest intact checkpoint
        (``CheckpointPolicy.resume_point``), holding the folder's run lock (``run_lock``)."""
        cfg = self.config
        if self.task.train_dataset_fn is None:
            raise ValueError("the task has no train_dataset_fn")
        with output_dir_lock(cfg.output_dir, self.worker.num_workers, self.worker.worker_index,
                             cfg.take_over_run_lock, JOB_MESSAGES), faults.reporting_lost_workers(
                self.worker, lambda: int(self.global_step.numpy()), self.policy.last_intact):
            return self._train()

    def _train(self) -> TrainResult:
        cfg = self.config
        self._step_settings.check_batch_split()
        refuse_resuming_the_original(cfg.output_dir)  # before the state file's repair (drivers check earlier)
        latest = self.policy.latest()
        data_fingerprint = self.task.train_data_fingerprint
        to_skip, input_prefix = self.policy.input_resume_plan(latest, self._topology, data_fingerprint)
        dataset = self.task.train_dataset_fn(self._input_context(to_skip))
        self._step_settings.check_batches(dataset.element_spec)
        self._ensure_built(dataset.element_spec)
        iterator = iter(dataset)
        input_state = dict(iterator=iterator, topology=tf.Variable(self._topology, dtype=tf.int64, trainable=False))
        if data_fingerprint:
            input_state["data"] = tf.Variable(data_fingerprint, dtype=tf.int64, trainable=False)
        input_checkpoint = tf.train.Checkpoint(**input_state)
        latest = self._restore_or_initialize(latest, input_checkpoint, input_prefix)
        step = int(self.global_step.numpy())
        if latest is not None:
            self._last_saved_step = step
        if step >= cfg.num_train_steps:
            logging.info("Step %d already reached num_train_steps=%d: nothing to train.", step, cfg.num_train_steps)
            return TrainResult(step, latest, {})
        if self._train_fn is None:
            self._train_fn = self._build_train_fn()
            self._first_loop = True
        reporter = Reporter(cfg.num_train_steps, cfg.train_batch_size,
                            lambda update: learning_rate_at(self.optimizer, update),
                            LazySummaryWriter(cfg.output_dir if self.worker.is_chief else None, self.policy.last_intact))
        logs: dict[str, float] = {}
        interval = Interval.starting(step, self._metric_kinds)
        checkpoint_path = latest
        self._stop_flag.assign(0.0)
        stopped = False
        with StopSignals(cfg.handle_signals) as signals:
            while step < cfg.num_train_steps and not stopped:
                try:
                    out = run_interruptibly(self._train_fn, iterator, tf.constant(self._steps_to_boundary(step)),
                                            signals=signals, stop_flag=self._stop_flag,
                                            while_waiting=release_freed_memory if self._first_loop else None)
                except tf.errors.OutOfRangeError as e:
                    raise ValueError(f"the training dataset ended at step {int(self.global_step.numpy())}: "
                                     f"train_dataset_fn must return a repeating dataset") from e
                except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
                    if not faults.is_data_error(e):
                        raise
                    raise ValueError(
                        f"reading {self.task.train_data} failed after step {int(self.global_step.numpy())}: "
                        f"{self._data_error_words(e)}; {faults.resume_point(self.policy.last_intact())}") from e
                first_call = self._first_loop
                if self._first_loop:
                    self._first_loop = False
                    release_freed_memory()
                step = int(self.global_step.numpy())
                if bool(out["non_finite"]):
                    last_good = faults.last_good_checkpoint(self.policy.last_intact(), self.task.init_flag,
                                                            cfg.learning_rate_flag)
                    raise NonFiniteLossError(
                        f"loss {float(out['last_loss'])} (or its gradient) is NaN/Inf at step {step}; training "
                        f"stopped. No checkpoint of this state was written; {last_good}")
                interval.add(out, timed=not first_call)
                stopped = bool(out["stopped"])
                if step % cfg.log_steps == 0 or step == cfg.num_train_steps or stopped:
                    logs = reporter.log(interval, step)
                    interval = Interval.starting(step, self._metric_kinds)
                if self.policy.is_due(step, cfg.num_train_steps, stopped) and self._last_saved_step != step:
                    checkpoint_path = self.save_checkpoint(input_checkpoint)
                    if not stopped and self.save_hooks:
                        started = time.time()
                        for hook in self.save_hooks:
                            hook(checkpoint_path)
                        interval.exclude(time.time() - started)  # examples/s counts training only
            # Also a signal that came during the last checkpoint's save hooks (its evaluation): not forgotten.
            if stopped or signals.received:
                reporter.flush()
                self._interrupted(signals.received, step, checkpoint_path)
        reporter.flush()
        return TrainResult(step, checkpoint_path, logs)

    def _interrupted(self, signal_name: str | None, step: int, checkpoint_path: str | None) -> None:
        """Ends a stopped run (exit 143/130), saying what a rerun of the same command does."""
        who = signal_name or "a signal on another worker"
        if step >= self.config.num_train_steps:
            message = (f"Stopped by {who} after the last step ({step}); checkpoint {checkpoint_path} written. "
                       f"Training is done: rerun the same command for what follows it (it does not train again).")
        else:
            message = (f"Stopped by {who} at step {step}; checkpoint {checkpoint_path} written. Rerun the same "
                       f"command to resume.")
        logging.warning(message)
        raise TrainingInterrupted(message, signal_name)

    # ------------------------------------------------------------------ eval
    def _data_error_words(self, error: BaseException) -> str:
        """What a read error says is wrong with the data: the task's words (naming the file) and what may explain
        it. A file cut short or with a CRC that does not match: the task says what to do, no setting explains it."""
        describe = self.task.describe_data_error
        reason = describe(error) if describe is not None else faults.op_error_reason(error)
        if faults.is_framing_error(error):
            return reason if describe is not None else f"{reason}: a file is truncated or damaged"
        return (f"{reason}: a file is damaged, or was written for other settings (--max_seq_length, "
                f"--max_predictions_per_seq)")

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
            self._load_for_evaluation(checkpoint_path)
        if self._evaluator is None:
            self._evaluator = ExampleMeans(self.task.loss_fn, self.model, self._metric_kinds, self.strategy,
                                           self.worker.num_workers)
        try:
            results: dict[str, Any] = self._evaluator.evaluate(dataset, max_eval_steps)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            if not faults.is_data_error(e):
                raise
            # One line naming what cannot be read, as in training (it was TensorFlow's op error).
            raise ValueError(f"reading the eval data failed: {self._data_error_words(e)}") from e
        names = list(results)
        results["global_step"] = int(self.global_step.numpy())
        if self.worker.is_chief:
            write_scalars(os.path.join(self.config.output_dir, "eval"), results["global_step"],
                          {name: results[name] for name in names})
        return results
