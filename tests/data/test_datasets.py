"""The data floor's datasets over a cached split: batches cut to their length hold exactly the padded
batches' real positions; static buckets under XLA/TPU; group_by_length's global batches are the same on
one device and two workers, and on resume."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data import datasets
from albert_tf.data.feature_cache import cached_records
from albert_tf.data.input_pipeline import TrainInputContext
from albert_tf.data.records import RecordSchema, model_input_features

SEQ = 32
SCHEMA = RecordSchema("lengths_test", 1, (*model_input_features(), ("label_ids", "int64", None)))
LENGTHS = [3 + i % 6 if i < 18 else 10 + (i * 7) % 20 for i in range(40)]  # short ones first, then 10..29


@pytest.fixture(scope="module")
def cached(tmp_path_factory):
    """40 records of LENGTHS real positions (so batches differ in length)."""
    rng = np.random.default_rng(0)
    lengths = LENGTHS

    def build(write):
        for i, n in enumerate(lengths):
            ids = [*rng.integers(5, 100, n), *[0] * (SEQ - n)]
            write(SCHEMA.serialize({"input_ids": ids, "input_mask": [1] * n + [0] * (SEQ - n),
                                    "segment_ids": [0] * SEQ, "label_ids": i}, max_seq_length=SEQ))
        return {}

    path = tmp_path_factory.mktemp("cache") / "split.tf_record"
    return cached_records(str(path), SCHEMA, {"max_seq_length": SEQ}, build)


def _batches(dataset):
    return [{k: v.numpy() for k, v in batch.items()} for batch in dataset]


@pytest.mark.parametrize("policy,widths", [
    (datasets.LengthPolicy(multiple=8), lambda longest: -(-longest // 8) * 8),
    (datasets.LengthPolicy(static=True, buckets=(8, 16, 32)), lambda longest: next(b for b in (8, 16, 32)
                                                                                     if b >= longest)),
])
def test_eval_batches_are_cut_to_their_length_and_keep_every_real_position(cached, policy, widths):
    padded = _batches(datasets.eval_dataset(cached, 6))
    cut = _batches(datasets.eval_dataset(cached, 6, policy))
    assert len(cut) == len(padded) == 7  # 40 records + 2 padding rows
    for full, short in zip(padded, cut):
        longest = int(full["input_mask"].sum(1).max()) or 1
        assert short["input_ids"].shape[1] == min(widths(longest), SEQ)
        width = short["input_ids"].shape[1]
        for name in ("input_ids", "input_mask", "segment_ids"):
            np.testing.assert_array_equal(short[name], full[name][:, :width])
            assert not full[name][:, width:].any()  # nothing real was cut
        np.testing.assert_array_equal(short["label_ids"], full["label_ids"])
    assert {b["input_ids"].shape[1] for b in cut} != {SEQ}  # some batch was actually shorter


def _global_batches(cached, workers, steps, skip=0):
    """The label ids of each global batch, gathered from every worker's pipeline."""
    fn = datasets.train_dataset_fn(cached, 8, seed=5, lengths=datasets.LengthPolicy(), group_by_length=True)
    per_worker = [list(fn(TrainInputContext(workers, w, workers, global_batches_to_skip=skip)).take(steps))
                  for w in range(workers)]
    return [np.concatenate([per_worker[w][s]["label_ids"].numpy() for w in range(workers)]) for s in range(steps)]


def test_group_by_length_is_the_same_on_any_topology_and_on_resume(cached):
    one = _global_batches(cached, 1, 10)
    two = _global_batches(cached, 2, 10)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)
    resumed = _global_batches(cached, 1, 4, skip=6)
    for a, b in zip(one[6:], resumed):
        np.testing.assert_array_equal(a, b)
    # 40 rows, batch 8: a megabatch is min(40 // 32, 50) = 1 batch (Hugging Face's rule), so the sampler
    # only sorts each shuffled batch, longest first (tests/data/test_batching.py checks the grouping).
    lengths = np.array(LENGTHS)
    for batch in one:
        assert np.all(np.diff(lengths[batch]) <= 0)
    # Each epoch holds every full batch's rows once.
    epoch = np.concatenate(one[:5])
    assert sorted(epoch) == list(range(40))


@pytest.mark.parametrize("group_by_length", [False, True])
def test_static_buckets_give_every_replica_of_a_step_the_global_batchs_bucket(cached, group_by_length):
    """TPU / XLA: with 2 replicas (one worker, and two workers of one replica each) both per-replica
    batches of a step take one length, the bucket of the longest row of the whole global batch, and hold
    the one-replica run's rows."""
    buckets, lengths = (8, 16, 32), np.array(LENGTHS)
    policy = datasets.LengthPolicy(static=True, buckets=buckets)
    fn = datasets.train_dataset_fn(cached, 8, seed=5, lengths=policy, group_by_length=group_by_length)
    one = list(fn(TrainInputContext(1, 0, 1)).take(10))
    replicas = list(fn(TrainInputContext(1, 0, 2)).take(20))
    workers = [list(fn(TrainInputContext(2, w, 2)).take(10)) for w in range(2)]
    mixed = 0
    for step, whole in enumerate(one):
        longest = lengths[whole["label_ids"].numpy()].max()
        bucket = next(b for b in buckets if b >= longest)
        halves = [(replicas[2 * step], replicas[2 * step + 1]), (workers[0][step], workers[1][step])]
        for first, second in halves:
            assert first["input_ids"].shape[1] == second["input_ids"].shape[1] == bucket == whole["input_ids"].shape[1]
            np.testing.assert_array_equal(np.concatenate([first["label_ids"], second["label_ids"]]),
                                          whole["label_ids"])
        # Cut on their own, the two halves would have taken different buckets on some steps.
        own = [next(b for b in buckets if b >= lengths[h["label_ids"].numpy()].max()) for h in halves[0]]
        mixed += own[0] != own[1]
    assert mixed > 0
