"""Progress lines: examples/s and the ETA leave out the first call's tracing and compiling."""
from __future__ import annotations

import pytest

from albert_tf import progress
from albert_tf.training import reporting
from albert_tf.training.summaries import LazySummaryWriter


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _call(steps: int) -> dict:
    return {"steps": steps, "loss_sum": 2.0 * steps, "grad_norm_sum": 1.0 * steps, "metrics": {}}


@pytest.fixture
def logged(monkeypatch):
    """The lines ``reporting`` logs at INFO, whatever absl's verbosity and handlers (an earlier test in
    the same process may have set them: caplog then sees nothing)."""
    lines = []
    monkeypatch.setattr(reporting.logging, "info", lambda message, *args: lines.append(message % args))
    return lines


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(reporting.time, "time", fake)
    return fake


def _reporter() -> reporting.Reporter:
    return reporting.Reporter(num_train_steps=1000, train_batch_size=8, learning_rate=lambda update: 1e-3,
                              writer=LazySummaryWriter(None))


def test_the_first_calls_start_up_is_left_out_of_the_rate_and_eta(clock):
    interval = reporting.Interval.starting(0, ())
    clock.now += 60.0  # the first call: one step, a minute of tracing and compiling
    interval.add(_call(1), timed=False)
    clock.now += 9 * 0.5  # then nine steps at half a second each
    interval.add(_call(9))
    logs = _reporter().log(interval, step=10)
    assert logs["examples_per_second"] == pytest.approx(8 / 0.5)
    assert logs["steps_per_second"] == pytest.approx(2.0)
    assert logs["loss"] == pytest.approx(2.0)  # the loss still averages every step, the first one too


def test_eta_counts_the_remaining_steps_at_the_measured_rate(clock, logged):
    interval = reporting.Interval.starting(0, ())
    clock.now += 60.0
    interval.add(_call(1), timed=False)
    clock.now += 9 * 0.5
    interval.add(_call(9))
    _reporter().log(interval, step=10)
    assert "ETA 8m15s" in logged[-1]  # 990 steps * 0.5 s; with the minute of start-up counted: 1h44m...


def test_a_report_after_the_first_call_alone_still_gives_a_rate(clock):
    interval = reporting.Interval.starting(0, ())
    clock.now += 4.0
    interval.add(_call(1), timed=False)
    logs = _reporter().log(interval, step=1)
    assert logs["steps_per_second"] == pytest.approx(1 / 4.0)


def test_a_line_after_the_first_call_alone_says_its_rate_holds_the_start_up_and_gives_no_eta(clock, logged):
    """--log_steps=1, or a run resumed one step before a report: the line's only step is the one that traced and
    compiled (4 s). It read "examples/s = 2.0, ETA 1h06m36s" (999 steps at 4 s), though steps take 0.5 s."""
    interval = reporting.Interval.starting(0, ())
    clock.now += 4.0
    interval.add(_call(1), timed=False)
    _reporter().log(interval, step=1)
    assert logged[-1].endswith("examples/s = 2.0 (with start-up), ETA ?")
    last = reporting.Interval.starting(999, ())  # the last step: nothing left, whatever the rate
    clock.now += 4.0
    last.add(_call(1), timed=False)
    _reporter().log(last, step=1000)
    assert logged[-1].endswith("examples/s = 2.0, ETA 0m00s")


def test_later_intervals_are_timed_from_their_start(clock):
    interval = reporting.Interval.starting(10, ())
    clock.now += 10 * 0.25
    interval.add(_call(10))
    logs = _reporter().log(interval, step=20)
    assert logs["steps_per_second"] == pytest.approx(4.0)


def test_evaluation_progress_lines_count_batches_rate_and_eta(clock, logged):
    """Evaluation and prediction printed nothing until done; the first batch (tracing) is not timed."""
    progress = reporting.Progress("predicting squad test", total_batches=10)
    clock.now += 40.0
    progress.add(1, 8)  # due (40 s >= 30 s): the first batch alone, no rate yet
    clock.now += 20.0
    progress.add(1, 8)  # not due (20 s since the last line)
    clock.now += 20.0
    progress.add(2, 16)  # 3 batches, 24 examples in 40 s timed: 0.6/s; 6 batches left at 40/3 s each
    assert logged == ["predicting squad test: batch 1/10",
                               "predicting squad test: batch 4/10, examples/s = 0.6, ETA 1m20s"]
    unknown = reporting.Progress("evaluation")
    unknown.add(1, 4)
    clock.now += 2.0
    unknown.add(1, 4)
    assert unknown.line(clock.now) == "evaluation: batch 2, examples/s = 2.0"


def test_gather_logs_progress_with_the_batches_there_are(monkeypatch, logged):
    import numpy as np
    import tensorflow as tf

    from albert_tf.training.evaluation import BatchRunner, gather_real_examples

    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)  # a line after each batch
    runner = BatchRunner(lambda batch: {"x": batch["x"] * 2, "is_real_example": batch["is_real_example"]})
    rows = {"x": np.arange(10), "is_real_example": np.array([1] * 9 + [0])}
    known = tf.data.Dataset.from_tensor_slices(rows).batch(2)  # 5 batches, as its cardinality says
    unknown = known.filter(lambda batch: True)  # cardinality unknown: the caller's count of examples says
    assert runner.gather(known)["x"].tolist() == [2 * i for i in range(10)]
    lines = [m for m in logged if m.startswith("evaluation: batch")]
    assert [line.split(",")[0] for line in lines] == [f"evaluation: batch {i}/5" for i in range(1, 6)]
    assert "ETA" in lines[-1] and "examples/s = " in lines[-1]
    logged.clear()
    gathered = gather_real_examples(runner, unknown, 9, batch_size=2, task="predicting toy test")
    assert gathered["x"].tolist() == [2 * i for i in range(9)]
    assert [m.split(",")[0] for m in logged] == [f"predicting toy test: batch {i}/5" for i in range(1, 6)]
