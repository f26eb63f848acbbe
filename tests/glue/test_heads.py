"""Classifier head: TF1 names and shapes, the original's logits and losses, checkpoint round trip."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.glue import heads
from albert_tf.weights import load_checkpoint, save_tf1_checkpoint
from albert_tf.weights.kinds import tf1_name_map


@pytest.fixture
def reference(shared):
    d = shared("reference", "albert_tiny_shared")
    return AlbertConfig.from_json_file(str(d / "albert_config.json")), d / "model.ckpt", np.load(d / "io.npz")


def _inputs(io):
    return {k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}


def test_head_names_shapes_and_logits(reference):
    config, ckpt, io = reference
    model = heads.build_classifier(config, "mnli")
    report = load_checkpoint(model, str(ckpt), allow_missing_heads=True)
    assert report.missing_allowed == ["output_bias", "output_weights"]
    names = tf1_name_map(model)
    assert names["output_weights"].shape == (3, 48) and names["output_bias"].shape == (3,)
    out = model(_inputs(io), training=False)
    pooled = io["pooled_output"].astype(np.float64)
    w = names["output_weights"].numpy().astype(np.float64)
    expected = pooled @ w.T + names["output_bias"].numpy()
    np.testing.assert_allclose(out["logits"].numpy(), expected, atol=1e-4)
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, atol=1e-6)
    # Dropout 0.1 on the pooled output only in training.
    again = model(_inputs(io), training=False)["logits"].numpy()
    np.testing.assert_array_equal(out["logits"].numpy(), again)
    assert not np.allclose(model(_inputs(io), training=True)["logits"].numpy(), again)


def test_regression_head_and_losses(reference):
    config, _, io = reference
    model = heads.build_classifier(config, "sts-b")
    assert tf1_name_map(model)["output_weights"].shape == (1, 48)
    out = model(_inputs(io), training=False)
    assert out["logits"].shape == (3,)
    labels = tf.constant([1.0, 2.0, 3.0])
    expected = np.mean((out["logits"].numpy() - [1.0, 2.0, 3.0]) ** 2)
    assert heads.loss_fn(out, labels, regression=True).numpy() == pytest.approx(expected, rel=1e-5)
    # Padding rows (weight 0) do not count.
    weighted = heads.loss_fn(out, labels, regression=True, sample_weight=tf.constant([1, 1, 0]))
    assert weighted.numpy() == pytest.approx(np.mean((out["logits"].numpy()[:2] - [1.0, 2.0]) ** 2), rel=1e-5)


def test_classification_loss_by_hand():
    logits = tf.constant([[0.0, np.log(3.0)], [2.0, 2.0]])
    loss = heads.loss_fn({"logits": logits}, tf.constant([1, 0]), regression=False)
    assert loss.numpy() == pytest.approx((-np.log(0.75) - np.log(0.5)) / 2, rel=1e-6)


def test_tf1_checkpoint_round_trip(reference, tmp_path):
    config, _, io = reference
    model = heads.build_classifier(config, "cola")
    prefix = save_tf1_checkpoint(model, str(tmp_path / "model.ckpt"))
    keys = dict(tf.train.list_variables(prefix))
    assert keys["output_weights"] == [2, 48] and keys["output_bias"] == [2]
    other = heads.build_classifier(config, "cola")
    load_checkpoint(other, prefix)
    np.testing.assert_allclose(other(_inputs(io))["logits"].numpy(), model(_inputs(io))["logits"].numpy(),
                               atol=1e-6)


def test_a_label_count_mismatch_names_the_labels_not_a_config_field(reference, tmp_path):
    """A 2-label checkpoint restored into a 3-label model: the hint is the label count, not hidden_size (the
    shapes differ in their first dimension, the classes). labels.txt is named only where there is one beside
    the checkpoint (a --task_name=custom run's): elsewhere (here a checkpoint that is no run's) it said "check
    labels.txt in --output_dir", which has nothing to do with it."""
    from albert_tf.weights.errors import CheckpointError

    config, _, _ = reference
    prefix = save_tf1_checkpoint(heads.build_classifier(config, "cola"), str(tmp_path / "model.ckpt"))
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(heads.build_classifier(config, "mnli"), prefix)
    message = str(err.value)
    assert "output_weights: expected shape [3, 48], found shape [2, 48]; the number of labels differs (the " \
           "checkpoint's head has 2, this task 3): it was fine-tuned for another task or other labels" in message
    assert "output_bias: expected shape [3], found shape [2]; the number of labels differs" in message
    assert "hidden_size" not in message and "labels.txt" not in message

    (tmp_path / "labels.txt").write_text("no\nyes\n")  # a custom run's labels beside its checkpoint
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(heads.build_classifier(config, "mnli"), prefix)
    assert (f"the number of labels differs (the checkpoint's head has 2, this task 3): check "
            f"{tmp_path / 'labels.txt'} (the labels of the run that wrote it)") in str(err.value)
