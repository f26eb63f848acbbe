"""The one evaluation path: run a function over every batch, gather its outputs on the host.

Every evaluation in the package goes through ``BatchRunner``: the Trainer's loss and
metric sums, GLUE's dev metrics and test predictions, SQuAD's answers. Metrics that
are not sums over examples (F1, Matthews correlation, Pearson/Spearman, SQuAD's
scoring) cannot be computed batch by batch in the graph; gathering the outputs and
computing on the host gives every such metric exactly, over the whole set.

Placement: with a strategy, the local replicas each take one batch at a time (a last
group smaller than the replica count runs on the host); without, everything runs on the
host. Outputs come back in the dataset's order either way. Adding up across workers
is the caller's business (``Trainer.evaluate`` does it with one collective).
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np
import tensorflow as tf

from albert_tf.training.reporting import Progress
from albert_tf.training.step import metric_parts, scalar, split_loss_output

StepFn = Callable[[Mapping[str, tf.Tensor]], Mapping[str, tf.Tensor]]


class BatchRunner:
    """``gather(dataset)`` runs ``step_fn(batch) -> {name: tensor}`` on every batch and returns
    ``{name: numpy array}``: tensors with a batch dimension concatenated, scalars stacked
    (one value per batch). The traced functions are kept for the next ``gather``."""

    def __init__(self, step_fn: StepFn, strategy: tf.distribute.Strategy | None = None):
        self.step_fn = step_fn
        self.strategy = strategy
        self.num_local_replicas = len(strategy.extended.worker_devices) if strategy is not None else 1
        self._on_host: dict[str, Callable] = {}  # by element spec
        self._on_replicas = (tf.function(lambda batch: strategy.run(step_fn, args=(batch,)))
                             if strategy is not None else None)

    def _host_fn(self, element_spec) -> Callable:
        """``step_fn`` traced once for any batch size (a smaller last batch needs no new trace)."""
        key = repr(element_spec)
        if key not in self._on_host:
            relaxed = tf.nest.map_structure(
                lambda spec: tf.TensorSpec([None, *spec.shape[1:]], spec.dtype) if spec.shape.rank else spec,
                element_spec)
            self._on_host[key] = tf.function(self.step_fn, input_signature=[relaxed])
        return self._on_host[key]

    def gather(self, dataset: tf.data.Dataset, max_steps: int | None = None, what: str = "evaluation",
               total_batches: int | None = None) -> dict[str, np.ndarray]:
        """All of ``dataset`` (or ``max_steps`` steps of one batch per local replica), with a progress
        line now and then (``reporting.Progress``) saying ``what`` runs, of ``total_batches`` when known."""
        outputs: dict[str, list[np.ndarray]] = {}

        def add(values: Mapping[str, tf.Tensor]) -> None:
            for name, value in values.items():
                outputs.setdefault(name, []).append(np.asarray(value))

        on_host = self._host_fn(dataset.element_spec)
        iterator = iter(dataset)
        progress = Progress(what, total_batches or _known_batches(dataset, max_steps, self.num_local_replicas))
        steps = 0
        while max_steps is None or steps < max_steps:
            batches = []
            for _ in range(self.num_local_replicas):
                optional = iterator.get_next_as_optional()
                if not optional.has_value():
                    break
                batches.append(optional.get_value())
            if self._on_replicas is not None and len(batches) == self.num_local_replicas:
                feed = iter(batches)
                features = self.strategy.experimental_distribute_values_from_function(lambda ctx: next(feed))
                result = self._on_replicas(features)
                for local in range(self.num_local_replicas):
                    add(tf.nest.map_structure(
                        lambda x, i=local: self.strategy.experimental_local_results(x)[i], result))
            else:
                for batch in batches:
                    add(on_host(batch))
            if batches:  # done (their outputs are on the host): the first call's tracing is not timed
                progress.add(len(batches), sum(_rows(batch) for batch in batches))
            if len(batches) < self.num_local_replicas or not batches:
                break
            steps += 1
        return {name: np.stack(values) if values[0].ndim == 0 else np.concatenate(values)
                for name, values in outputs.items()}


def _rows(batch) -> int:
    """How many rows a batch has (its first tensor's first dimension)."""
    return int(tf.shape(tf.nest.flatten(batch)[0])[0])


def _known_batches(dataset: tf.data.Dataset, max_steps: int | None, num_local_replicas: int) -> int | None:
    """How many batches ``gather`` will run when the dataset or ``max_steps`` says so, else None."""
    cardinality = int(dataset.cardinality())
    known = cardinality if cardinality >= 0 else None
    if max_steps is not None:
        known = min(known, max_steps * num_local_replicas) if known is not None else max_steps * num_local_replicas
    return known


def gather_real_examples(runner: BatchRunner, dataset: tf.data.Dataset, expected: int,
                         what: str = "examples", batch_size: int | None = None,
                         task: str = "evaluation") -> dict[str, np.ndarray]:
    """``runner.gather(dataset)`` without the padding rows that fill the last batch (the step returns
    ``is_real_example``, 0 for them): the outputs of exactly ``expected`` examples, in the dataset's order.
    ``task`` names the work in the progress lines; with ``batch_size`` they count the batches there are."""
    result = runner.gather(dataset, what=task, total_batches=-(-expected // batch_size) if batch_size else None)
    real = result.pop("is_real_example") > 0
    if int(real.sum()) != expected:
        raise RuntimeError(f"predicted {int(real.sum())} of {expected} {what}")
    return {name: values[real] for name, values in result.items()}


class ExampleMeans:
    """A task's loss and metrics over an eval set, as ``Trainer.evaluate`` reports them.

    Pair metrics are sum(numerators) / sum(denominators) over every example seen; the loss
    and scalar metrics (batch means) are weighted by their batch's size, i.e. averaged over
    examples whatever the batching, sharding or final partial batch.  With several workers
    the sums of all of them are added in one collective.
    """

    def __init__(self, loss_fn: Callable[..., Any], model, metric_kinds: Mapping[str, bool],
                 strategy: tf.distribute.Strategy, num_workers: int):
        self.loss_fn, self.model, self.metric_kinds = loss_fn, model, dict(metric_kinds)
        self.strategy, self.num_workers = strategy, num_workers
        self.runner = BatchRunner(self._parts, strategy)

    def _parts(self, features) -> dict[str, tf.Tensor]:
        """One batch's loss and metric sums: ``<name>/num`` and ``<name>/den`` scalars."""
        loss, metrics = split_loss_output(self.loss_fn(self.model, features, False))
        size = tf.cast(tf.shape(tf.nest.flatten(features)[0])[0], tf.float32)
        parts = {"loss": (scalar(loss), tf.constant(1.0)), **metric_parts(self.metric_kinds, metrics)}
        out = {}
        for name, (num, den) in parts.items():
            if name == "loss" or not self.metric_kinds[name]:
                num, den = num * size, den * size
            out[f"{name}/num"], out[f"{name}/den"] = num, den
        return out

    def evaluate(self, dataset: tf.data.Dataset, max_steps: int | None = None) -> dict[str, float]:
        parts = self.runner.gather(dataset, max_steps)
        names = ["loss", *self.metric_kinds]
        # Summed in float64 on the host, batch by batch in the dataset's order.
        flat = [sum(float(x) for x in parts.get(f"{name}/{part}", ())) for name in names for part in ("num", "den")]
        if self.num_workers > 1:  # one collective: every worker's sums
            first = [True]

            def local_values(ctx):
                values = tf.constant(flat if first[0] else [0.0] * len(flat), tf.float32)
                first[0] = False
                return values

            total = self.strategy.reduce(
                tf.distribute.ReduceOp.SUM,
                self.strategy.experimental_distribute_values_from_function(local_values), axis=None)
            flat = total.numpy().tolist()
        return {name: (flat[2 * i] / flat[2 * i + 1] if flat[2 * i + 1] else float("nan"))
                for i, name in enumerate(names)}
