"""RaceModel: TF1 names of Google's RACE checkpoints, choices scored independently, dropout
keyed by example and choice (the same masks whatever the batch split), one-hot lookups."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.modeling.dropout import dropout_seed_scope
from albert_tf.race.model import RaceModel, build_race_model

CONFIG = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=16)


def _inputs(batch, seq=8, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, CONFIG.vocab_size, size=(batch, 4, seq)).astype(np.int32)
    return {"input_ids": tf.constant(ids), "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)}


def test_google_names_round_trip(tmp_path):
    from albert_tf.weights import load_checkpoint, save_tf1_checkpoint

    model = build_race_model(CONFIG)
    prefix = save_tf1_checkpoint(model, str(tmp_path / "model.ckpt"))
    shapes = dict(tf.train.list_variables(prefix))
    assert shapes["output_weights"] == [1, CONFIG.hidden_size] and shapes["output_bias"] == [1]
    assert "bert/pooler/dense/kernel" in shapes and "bert/embeddings/word_embeddings" in shapes
    assert not any(name.startswith("cls/") for name in shapes)  # no pretraining or SQuAD head
    np.testing.assert_array_equal(tf.train.load_variable(prefix, "output_weights"),
                                  model.choice_scorer.output_weights.numpy())
    other = build_race_model(CONFIG)
    load_checkpoint(other, prefix)
    x = _inputs(3)
    np.testing.assert_array_equal(other(x)["logits"].numpy(), model(x)["logits"].numpy())


def test_each_choice_is_scored_on_its_own_row():
    """logits[b, j] = output projection of the encoder's pooled output for choice j alone."""
    model = build_race_model(CONFIG)
    x = _inputs(2)
    logits = model(x)["logits"].numpy()
    assert logits.shape == (2, 4)
    w = model.choice_scorer.output_weights.numpy()
    b = model.choice_scorer.output_bias.numpy()
    for j in range(4):
        row = {k: v[:, j] for k, v in x.items()}
        pooled = model.encoder(row)["pooled_output"].numpy()
        np.testing.assert_allclose(logits[:, j], pooled @ w[0] + b[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(x)["probabilities"].numpy().sum(-1), 1.0, rtol=1e-6)


def test_dropout_masks_do_not_depend_on_the_batch_split():
    """Example 1 of a two-example batch gets the masks it gets alone at global position 1
    (the rows of its four choices are keyed 4..7, not 1..4, which would reuse example 0's)."""
    model = RaceModel(AlbertConfig(**{**CONFIG.to_dict(), "hidden_dropout_prob": 0.3}), dropout_rate=0.5)
    x = _inputs(2, seed=1)
    model(x)
    seed = tf.constant([7, 11], tf.int64)
    with dropout_seed_scope(seed, 0):
        together = model(x, training=True)["logits"].numpy()
    with dropout_seed_scope(seed, 1):
        alone = model({k: v[1:] for k, v in x.items()}, training=True)["logits"].numpy()
    with dropout_seed_scope(seed, 0):
        first_alone = model({k: v[:1] for k, v in x.items()}, training=True)["logits"].numpy()
    np.testing.assert_allclose(alone[0], together[1], rtol=1e-5)
    np.testing.assert_allclose(first_alone[0], together[0], rtol=1e-5)
    assert not np.allclose(together, model(x)["logits"].numpy())  # dropout did act


def test_one_hot_lookups_give_the_same_scores():
    from albert_tf.modeling.encoder import AlbertModel

    gathered = build_race_model(CONFIG)
    one_hot = build_race_model(CONFIG, use_one_hot_embeddings=True)
    assert one_hot.encoder.use_one_hot_embeddings and not gathered.encoder.use_one_hot_embeddings
    one_hot.set_weights(gathered.get_weights())
    x = _inputs(2)
    np.testing.assert_allclose(one_hot(x)["logits"].numpy(), gathered(x)["logits"].numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(RaceModel.from_config(one_hot.get_config()).encoder, AlbertModel)


def test_wrong_input_shape_is_named():
    model = build_race_model(CONFIG)
    flat = {k: tf.reshape(v, [8, 8]) for k, v in _inputs(2).items()}
    with pytest.raises(ValueError, match=r"multiple-choice input 'input_ids' must have shape \[batch, choices, seq_length\]"):
        model(flat)


def test_inputs_that_are_not_a_dict_are_named():
    """A tuple used to fail with "tuple indices must be integers", a bare tensor with TensorFlow's words on
    indices, a missing key with a KeyError."""
    model = build_race_model(CONFIG)
    inputs = _inputs(1)
    with pytest.raises(ValueError, match=r"expects a dict with keys \['input_ids', 'input_mask', 'segment_ids'\], got tuple"):
        model(tuple(inputs.values()))
    with pytest.raises(ValueError, match="expects a dict with keys"):
        model(inputs["input_ids"])
    with pytest.raises(ValueError, match="'segment_ids' is missing"):
        model({k: inputs[k] for k in ("input_ids", "input_mask")})


def test_predict_results_file_has_the_original_header(tmp_path):
    """run_race's predict_results.txt: the original's header line, then sorted `key = value` lines."""
    from albert_tf.race.outputs import write_predict_results
    from albert_tf.training.results import read_eval_results

    path = write_predict_results(str(tmp_path), {"global_step": 7, "eval_loss": 1.25, "eval_accuracy": 0.5})
    assert (tmp_path / "predict_results.txt").read_text().splitlines() == [
        "***** Predict results *****", "eval_accuracy = 0.5", "eval_loss = 1.25", "global_step = 7"]
    assert read_eval_results(path) == {"eval_accuracy": "0.5", "eval_loss": "1.25", "global_step": "7"}
