"""Progress lines: examples/s and the ETA leave out the first call's tracing and compiling."""
from __future__ import annotations

import pytest

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


def test_eta_counts_the_remaining_steps_at_the_measured_rate(clock, caplog):
    interval = reporting.Interval.starting(0, ())
    clock.now += 60.0
    interval.add(_call(1), timed=False)
    clock.now += 9 * 0.5
    interval.add(_call(9))
    with caplog.at_level("INFO"):
        _reporter().log(interval, step=10)
    assert "ETA 8m15s" in caplog.text  # 990 steps * 0.5 s; with the minute of start-up counted: 1h44m...


def test_a_report_after_the_first_call_alone_still_gives_a_rate(clock):
    interval = reporting.Interval.starting(0, ())
    clock.now += 4.0
    interval.add(_call(1), timed=False)
    logs = _reporter().log(interval, step=1)
    assert logs["steps_per_second"] == pytest.approx(1 / 4.0)


def test_later_intervals_are_timed_from_their_start(clock):
    interval = reporting.Interval.starting(10, ())
    clock.now += 10 * 0.25
    interval.add(_call(10))
    logs = _reporter().log(interval, step=20)
    assert logs["steps_per_second"] == pytest.approx(4.0)
