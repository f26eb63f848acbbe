"""Dropout masks keyed by an example's global position: the same rows whatever the split."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.modeling.dropout import bits_by_coordinates, dropout, dropout_seed_scope, uniform_by_example
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


def test_masks_are_the_same_with_and_without_xla():
    """--enable_xla compiles the training step; its masks must be those of the run without it (a run resumed
    with the other setting, or bf16 on a CPU, where XLA is skipped, against the same run on a GPU). Under XLA
    TensorFlow's "auto_select" generator is another one: every mask changed."""
    x = tf.ones([4, 6, 8])

    def masks(step):
        with dropout_seed_scope(step_seed(11, step), tf.constant(0, tf.int64)):
            return [dropout(x, 0.5, True) for _ in range(3)]  # the per-call seeds too

    for step in (0, 7):
        plain = tf.function(masks)(tf.constant(step, tf.int64))
        compiled = tf.function(masks, jit_compile=True)(tf.constant(step, tf.int64))
        for a, b in zip(plain, compiled):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert 0.3 < float(tf.reduce_mean(tf.cast(plain[0] > 0, tf.float32))) < 0.7


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
    # A kept bf16 unit is the float32 one rounded once: 1/0.9 is not 1.109375 (bf16's own 1/0.9), which
    # biased every kept unit 0.16% low.
    with dropout_seed_scope(step_seed(5, tf.constant(2)), 0):
        values = tf.cast(tf.linspace(0.5, 3.0, 480), tf.bfloat16)
        got = dropout(tf.reshape(values, [6, 10, 8]), 0.1, True).numpy().astype(np.float32).reshape(-1)
    want = (values.numpy().astype(np.float32) * np.float32(1 / 0.9)).astype(tf.bfloat16.as_numpy_dtype)
    want = want.astype(np.float32)
    np.testing.assert_array_equal(got[got != 0], want[got != 0])
    kept = whole != 0
    assert 0.6 < kept.mean() < 0.8
    np.testing.assert_allclose(whole[kept], 1 / 0.7, rtol=1e-6)
    with dropout_seed_scope(step_seed(5, tf.constant(3)), 0):  # another step: another mask
        assert not np.array_equal(dropout(x, 0.3, True).numpy() == 0, whole == 0)


def _bits(shape, offset=0, xla=False):
    fn = lambda: bits_by_coordinates(tf.constant(shape), SEED, tf.constant(offset, tf.int64))  # noqa: E731
    return (tf.function(fn, jit_compile=True)() if xla else fn()).numpy()


@pytest.mark.parametrize("xla", [False, True])
def test_a_rows_mask_at_real_positions_does_not_depend_on_the_padded_length(xla):
    length = 20
    # [batch, seq, hidden] (embeddings, hidden states) and [batch, heads, seq, seq] (attention probs).
    for padded in (length + 8, 128):
        np.testing.assert_array_equal(_bits([3, padded, 6], xla=xla)[:, :length], _bits([3, length, 6], xla=xla))
        np.testing.assert_array_equal(_bits([3, 2, padded, padded], 5, xla)[:, :, :length, :length],
                                      _bits([3, 2, length, length], 5, xla))
    np.testing.assert_array_equal(_bits([3, 2, length, length], 5, xla), _bits([3, 2, length, length], 5))
    # Not degenerate: coordinates that differ in one axis only get unrelated bits.
    bits = _bits([4, 32, 16])
    assert len(np.unique(bits)) > 0.99 * bits.size
    for axis in range(3):
        a, b = np.take(bits, 0, axis=axis), np.take(bits, 1, axis=axis)
        assert np.mean(a == b) < 0.01


def test_masks_are_the_same_in_a_trimmed_and_a_padded_batch():
    x = tf.random.stateless_normal([4, 2, 128, 128], [1, 2])

    def run(length):
        with dropout_seed_scope(step_seed(5, tf.constant(2)), 4):
            return dropout(x[:, :, :length, :length], 0.1, True).numpy()

    trimmed, padded = run(37), run(128)
    np.testing.assert_array_equal(padded[:, :, :37, :37], trimmed)
    assert 0.88 < np.mean(padded != 0) < 0.92


def test_kept_share_and_independence_of_neighbouring_units():
    with dropout_seed_scope(SEED, 0):
        kept = dropout(tf.ones([64, 128, 96]), 0.1, True).numpy() != 0
    assert abs(kept.mean() - 0.9) < 0.005
    # Neighbours along every axis drop independently: P(both kept) = 0.81.
    for axis in range(3):
        both = np.logical_and(np.take(kept, range(0, kept.shape[axis] - 1), axis),
                              np.take(kept, range(1, kept.shape[axis]), axis))
        assert abs(both.mean() - 0.81) < 0.01, axis
