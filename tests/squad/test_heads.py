"""SQuAD heads on random tensors: shapes, TF1 names, p_mask masking, beam layout, losses."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertModel, InputError
from albert_tf.squad import heads
from albert_tf.weights import kinds, names

H, S, B = 16, 12, 3


def _config():
    return AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=H, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)


def _p_mask():
    # [CLS] ok, question 1..3 masked, doc 4..8 ok, [SEP] + padding masked (ragged per row).
    m = np.ones([B, S], np.int32)
    m[:, 0] = 0
    for b, last in enumerate((8, 7, 6)):
        m[b, 4:last + 1] = 0
    return tf.constant(m)


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def test_v1_head_names_shapes_and_loss():
    model = heads.SquadV1Model(AlbertModel(_config()))
    seq = tf.random.stateless_normal([B, S, H], seed=[1, 2])
    start, end = model.head(seq)[..., 0], model.head(seq)[..., 1]
    assert start.shape == end.shape == (B, S) and start.dtype == tf.float32
    model(model.dummy_inputs())
    tf1 = {k: v.shape.as_list() for k, v in kinds.tf1_name_map(model).items() if not k.startswith("bert/")}
    assert tf1 == {"cls/squad/output_weights": [2, H], "cls/squad/output_bias": [2]}
    w, b = model.head.output_weights.numpy(), model.head.output_bias.numpy()
    np.testing.assert_allclose(start, seq.numpy() @ w[0] + b[0], atol=1e-5)
    feats = {"start_positions": tf.constant([4, 5, 0]), "end_positions": tf.constant([6, 5, 0])}
    outputs = {"start_logits": start, "end_logits": end}
    ls, le = _log_softmax(start.numpy()), _log_softmax(end.numpy())
    expected = np.mean([-(ls[i, s] + le[i, e]) / 2 for i, (s, e) in enumerate([(4, 6), (5, 5), (0, 0)])])
    np.testing.assert_allclose(heads.squad_loss(outputs, feats, version_2=False), expected, rtol=1e-5)


def test_v2_head_beam_masking_and_names():
    model = heads.SquadV2Model(AlbertModel(_config()), start_n_top=3, end_n_top=2, dropout_prob=0.1)
    model(model.dummy_inputs())
    head = model.head
    seq = tf.random.stateless_normal([B, S, H], seed=[3, 4])
    p_mask = _p_mask()
    out = head(seq, p_mask)
    assert out["start_top_index"].shape == out["start_top_log_probs"].shape == (B, 3)
    assert out["end_top_index"].shape == out["end_top_log_probs"].shape == (B, 6)
    assert out["cls_logits"].shape == (B,)
    allowed = p_mask.numpy() == 0
    for b in range(B):
        assert allowed[b, out["start_top_index"][b].numpy()].all()
        assert allowed[b, out["end_top_index"][b].numpy()].all()
    # Beam scores are sorted log-probabilities; masked positions carry ~0 mass.
    stl = out["start_top_log_probs"].numpy()
    assert (np.diff(stl, axis=1) <= 0).all() and (stl <= 0).all()
    tf1 = {k: v.shape.as_list() for k, v in kinds.tf1_name_map(model).items() if not k.startswith("bert/")}
    assert tf1 == {
        "start_logits/dense/kernel": [H, 1], "start_logits/dense/bias": [1],
        "end_logits/dense_0/kernel": [2 * H, H], "end_logits/dense_0/bias": [H],
        "end_logits/LayerNorm/gamma": [H], "end_logits/LayerNorm/beta": [H],
        "end_logits/dense_1/kernel": [H, 1], "end_logits/dense_1/bias": [1],
        "answer_class/dense_0/kernel": [2 * H, H], "answer_class/dense_0/bias": [H],
        "answer_class/dense_1/kernel": [H, 1],
    }
    # The beam's end scores for start i equal the training path run with start i.
    for i in range(3):
        forced = head(seq, p_mask, start_positions=out["start_top_index"][:, i])
        for b in range(B):
            ends = out["end_top_index"][b, 2 * i:2 * i + 2].numpy()
            np.testing.assert_allclose(forced["end_log_probs"].numpy()[b, ends],
                                       out["end_top_log_probs"][b, 2 * i:2 * i + 2], atol=1e-5)
        np.testing.assert_allclose(forced["cls_logits"], out["cls_logits"], atol=1e-6)


def test_v2_loss_matches_numpy():
    head = heads.SquadV2Head(H)
    seq = tf.random.stateless_normal([B, S, H], seed=[5, 6])
    feats = {"start_positions": tf.constant([4, 0, 5]), "end_positions": tf.constant([7, 0, 6]),
             "is_impossible": tf.constant([0, 1, 0]), "p_mask": _p_mask()}
    out = head(seq, feats["p_mask"], feats["start_positions"], training=False)
    assert out["end_log_probs"].shape == (B, S)
    sl, el, c = out["start_log_probs"].numpy(), out["end_log_probs"].numpy(), out["cls_logits"].numpy()
    assert (sl[feats["p_mask"].numpy() == 1] < -1e20).all()      # masked start positions
    y = np.array([0.0, 1.0, 0.0])
    sig_ce = np.maximum(c, 0) - c * y + np.log1p(np.exp(-np.abs(c)))
    expected = np.mean([-(sl[i, s] + el[i, e]) / 2 for i, (s, e) in enumerate([(4, 7), (0, 0), (5, 6)])]
                       + 0.5 * sig_ce)
    np.testing.assert_allclose(heads.squad_loss(out, feats, version_2=True), expected, rtol=1e-5)


def test_models_register_tf1_names():
    v1 = heads.build_squad_model(_config(), version_2=False)
    v2 = heads.build_squad_model(_config(), version_2=True, start_n_top=2, end_n_top=2)
    n1, n2 = kinds.tf1_name_map(v1), kinds.tf1_name_map(v2)
    assert "cls/squad/output_weights" in n1 and "bert/pooler/dense/kernel" in n1
    assert "answer_class/dense_1/kernel" in n2 and "cls/squad/output_bias" not in n2
    assert len(n1) == len(v1.weights) and len(n2) == len(v2.weights)
    inputs = v2.dummy_inputs(batch_size=2, seq_length=10)
    inputs["start_positions"] = tf.constant([0, 3])
    # Training features (with start_positions) give log-probs in training and evaluation.
    assert set(v2(inputs, training=True)) == set(v2(inputs)) == {"start_log_probs", "end_log_probs", "cls_logits"}
    del inputs["start_positions"]
    assert set(v2(inputs)) >= {"start_top_index", "end_top_index", "cls_logits"}


def test_v2_model_inputs_that_are_not_a_dict_are_named():
    """A tuple or a bare tensor used to fail in the p_mask lookup ("Cannot convert 'p_mask' to EagerTensor")."""
    model = heads.SquadV2Model(_config())
    ids = tf.zeros([B, S], tf.int32)
    with pytest.raises(InputError, match=r"expects a dict with keys \[.*'p_mask'\], got tuple"):
        model((ids, ids, ids, _p_mask()))
    with pytest.raises(InputError, match="expects a dict with keys"):
        model(ids)
    with pytest.raises(InputError, match="'p_mask' is missing"):
        model({"input_ids": ids, "input_mask": ids, "segment_ids": ids})
