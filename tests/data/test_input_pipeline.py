"""make_tfrecord_dataset: file patterns, order, determinism, per-worker sharding, no lost examples."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data.input_pipeline import TrainInputContext, expand_file_patterns, make_tfrecord_dataset


def parse(serialized):
    return tf.io.parse_single_example(serialized, {"i": tf.io.FixedLenFeature([], tf.int64)})["i"]


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """4 files holding the numbers 0..39 (file k holds 10k..10k+9)."""
    root = tmp_path_factory.mktemp("shards")
    for k in range(4):
        with tf.io.TFRecordWriter(str(root / f"part-{k}.tfrecord")) as writer:
            for i in range(10 * k, 10 * k + 10):
                feature = {"i": tf.train.Feature(int64_list=tf.train.Int64List(value=[i]))}
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return root


def batches(dataset, count):
    return [b.numpy().tolist() for b in dataset.take(count)]


def test_patterns_comma_lists_and_missing_files(shards):
    files = expand_file_patterns(f"{shards}/part-[01].tfrecord, {shards}/part-3.tfrecord")
    assert [f.rsplit("/", 1)[1] for f in files] == ["part-0.tfrecord", "part-1.tfrecord", "part-3.tfrecord"]
    assert expand_file_patterns([f"{shards}/part-*", f"{shards}/part-0.tfrecord"]) == sorted(
        str(p) for p in shards.glob("part-*"))
    with pytest.raises(ValueError, match=r"'.*/nothing-\*' matches no file"):
        expand_file_patterns(f"{shards}/part-0.tfrecord,{shards}/nothing-*")


def test_eval_reads_in_order_and_keeps_the_remainder(shards):
    dataset = make_tfrecord_dataset(f"{shards}/part-*", parse, 7, is_training=False, drop_remainder=False)
    values = [v for b in dataset for v in b.numpy().tolist()]
    assert values == list(range(40))  # 5 batches of 7 and one of 5: nothing dropped


def test_training_is_deterministic_given_the_seed_and_shuffles(shards):
    def make(seed):
        return make_tfrecord_dataset(f"{shards}/part-*", parse, 8, is_training=True, seed=seed)

    first = batches(make(7), 12)
    assert first == batches(make(7), 12)
    assert first != batches(make(8), 12)
    assert sorted(v for b in first[:5] for v in b) != list(range(40))  # shuffled
    assert all(len(b) == 8 for b in first)


@pytest.mark.parametrize("num_workers,local_replicas", [(2, 1), (3, 1), (2, 2), (1, 3)])
def test_every_topology_sees_the_single_device_global_batches_in_order(shards, num_workers, local_replicas):
    """Global replica r of a step holds rows [r*b, (r+1)*b) of the one-device batch, in order."""
    per_replica = 4
    replicas = num_workers * local_replicas

    def make(index):
        ctx = tf.distribute.InputContext(num_workers, index, replicas)
        return make_tfrecord_dataset(f"{shards}/part-*", parse, per_replica, is_training=True, input_context=ctx,
                                     seed=3)

    single = batches(make_tfrecord_dataset(f"{shards}/part-*", parse, per_replica * replicas, is_training=True,
                                           seed=3), 6)
    # Each worker's pipeline yields one per-replica batch per local replica, step after step.
    workers = [batches(make(w), 6 * local_replicas) for w in range(num_workers)]
    for step, global_batch in enumerate(single):
        rows = [v for w in workers for r in range(local_replicas) for v in w[step * local_replicas + r]]
        assert rows == global_batch


def test_skipping_global_batches_resumes_the_stream_on_another_topology(shards):
    """A run that trained 5 steps of 8 on one device continues on 2 workers where it stopped."""
    single = batches(make_tfrecord_dataset(f"{shards}/part-*", parse, 8, is_training=True, seed=4), 9)
    resumed = [batches(make_tfrecord_dataset(
        f"{shards}/part-*", parse, 4, is_training=True, seed=4,
        input_context=TrainInputContext(2, w, 2, global_batches_to_skip=5)), 4) for w in range(2)]
    for step in range(4):
        assert resumed[0][step] + resumed[1][step] == single[5 + step]


def test_file_sharding_splits_files_between_workers(shards):
    seen = []
    for worker in range(2):
        ctx = tf.distribute.InputContext(2, worker, 2)
        dataset = make_tfrecord_dataset(f"{shards}/part-*", parse, 5, is_training=True, input_context=ctx, seed=1,
                                        shard_mode="files")
        seen.append({v // 10 for b in batches(dataset, 16) for v in b})
    assert seen == [{0, 2}, {1, 3}]
    with pytest.raises(ValueError, match="at least one file per worker: 1 file"):
        make_tfrecord_dataset(f"{shards}/part-0.tfrecord", parse, 5, is_training=True,
                              input_context=tf.distribute.InputContext(2, 0, 2), shard_mode="files")
    with pytest.raises(ValueError, match="another topology"):
        make_tfrecord_dataset(f"{shards}/part-*", parse, 5, is_training=True, shard_mode="files",
                              input_context=TrainInputContext(2, 0, 2, global_batches_to_skip=3))


def test_eval_with_several_workers_reads_every_record_once(shards):
    seen = []
    for worker in range(3):
        ctx = tf.distribute.InputContext(3, worker, 3)
        dataset = make_tfrecord_dataset(f"{shards}/part-*", parse, 4, is_training=False, input_context=ctx,
                                        drop_remainder=False)
        seen += [v for b in dataset for v in b.numpy().tolist()]
    assert sorted(seen) == list(range(40))


def test_iterator_checkpoint_restores_the_position(shards, tmp_path):
    dataset = make_tfrecord_dataset(f"{shards}/part-*", parse, 6, is_training=True, seed=5)
    iterator = iter(dataset)
    for _ in range(3):
        next(iterator)
    path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "input"))
    expected = [next(iterator).numpy() for _ in range(4)]
    fresh = iter(make_tfrecord_dataset(f"{shards}/part-*", parse, 6, is_training=True, seed=5))
    tf.train.Checkpoint(iterator=fresh).read(path).assert_consumed()
    np.testing.assert_array_equal([next(fresh).numpy() for _ in range(4)], expected)
