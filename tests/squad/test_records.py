"""TFRecord + JSON cache of SQuAD features: contents, reuse, rebuild on change."""
import json
import os

import numpy as np
import tensorflow as tf

from albert_tf.data import datasets
from albert_tf.squad import records

TRAIN = "train-v1.1.University_of_Notre_Dame.json"


def test_predict_cache_roundtrip_and_reuse(shared, spm_path, convert, tmp_path, monkeypatch):
    squad = str(shared("data", "squad", TRAIN))
    record = str(tmp_path / "predict.tf_record")
    cached = records.build_or_load(squad, record, spm_path, 384, 128, 64, is_training=False)
    _, feats, _ = convert(TRAIN, False)
    metas = records.feature_metas(cached)
    assert cached.side["num_examples"] == 269 and cached.num_records == len(feats) == len(metas)
    side = json.load(open(record + ".json"))
    assert side["settings"]["doc_stride"] == 128 and "key" in side
    # Records hold exactly the features, in order.
    batches = list(datasets.eval_dataset(cached, batch_size=64))
    assert sum(int(b["is_real_example"].numpy().sum()) for b in batches) == len(feats)
    first = batches[0]
    assert first["input_ids"].dtype.name == "int32" and first["p_mask"].shape == (64, 384)
    np.testing.assert_array_equal(first["input_ids"][3].numpy(), feats[3].input_ids)
    np.testing.assert_array_equal(first["p_mask"][5].numpy(), feats[5].p_mask)
    meta = metas[7]
    assert (meta.unique_id, meta.example_index, meta.doc_offset) == \
        (feats[7].unique_id, feats[7].example_index, feats[7].doc_offset)
    assert meta.tok_start_to_orig_index == feats[7].tok_start_to_orig_index
    assert meta.token_is_max_context == feats[7].token_is_max_context
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]

    # Same inputs: reused without rebuilding; a changed setting rebuilds.
    built = []
    real_build = records._build
    monkeypatch.setattr(records, "_build", lambda *a: built.append(a) or real_build(*a))
    again = records.build_or_load(squad, record, spm_path, 384, 128, 64, is_training=False)
    assert not built and again.num_records == cached.num_records
    changed = records.build_or_load(squad, record, spm_path, 192, 128, 64, is_training=False)
    assert len(built) == 1 and changed.num_records > cached.num_records


def test_training_records_have_labels(shared, spm_path, tmp_path):
    squad = str(shared("data", "squad", TRAIN))
    cached = records.build_or_load(squad, str(tmp_path / "train.tf_record"), spm_path,
                                   128, 64, 32, is_training=True)
    assert cached.side["num_examples"] == 269 and not records.feature_metas(cached)
    context = tf.distribute.InputContext()
    batch = next(iter(datasets.train_dataset_fn(cached, 32, seed=1, shuffle_buffer=100)(context)))
    assert set(batch) >= {"start_positions", "end_positions", "is_impossible", "p_mask"}
    assert batch["input_ids"].shape == (32, 128)
    imp = batch["is_impossible"].numpy().astype(bool)
    assert (batch["start_positions"].numpy()[imp] == 0).all()
    assert (batch["start_positions"].numpy()[~imp] > 0).all()
