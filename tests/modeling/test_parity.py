"""Model numerics: the reference vectors, a multi-group NumPy forward, mixed precision."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertModel, AlbertPretrainer, load_checkpoint
from albert_tf.keras import keras
from albert_tf.modeling.encoder import InputError

TOL = 1e-4


def _inputs(io, positions):
    inputs = {k: tf.constant(io[k]) for k in ("input_ids", "input_mask", "segment_ids")}
    inputs["masked_lm_positions"] = tf.constant(positions, tf.int32)
    return inputs


def test_reference_checkpoint_outputs(reference):
    folder, io = reference
    model = AlbertPretrainer(AlbertConfig.from_json_file(str(folder / "albert_config.json")))
    load_checkpoint(model, str(folder / "model.ckpt"))
    out = model(_inputs(io, np.tile(np.arange(17), (3, 1))))
    real = io["input_mask"].astype(bool)
    for key in ("sequence_output", "embedding_output", "mlm_logits"):
        assert np.abs(out[key].numpy() - io[key])[real].max() < TOL, key
    for key in ("pooled_output", "sop_logits"):
        assert np.abs(out[key].numpy() - io[key]).max() < TOL, key
    assert len(out["encoder_outputs"]) == 4


@pytest.mark.parametrize("groups,inner,layers", [(2, 2, 5), (3, 1, 3), (1, 3, 2)])
def test_groups_and_inner_groups_match_numpy(tmp_path, random_tf1_checkpoint, numpy_forward, groups, inner, layers):
    config = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=layers,
                          num_hidden_groups=groups, inner_group_num=inner, num_attention_heads=3,
                          intermediate_size=20, max_position_embeddings=16)
    weights = random_tf1_checkpoint(config, tmp_path / "model.ckpt", seed=groups * 10 + inner)
    model = AlbertPretrainer(config)
    report = load_checkpoint(model, str(tmp_path / "model.ckpt"))
    assert "global_step" in report.skipped
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 40, (2, 9)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    seg = np.zeros_like(ids)
    seg[:, 4:] = 1
    pos = np.array([[0, 3, 5], [1, 2, 4]], np.int32)
    out = model({"input_ids": ids, "input_mask": mask, "segment_ids": seg, "masked_lm_positions": pos})
    want = numpy_forward(weights, config, ids, mask, seg, pos)
    real = mask.astype(bool)
    assert len(out["encoder_outputs"]) == layers * inner
    for got, exp in zip(out["encoder_outputs"], want["encoder_outputs"]):
        assert np.abs(got.numpy() - exp)[real].max() < TOL
    for key in ("sequence_output", "embedding_output"):
        assert np.abs(out[key].numpy() - want[key])[real].max() < TOL, key
    for key in ("pooled_output", "mlm_logits", "sop_logits"):
        assert np.abs(out[key].numpy() - want[key]).max() < TOL, key


def test_no_projection_when_embedding_equals_hidden():
    config = AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=8, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=8)
    model = AlbertModel(config)
    model(model.dummy_inputs())
    assert model.embedding_hidden_mapping_in is None
    assert not any("mapping_in" in v.name for v in model.weights)


@pytest.mark.parametrize("policy,tol", [("mixed_bfloat16", 0.08), ("mixed_float16", 0.01)])
def test_mixed_precision_close_to_float32(reference, policy, tol):
    """bf16 keeps ~3 significant digits: outputs of order 1 stay within 0.08 (fp16: 0.01)."""
    folder, io = reference
    config = AlbertConfig.from_json_file(str(folder / "albert_config.json"))
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = AlbertPretrainer(config)
        load_checkpoint(model, str(folder / "model.ckpt"))
        out = model(_inputs(io, np.tile(np.arange(17), (3, 1))))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    real = io["input_mask"].astype(bool)
    for key in ("sequence_output", "embedding_output", "mlm_logits", "sop_logits", "pooled_output"):
        assert out[key].dtype == tf.float32, key
    assert all(x.dtype == tf.float32 for x in out["encoder_outputs"])
    for key in ("sequence_output", "embedding_output"):
        assert np.abs(out[key].numpy() - io[key])[real].max() < tol, key
    assert np.abs(out["pooled_output"].numpy() - io["pooled_output"]).max() < tol
    # Logits are larger numbers: compare relative to their scale.
    scale = np.abs(io["mlm_logits"][real]).max()
    assert np.abs(out["mlm_logits"].numpy() - io["mlm_logits"])[real].max() < tol * scale
    scale = np.abs(io["sop_logits"]).max()
    assert np.abs(out["sop_logits"].numpy() - io["sop_logits"]).max() < tol * scale


def test_dropout_only_in_training():
    config = AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=8, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=8, hidden_dropout_prob=0.5)
    model = AlbertModel(config)
    inputs = model.dummy_inputs(2, 6)
    a, b = model(inputs)["sequence_output"], model(inputs)["sequence_output"]
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    c = model(inputs, training=True)["sequence_output"]
    assert np.abs(c.numpy() - a.numpy()).max() > 1e-3


def _tiny_model():
    return AlbertModel(AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=8, num_hidden_layers=1,
                                    num_attention_heads=2, intermediate_size=8, max_position_embeddings=10))


def test_sequence_longer_than_positions():
    ids = tf.zeros([1, 12], tf.int32)
    with pytest.raises(InputError, match="max_position_embeddings"):
        _tiny_model()({"input_ids": ids, "input_mask": ids, "segment_ids": ids})


def test_wrong_rank_and_dtype_and_missing():
    model = _tiny_model()
    ids = tf.zeros([1, 4], tf.int32)
    with pytest.raises(InputError, match="input_mask.*shape"):
        model({"input_ids": ids, "input_mask": tf.zeros([4], tf.int32), "segment_ids": ids})
    with pytest.raises(InputError, match="segment_ids.*integer"):
        model({"input_ids": ids, "input_mask": ids, "segment_ids": tf.zeros([1, 4])})
    with pytest.raises(InputError, match="input_mask.*missing"):
        model({"input_ids": ids, "segment_ids": ids})


def test_inputs_of_mismatched_shapes_or_kinds_get_one_clear_error():
    """Each of these used to fail deep in TensorFlow (AddV2 'Incompatible shapes', StridedSlice,
    'Index 1 is not uniform', "'list' object has no attribute 'shape'") or, for a pretrainer
    called on a tuple, with a TypeError about 'masked_lm_positions'."""
    model = _tiny_model()
    pretrainer = AlbertPretrainer(model)
    ids = tf.zeros([2, 4], tf.int32)
    with pytest.raises(InputError, match=r"'input_mask' must have the same shape as 'input_ids' \(2, 4\), got \(2, 3\)"):
        model({"input_ids": ids, "input_mask": tf.zeros([2, 3], tf.int32), "segment_ids": ids})
    with pytest.raises(InputError, match=r"'segment_ids' must have the same shape.*got \(1, 4\)"):
        model({"input_ids": ids, "input_mask": ids, "segment_ids": tf.zeros([1, 4], tf.int32)})
    with pytest.raises(InputError, match="'input_ids' has length 0"):
        model({"input_ids": ids[:, :0], "input_mask": ids[:, :0], "segment_ids": ids[:, :0]})
    ragged = tf.ragged.constant([[1, 2, 3], [4]])
    with pytest.raises(InputError, match="'input_ids' is a RaggedTensor.*to_tensor"):
        model({"input_ids": ragged, "input_mask": ragged, "segment_ids": ragged})
    with pytest.raises(InputError, match="'input_ids' must be an int32 tensor or NumPy array.*got list"):
        model({"input_ids": [[1, 2]], "input_mask": [[1, 1]], "segment_ids": [[0, 0]]})
    with pytest.raises(InputError, match="expects a dict with keys.*got tuple"):
        pretrainer((ids, ids, ids))
    with pytest.raises(InputError, match="expects a dict with keys"):
        pretrainer(ids)
    with pytest.raises(InputError, match=r"'masked_lm_positions' must have the same batch size as 'input_ids'"):
        pretrainer({"input_ids": ids, "input_mask": ids, "segment_ids": ids,
                    "masked_lm_positions": tf.zeros([3, 2], tf.int32)})
    with pytest.raises(InputError, match=r"'masked_lm_positions' must have shape \[batch, num_positions\]"):
        pretrainer({"input_ids": ids, "input_mask": ids, "segment_ids": ids,
                    "masked_lm_positions": tf.zeros([2], tf.int32)})
    # What stays accepted: an empty batch, other positions counts, NumPy int64.
    assert model({k: ids[:0] for k in ("input_ids", "input_mask", "segment_ids")})["pooled_output"].shape == [0, 8]
    out = pretrainer({"input_ids": np.zeros([2, 4], np.int64), "input_mask": np.ones([2, 4], np.int64),
                      "segment_ids": np.zeros([2, 4], np.int64), "masked_lm_positions": tf.zeros([2, 7], tf.int32)})
    assert out["mlm_logits"].shape == [2, 7, 30]


def test_ids_outside_the_embedding_tables_name_the_input_the_value_and_the_size():
    """An id >= vocab_size (ids of another tokenizer) or < 0 failed in the embedding layer's gather
    ("Exception encountered when calling layer 'embeddings' ... indices[0,2] = 30 is not in [0, 30)"),
    naming neither the input nor where the size comes from. A task model built on the encoder says the same."""
    model = _tiny_model()
    vocab = model.config.vocab_size
    ids = np.array([[2, 5, 7, 3], [2, 6, 3, 0]], np.int32)
    mask, segments = np.ones_like(ids), np.zeros_like(ids)
    for bad, where in ((vocab, [1, 2]), (vocab + 1234, [1, 2]), (-1, [1, 2])):
        wrong = ids.copy()
        wrong[tuple(where)] = bad
        with pytest.raises(InputError, match=rf"'input_ids' holds {bad} at \[1, 2\], outside \[0, {vocab}\) "
                                             rf"\(vocab_size {vocab} of the ALBERT config\)"):
            model({"input_ids": tf.constant(wrong), "input_mask": mask, "segment_ids": segments})
        with pytest.raises(InputError, match=rf"'input_ids' holds {bad} at"):  # NumPy int64, as given
            model({"input_ids": wrong.astype(np.int64), "input_mask": mask, "segment_ids": segments})
    with pytest.raises(InputError, match=r"'segment_ids' holds 2 at \[0, 3\], outside \[0, 2\) \(type_vocab_size 2"):
        model({"input_ids": ids, "input_mask": mask, "segment_ids": np.array([[0, 0, 1, 2], [0] * 4], np.int32)})
    with pytest.raises(InputError, match=rf"'input_ids' holds {vocab} at"):
        AlbertPretrainer(model)({"input_ids": np.where(ids == 7, vocab, ids), "input_mask": mask,
                                 "segment_ids": segments, "masked_lm_positions": np.zeros([2, 1], np.int32)})
    # The largest id and the second segment stay accepted.
    edge = np.where(ids == 7, vocab - 1, ids)
    out = model({"input_ids": edge, "input_mask": mask, "segment_ids": (np.arange(4) >= 2) * mask})
    assert np.isfinite(out["pooled_output"].numpy()).all()


def test_keras3_symbolic_input_is_refused_naming_tf_keras():
    """keras.Input from the user's Keras 3 used to fail inside tf.cast with Keras 3's advice to wrap
    the call in a layer; the model is a layer already, of the other Keras."""
    keras3 = pytest.importorskip("keras")
    if not keras3.__version__.startswith("3"):
        pytest.skip("needs Keras 3")
    inputs = {name: keras3.Input((4,), dtype="int32", name=name) for name in ("input_ids", "input_mask", "segment_ids")}
    with pytest.raises(InputError, match=r"'input_ids' is a Keras 3 KerasTensor.*from albert_tf.keras import keras"):
        _tiny_model()(inputs)
    # The tf_keras form it names builds a functional model.
    tf_keras_inputs = {name: keras.Input((4,), dtype="int32", name=name) for name in inputs}
    pooled = _tiny_model()(tf_keras_inputs)["pooled_output"]
    assert keras.Model(tf_keras_inputs, pooled)({k: tf.zeros([2, 4], tf.int32) for k in inputs}).shape == [2, 8]
