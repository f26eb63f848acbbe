"""What the training loop reports: per-interval means of the loss, gradient norm and metrics,
the learning rate, throughput and ETA, on the console and as TensorBoard scalars; and the
progress lines of evaluation and prediction (``Progress``)."""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Mapping

from absl import logging

from albert_tf.progress import PROGRESS_SECONDS, Progress, format_duration  # noqa: F401  (re-exported)
from albert_tf.training.summaries import LazySummaryWriter, write_scalar_summary


@dataclasses.dataclass
class Interval:
    """Sums over the steps since the last report (one ``train_steps`` call adds its sums)."""

    start_step: int
    start_time: float
    steps: int = 0
    timed_steps: int = 0  # the steps examples/s and the ETA are measured on
    untimed_seconds: float = 0.0
    loss: float = 0.0
    grad_norm: float = 0.0
    metrics: dict[str, list[float]] = dataclasses.field(default_factory=dict)  # name -> [num, den]

    @classmethod
    def starting(cls, step: int, metric_names) -> "Interval":
        return cls(start_step=step, start_time=time.time(), metrics={name: [0.0, 0.0] for name in metric_names})

    def add(self, out: Mapping[str, Any], timed: bool = True) -> None:
        """Adds the sums a ``train_steps`` call returned. ``timed=False`` for the first call of a
        process: it traces and compiles the step, so its time is left out of examples/s and the ETA."""
        self.steps += int(out["steps"])
        if timed:
            self.timed_steps += int(out["steps"])
        else:
            now = time.time()
            self.untimed_seconds += now - self.start_time
            self.start_time = now
        self.loss += float(out["loss_sum"])
        self.grad_norm += float(out["grad_norm_sum"])
        for name, (num, den) in out["metrics"].items():
            self.metrics[name][0] += float(num)
            self.metrics[name][1] += float(den)

    def exclude(self, seconds: float) -> None:
        """Leaves time spent outside training (save hooks) out of examples/s."""
        self.start_time += seconds


class Reporter:
    """Writes one line and the scalars per interval; ``learning_rate(update)`` gives the rate of
    a 0-based update (``optimizers.learning_rate_at``)."""

    def __init__(self, num_train_steps: int, train_batch_size: int, learning_rate: Callable[[int], float],
                 writer: LazySummaryWriter):
        self.num_train_steps = num_train_steps
        self.train_batch_size = train_batch_size
        self.learning_rate = learning_rate
        self.writer = writer

    def log(self, interval: Interval, step: int) -> dict[str, float]:
        steps = max(interval.steps, 1)
        elapsed = max(time.time() - interval.start_time, 1e-9)
        if interval.timed_steps:
            seconds_per_step = elapsed / interval.timed_steps
        else:  # only the first call so far: its start-up is all there is to go by
            seconds_per_step = (elapsed + interval.untimed_seconds) / steps
        logs = {
            "loss": interval.loss / steps,
            "learning_rate": self.learning_rate(max(step - 1, 0)),  # the rate of the last update
            "gradient_norm": interval.grad_norm / steps,
            "examples_per_second": self.train_batch_size / seconds_per_step,
            "steps_per_second": 1.0 / seconds_per_step,
        }
        for name, (num, den) in interval.metrics.items():
            logs[name] = num / den if den else float("nan")
        left = self.num_train_steps - step
        rate = f"{logs['examples_per_second']:.1f}"
        if interval.timed_steps or not left:
            eta = format_duration(left * seconds_per_step)
        else:  # the first call's tracing and compiling is all there is: no rate of the steps to come
            rate, eta = rate + " (with start-up)", "?"
        extra = "".join(f", {name} = {logs[name]:.4f}" for name in interval.metrics)
        logging.info("step %d/%d: loss = %.4f, lr = %.3e, examples/s = %s, ETA %s%s",
                     step, self.num_train_steps, logs["loss"], logs["learning_rate"], rate, eta, extra)
        with self.writer.as_default(step=step):
            for name, value in logs.items():
                write_scalar_summary(name, value)
        return logs

    def flush(self) -> None:
        self.writer.flush()

