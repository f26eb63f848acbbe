"""Constants that outputs at 1e-4 do not pin: LayerNorm's epsilon (1e-12) and the
attention mask adder ((1 - mask) * -10000), each in a case where another value shows."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertModel
from albert_tf.modeling.layers import LayerNorm

CONFIG = AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=8, num_hidden_layers=2,
                      num_attention_heads=2, intermediate_size=16, max_position_embeddings=16)


def _numpy_layer_norm(x, epsilon):
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + epsilon)


# Rows of variance ~1e-12: epsilon 1e-12 scales them to O(1), epsilon 1e-6 to O(1e-3).
NEAR_CONSTANT = (np.array([[1, -1, 2, -2, 0.5, -0.5, 3, -3], [2, 0, 1, 0, 1, 0, 2, 0]]) * 1e-6).astype(np.float32)


def test_near_constant_rows_show_epsilon_1e12():
    want = _numpy_layer_norm(NEAR_CONSTANT, 1e-12)
    other = _numpy_layer_norm(NEAR_CONSTANT, 1e-6)
    assert np.abs(want - other).max() > 0.3  # the case really tells the two apart
    np.testing.assert_allclose(LayerNorm()(tf.constant(NEAR_CONSTANT)).numpy(), want, rtol=1e-3, atol=1e-4)


def test_every_model_layer_norm_uses_epsilon_1e12():
    model = AlbertModel(CONFIG)
    model(model.dummy_inputs())
    norms = [layer for layer in model.submodules if isinstance(layer, LayerNorm)]
    assert len(norms) == 3  # embeddings, and LayerNorm / LayerNorm_1 of the one shared block
    # The embedding LayerNorm as the model calls it: a near-constant embedding sum.
    embeddings = model.embeddings
    embeddings.word_embeddings.assign(np.tile(NEAR_CONSTANT, (15, 1)))
    embeddings.token_type_embeddings.assign(np.zeros_like(embeddings.token_type_embeddings))
    embeddings.position_embeddings.assign(np.zeros_like(embeddings.position_embeddings))
    ids = tf.constant([[0, 1]], tf.int32)
    out = embeddings(ids, tf.zeros_like(ids)).numpy()[0]
    np.testing.assert_allclose(out, _numpy_layer_norm(NEAR_CONSTANT, 1e-12), rtol=1e-3, atol=1e-4)
    for layer in norms:
        assert layer.epsilon == 1e-12, layer.name


def test_mask_adder_is_minus_10000_on_masked_keys(monkeypatch):
    """The logits entering every layer's softmax are the attention scores, recomputed here in
    numpy from that layer's input and query/key weights, plus exactly -10000 on the padded keys
    and 0 elsewhere; in the first layer (whose scores do not depend on the mask) also against
    the same call with an all-ones mask."""
    from albert_tf.modeling.layers import SelfAttention

    seen, inputs = [], []
    softmax = tf.nn.softmax
    attention_call = SelfAttention.call

    def recording_softmax(logits, *args, **kwargs):
        seen.append(logits.numpy())
        return softmax(logits, *args, **kwargs)

    def recording_call(self, x, *args, **kwargs):
        inputs.append((self, x.numpy()))
        return attention_call(self, x, *args, **kwargs)

    monkeypatch.setattr(tf.nn, "softmax", recording_softmax)
    monkeypatch.setattr(SelfAttention, "call", recording_call)
    model = AlbertModel(CONFIG)
    model(model.dummy_inputs())
    ids = tf.constant([[2, 5, 7, 9, 11, 3], [2, 4, 6, 8, 3, 0]], tf.int32)
    mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0]], np.int32)
    seen.clear()
    inputs.clear()
    model({"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)})
    model({"input_ids": ids, "input_mask": tf.constant(mask), "segment_ids": tf.zeros_like(ids)})
    assert len(seen) == 4  # two layers, two calls
    full, padded = seen[0], seen[2]  # first layer of each call: [batch, heads, query, key]
    want = np.broadcast_to(((1 - mask) * -10000.0)[:, None, None, :], full.shape)
    np.testing.assert_allclose(padded - full, want, rtol=0, atol=2e-3)
    assert len(inputs) == 4
    for (layer, x), logits in zip(inputs[2:], seen[2:]):  # every layer of the padded call
        def heads(kernel, bias):
            y = x.astype(np.float64) @ kernel.numpy() + bias.numpy()
            return y.reshape(*x.shape[:2], 2, -1).transpose(0, 2, 1, 3)

        q, k = heads(layer.query.kernel, layer.query.bias), heads(layer.key.kernel, layer.key.bias)
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
        np.testing.assert_allclose(logits - scores, want, rtol=0, atol=2e-3)
    # And the padded keys get no attention at all.
    probs = softmax(tf.constant(padded), axis=-1).numpy()
    assert probs[np.broadcast_to(mask[:, None, None, :] == 0, probs.shape)].max() == 0.0


@pytest.mark.parametrize("task", ["glue", "race", "squad_v1", "squad_v2", "pretraining"])
def test_task_heads_start_at_the_originals_stddev(task):
    """The original's GLUE, RACE and SQuAD 1.1 heads start truncated-normal 0.02 whatever the config's
    initializer_range (classifier_utils, race_utils, squad_utils create_v1_model); sentence order and the
    SQuAD 2.0 head follow the config. Checked with initializer_range 0.5: a truncated normal of stddev s
    stays within 2s, and 1,000 draws of stddev 0.5 have a spread far above 0.02's."""
    from albert_tf.glue.heads import GlueClassifier
    from albert_tf.pretraining import AlbertPretrainer
    from albert_tf.race.model import RaceModel
    from albert_tf.squad.heads import SquadV1Model, SquadV2Model

    config = AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=1000, num_hidden_layers=1,
                          num_attention_heads=4, intermediate_size=16, initializer_range=0.5)
    tf.random.set_seed(0)
    ids = tf.constant([[2, 5, 6, 7, 8, 9, 10, 3]])
    inputs = {"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)}
    if task == "glue":
        model = GlueClassifier(config, num_labels=2)
        model(inputs)
        kernels = [model.classifier.output_weights]
    elif task == "race":
        model = RaceModel(config)
        model({k: v[:, None] for k, v in inputs.items()})
        kernels = [model.choice_scorer.output_weights]
    elif task == "squad_v1":
        model = SquadV1Model(config)
        model(inputs)
        kernels = [model.head.output_weights]
    elif task == "squad_v2":
        model = SquadV2Model(config)
        model({**inputs, "p_mask": tf.zeros_like(ids, tf.float32)})
        kernels = [model.head.start_dense.kernel]
    else:
        model = AlbertPretrainer(config)
        model({**inputs, "masked_lm_positions": tf.constant([[1]])})
        kernels = [model.sentence_order.output_weights]
    spread = float(np.std(kernels[0].numpy()))
    if task in ("glue", "race", "squad_v1"):
        assert 0.01 < spread < 0.02 and float(np.abs(kernels[0].numpy()).max()) <= 0.04 + 1e-6, spread
    else:
        assert 0.3 < spread < 0.5, spread
