"""Dropout masks keyed by an example's global position: the same rows whatever the split."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.modeling.dropout import dropout, dropout_seed_scope, uniform_by_example
from albert_tf.training.loop import step_seed

SEED = tf.constant([3, 9], tf.int64)


@pytest.mark.parametrize("xla", [False, True])
@pytest.mark.parametrize("row_shape", [(4, 6), (3, 5)])  # 24 and 15 values per example (15: not whole counters)
def test_rows_depend_only_on_the_global_example_index(xla, row_shape):
    def draw(batch, offset):
        fn = lambda: uniform_by_example(tf.constant([batch, *row_shape]), SEED, tf.constant(offset, tf.int64))
        return (tf.function(fn, jit_compile=True)() if xla else fn()).numpy()

    whole = draw(8, 0)
    parts = np.concatenate([draw(3, 0), draw(1, 3), draw(4, 4)])
    np.testing.assert_array_equal(parts, whole)
    assert whole.shape == (8, *row_shape) and 0.0 <= whole.min() and whole.max() < 1.0
    rows = whole.reshape(8, -1)
    assert all(not np.array_equal(rows[i], rows[j]) for i in range(8) for j in range(i))  # streams differ
    assert abs(whole.mean() - 0.5) < 0.1


def test_dropout_is_the_same_on_any_split_and_dtype():
    x = tf.ones([6, 10, 8])

    def run(offset, rows, dtype=tf.float32):
        with dropout_seed_scope(step_seed(5, tf.constant(2)), offset):
            return dropout(tf.cast(x[:rows], dtype), 0.3, True).numpy().astype(np.float32)

    whole = run(0, 6)
    with dropout_seed_scope(step_seed(5, tf.constant(2)), 2):
        tail = dropout(x[:4], 0.3, True).numpy()
    np.testing.assert_array_equal(np.concatenate([run(0, 2), tail]), whole)
    np.testing.assert_array_equal(run(0, 6, tf.bfloat16) == 0, whole == 0)  # same units dropped in bf16
    kept = whole != 0
    assert 0.6 < kept.mean() < 0.8
    np.testing.assert_allclose(whole[kept], 1 / 0.7, rtol=1e-6)
    with dropout_seed_scope(step_seed(5, tf.constant(3)), 0):  # another step: another mask
        assert not np.array_equal(dropout(x, 0.3, True).numpy() == 0, whole == 0)
