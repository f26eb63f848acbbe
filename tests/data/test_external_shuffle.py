"""The external shuffle's order: (key, ordinal), whatever file, writer or split a record went through."""
import os
import random

import pytest

from albert_tf.pretraining_data.external_shuffle import ShuffleStats, append_to_buckets, bucket_of, entry, sorted_bucket


def _scatter(directory, records, num_buckets, writers, rng):
    """Appends each record, in a random order, to the bucket file of a random writer."""
    shuffled = list(records)
    rng.shuffle(shuffled)
    for key, ordinal, payload in shuffled:
        append_to_buckets(str(directory), f"w{rng.randrange(writers)}",
                          {bucket_of(key, num_buckets): entry(key, ordinal, payload)})


@pytest.mark.parametrize("memory_limit", [1 << 20, 600], ids=["whole", "split-on-disk"])
def test_sorted_by_key_then_ordinal_whatever_the_writer(tmp_path, memory_limit):
    rng = random.Random(7)
    # Few distinct keys, so most records tie on their key and only the ordinal orders them.
    keys = [rng.getrandbits(64) for _ in range(5)]
    records = [(rng.choice(keys), ordinal, f"record {ordinal}".encode() * rng.randint(1, 3))
               for ordinal in rng.sample(range(10**6), 300)]
    num_buckets = 3
    _scatter(tmp_path, records, num_buckets, writers=4, rng=rng)
    stats = ShuffleStats()
    got = []
    for bucket in range(num_buckets):
        for run in sorted_bucket(str(tmp_path), bucket, num_buckets, [f"w{i}" for i in range(4)], memory_limit,
                                 max_open=4, stats=stats):
            got.extend(bytes(payload) for payload in run)
    assert got == [payload for _, _, payload in sorted(records)]
    assert os.listdir(tmp_path) == []  # every bucket file (and split part) removed once read
    if memory_limit < 1000:
        assert stats.bucket_splits > 0 and stats.largest_sorted_bytes > 0
    else:
        assert stats.bucket_splits == 0


def test_empty_bucket_yields_nothing(tmp_path):
    assert list(sorted_bucket(str(tmp_path), 0, 1, ["w0"], 1 << 20, 4, ShuffleStats())) == []
