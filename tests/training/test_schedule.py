"""The ALBERT learning-rate schedule against the original's formulas, written in NumPy."""
import numpy as np
import pytest

from albert_tf.training.schedule import AlbertLearningRateSchedule


def reference_lr(step, init_lr, num_train_steps, num_warmup_steps, poly_power=1.0, start_warmup_step=0):
    """optimization.create_optimizer of Google's ALBERT, step by step, in float32."""
    f32 = np.float32
    p = f32(min(f32(step), f32(num_train_steps))) / f32(num_train_steps)
    decayed = f32(init_lr) * np.power(f32(1.0) - p, f32(poly_power))
    if not num_warmup_steps:
        return decayed
    steps_int = np.int32(step) - np.int32(start_warmup_step)
    warmup_lr = f32(init_lr) * (f32(steps_int) / f32(num_warmup_steps))
    is_warmup = f32(steps_int < num_warmup_steps)
    return (f32(1.0) - is_warmup) * decayed + is_warmup * warmup_lr


@pytest.mark.parametrize(
    "init_lr,total,warmup,power,start",
    [
        (0.00176, 125000, 3125, 1.0, 0),  # the pretraining defaults
        (5e-5, 1000, 0, 1.0, 0),  # fine-tuning, no warmup
        (1e-3, 200, 20, 2.0, 0),
        (1e-3, 200, 20, 0.5, 50),  # warmup restarted at step 50
    ],
)
def test_schedule_matches_original_formula(init_lr, total, warmup, power, start):
    schedule = AlbertLearningRateSchedule(init_lr, total, warmup, poly_power=power, start_warmup_step=start)
    steps = sorted({0, 1, warmup // 2, max(warmup - 1, 0), warmup, warmup + 1, start, start + warmup,
                    total // 2, total - 1, total, total + 10})
    for step in steps:
        got = float(schedule(step))
        want = float(reference_lr(step, init_lr, total, warmup, power, start))
        assert got == pytest.approx(want, rel=1e-6, abs=1e-12), f"step {step}: {got} != {want}"


def test_schedule_known_values():
    schedule = AlbertLearningRateSchedule(1e-3, num_train_steps=100, num_warmup_steps=10)
    assert float(schedule(0)) == 0.0  # the first update of a warmup run uses lr 0, as the original
    assert float(schedule(5)) == pytest.approx(5e-4)
    assert float(schedule(10)) == pytest.approx(1e-3 * 0.9)  # warmup over: linear decay from step 0
    assert float(schedule(100)) == 0.0
    assert float(schedule(150)) == 0.0  # stays at the end value


def test_schedule_rejects_bad_lengths():
    with pytest.raises(ValueError, match="num_train_steps"):
        AlbertLearningRateSchedule(1e-3, num_train_steps=0)
    with pytest.raises(ValueError, match="num_warmup_steps"):
        AlbertLearningRateSchedule(1e-3, num_train_steps=10, num_warmup_steps=-1)
