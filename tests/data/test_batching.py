"""albert_tf.data.batching: trimming, buckets and the seeded length-grouping sampler."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data.batching import (batches_per_megabatch, bucket_lengths, example_lengths, group_by_length_batches,
                                     group_by_length_order, parse_bucket_lengths, trim_to_bucket, trim_to_longest)


def _batch(lengths, seq_length=128, choices=None):
    mask = (np.arange(seq_length)[None] < np.array(lengths)[:, None]).astype(np.int32)
    ids = (mask * np.arange(1, seq_length + 1)[None]).astype(np.int32)
    if choices:
        mask, ids = np.repeat(mask[:, None], choices, 1), np.repeat(ids[:, None], choices, 1)
    return {"input_ids": tf.constant(ids), "input_mask": tf.constant(mask), "segment_ids": tf.constant(ids * 0),
            "label_ids": tf.constant(np.arange(len(lengths), dtype=np.int32))}


@pytest.mark.parametrize("multiple,expected", [(1, 45), (8, 48), (16, 48), (32, 64), (100, 100), (256, 128)])
def test_trim_to_longest_rounds_up_to_the_multiple_and_caps_at_the_padded_length(multiple, expected):
    batch = _batch([3, 45, 12])
    trimmed = trim_to_longest(batch, multiple=multiple)
    for name in ("input_ids", "input_mask", "segment_ids"):
        assert trimmed[name].shape == (3, expected)
        np.testing.assert_array_equal(trimmed[name].numpy(), batch[name].numpy()[:, :expected])
    np.testing.assert_array_equal(trimmed["label_ids"].numpy(), [0, 1, 2])  # not a sequence: untouched
    assert int(tf.reduce_sum(trimmed["input_mask"])) == int(tf.reduce_sum(batch["input_mask"]))  # nothing real cut


def test_trim_in_a_dataset_multiple_choice_and_gaps_in_the_mask():
    rows = _batch([5, 20, 9, 70], choices=4)
    dataset = tf.data.Dataset.from_tensor_slices(rows).batch(2).map(lambda b: trim_to_longest(b, multiple=8))
    assert [b["input_ids"].shape for b in dataset] == [(2, 4, 24), (2, 4, 72)]
    gap = {"input_mask": tf.constant([[1, 0, 0, 1, 0, 0, 0, 0]]), "input_ids": tf.ones([1, 8], tf.int32)}
    assert trim_to_longest(gap, ("input_ids", "input_mask"), multiple=1)["input_ids"].shape == (1, 4)
    empty = {"input_mask": tf.zeros([2, 8], tf.int32)}
    assert trim_to_longest(empty, ("input_mask",), multiple=1)["input_mask"].shape == (2, 1)
    with pytest.raises(KeyError, match="segment_ids"):
        trim_to_longest({"input_mask": tf.zeros([2, 8], tf.int32), "input_ids": tf.zeros([2, 8], tf.int32)})
    with pytest.raises(ValueError, match="multiple"):
        trim_to_longest(rows, multiple=0)


def test_example_lengths():
    mask = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(example_lengths(mask), [2, 3, 0, 4])
    np.testing.assert_array_equal(example_lengths(mask.reshape(2, 2, 4)), [3, 4])  # longest choice


def test_buckets():
    assert bucket_lengths(128) == (32, 64, 128)
    assert bucket_lengths(384) == (32, 64, 128, 256, 384)
    assert bucket_lengths(16) == (16,)
    assert parse_bucket_lengths("", 512) == (32, 64, 128, 256, 512)
    assert parse_bucket_lengths("48,128", 128) == (48, 128)
    for bad in ("64,32,128", "32,64", "a,128", "0,128"):
        with pytest.raises(ValueError, match="--seq_length_buckets"):
            parse_bucket_lengths(bad, 128)
    shapes = {}
    for longest in (1, 31, 32, 33, 64, 65, 127, 128):
        shapes[longest] = trim_to_bucket(_batch([1, longest]), (32, 64, 128))["input_ids"].shape[1]
    assert shapes == {1: 32, 31: 32, 32: 32, 33: 64, 64: 64, 65: 128, 127: 128, 128: 128}


def _lengths(n=1000, seed=0):
    return np.random.default_rng(seed).integers(3, 129, n)


def test_group_by_length_order_is_a_seeded_permutation_of_length_grouped_batches():
    lengths, batch = _lengths(), 16
    order = group_by_length_order(lengths, batch, seed=1, epoch=0, megabatch_batches=5).numpy()
    assert len(order) == 1008 and set(order) == set(range(1000))  # 63 batches; the 8 left-over rows kept
    counts = np.bincount(order, minlength=1000)  # the overlapping last batch: 8 rows trained twice
    assert counts.min() == 1 and counts.max() == 2 and (counts == 2).sum() == 16 - 1000 % 16
    np.testing.assert_array_equal(group_by_length_order(lengths, batch, 1, 0, 5).numpy(), order)  # deterministic
    assert not np.array_equal(group_by_length_order(lengths, batch, 1, 1, 5).numpy(), order)  # another epoch
    assert not np.array_equal(group_by_length_order(lengths, batch, 2, 0, 5).numpy(), order)  # another seed
    full = order.reshape(-1, batch)
    # Every full batch is a run of its megabatch sorted by length: its spread is far below a random batch's.
    spread = np.mean([np.ptp(lengths[b]) for b in full])
    random_spread = np.mean([np.ptp(lengths[b]) for b in np.random.default_rng(0).permutation(1000)[:992].reshape(-1, 16)])
    assert spread < random_spread / 4
    for b in full:
        assert np.all(np.diff(lengths[b]) <= 0)  # longest first within a batch
    # The batches' order is shuffled, not long-to-short within each megabatch.
    firsts = lengths[full[:, 0]]
    assert not np.all(np.diff(firsts[:5]) <= 0) or not np.all(np.diff(firsts[5:10]) <= 0)


def test_the_sorted_megabatches_are_cut_from_the_shuffled_rows():
    lengths, batch, mega = _lengths(200), 10, 4
    order = group_by_length_order(lengths, batch, seed=3, epoch=2, megabatch_batches=mega).numpy()
    # The rows of each megabatch: the same set as a seeded shuffle cut into 40-row pieces.
    shuffled = tf.random.experimental.stateless_shuffle(
        tf.range(200, dtype=tf.int64), tf.random.experimental.stateless_fold_in(tf.constant([3, 2], tf.int64), 0))
    pieces = [set(p) for p in shuffled.numpy().reshape(-1, batch * mega)]
    for b in order.reshape(-1, batch):
        assert any(set(b) <= piece for piece in pieces)


def test_group_by_length_batches_resume_and_every_row_every_epoch():
    lengths, batch = _lengths(103), 10
    stream = list(group_by_length_batches(lengths, batch, seed=5, megabatch_batches=2).take(33).as_numpy_iterator())
    assert all(b.shape == (10,) for b in stream)
    epoch0 = group_by_length_order(lengths, batch, 5, 0, 2).numpy()
    epoch1 = group_by_length_order(lengths, batch, 5, 1, 2).numpy()
    assert len(epoch0) == len(epoch1) == 110  # 11 batches: the 3 left-over rows are not dropped
    np.testing.assert_array_equal(np.concatenate(stream[:11]), epoch0)
    np.testing.assert_array_equal(np.concatenate(stream[11:22]), epoch1)
    resumed = list(group_by_length_batches(lengths, batch, seed=5, megabatch_batches=2).skip(13).take(12)
                   .as_numpy_iterator())
    np.testing.assert_array_equal(np.stack(resumed), np.stack(stream[13:25]))
    from_epoch = list(group_by_length_batches(lengths, batch, seed=5, start_epoch=1, megabatch_batches=2)
                      .take(11).as_numpy_iterator())
    np.testing.assert_array_equal(np.stack(from_epoch), np.stack(stream[11:22]))
    with pytest.raises(ValueError, match="no full global batch"):
        group_by_length_batches(lengths[:5], batch, 5)


def test_megabatch_size_rule():
    assert [batches_per_megabatch(n, 32) for n in (10, 127, 128, 3668, 6399, 6400, 10 ** 6)] == [1, 1, 1, 28, 49, 50, 50]


def test_group_by_length_keeps_every_row_of_real_data_in_every_epoch(shared):
    """MRPC's 3,668 training pairs (lengths in 30k-clean pieces), global batch 32: every row trains in
    each of 3 epochs; the last batch overlaps the one before it by 32 - 3668 % 32 = 12 rows."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(shared("data", "spm", "30k-clean.model")))
    rows = [line.split("\t") for line in shared("data", "glue", "MRPC", "train.tsv").read_text(
        encoding="utf-8").splitlines()[1:]]
    lengths = np.array([min(128, len(sp.encode(r[3])) + len(sp.encode(r[4])) + 3) for r in rows])
    assert len(lengths) == 3668 and lengths.min() < 40 < 100 < lengths.max()
    batch, per_epoch = 32, -(-3668 // 32)
    stream = np.stack(list(group_by_length_batches(lengths, batch, seed=7, num_epochs=3).as_numpy_iterator()))
    assert stream.shape == (3 * per_epoch, batch)
    for epoch in range(3):
        counts = np.bincount(stream[epoch * per_epoch:(epoch + 1) * per_epoch].ravel(), minlength=3668)
        assert counts.min() == 1 and counts.sum() == 3668 + 12 and (counts == 2).sum() == 12
    # Still grouped: a batch's spread of lengths is far below that of a shuffled batch.
    spread = np.mean([np.ptp(lengths[b]) for b in stream])
    shuffled = np.random.default_rng(0).permutation(3668)[:3648].reshape(-1, batch)
    assert spread < np.mean([np.ptp(lengths[b]) for b in shuffled]) / 4
