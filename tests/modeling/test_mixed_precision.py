"""Under mixed_bfloat16 the dense layers compute in bfloat16, but what the original keeps
exact stays float32 inside the model, not only at its outputs: the embedding sum and the
residual stream (the tensors entering the embedding and encoder LayerNorms), the
LayerNorm arithmetic, the attention softmax and the pretraining logits."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.keras import keras
from albert_tf.modeling import layers, recompute


@pytest.fixture
def recorded(monkeypatch):
    """Dtypes seen by every LayerNorm (argument as passed, and inside `call`) and softmax."""
    seen = {"layer_norm_argument": [], "layer_norm_computes": [], "softmax": []}
    layer_call, layer_norm_call, softmax = keras.layers.Layer.__call__, layers.LayerNorm.call, tf.nn.softmax

    def norm_dunder_call(self, x, *args, **kwargs):  # before Keras casts the input
        seen["layer_norm_argument"].append((self.name, x.dtype))
        return layer_call(self, x, *args, **kwargs)

    def norm_call(self, x, branch=None, **kwargs):  # what the arithmetic runs on: x (+ branch, added in float32)
        out = layer_norm_call(self, x, branch, **kwargs)
        seen["layer_norm_computes"].append((self.name, x.dtype, out.dtype))
        return out

    def recording_softmax(logits, *args, **kwargs):
        out = softmax(logits, *args, **kwargs)
        seen["softmax"].append((logits.dtype, out.dtype))
        return out

    monkeypatch.setattr(layers.LayerNorm, "__call__", norm_dunder_call)
    monkeypatch.setattr(layers.LayerNorm, "call", norm_call)
    monkeypatch.setattr(tf.nn, "softmax", recording_softmax)
    return seen


@pytest.mark.parametrize("training", [False, True])
def test_float32_inside_the_model_under_mixed_bfloat16(recorded, training):
    config = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=12, num_hidden_layers=2,
                          num_hidden_groups=1, inner_group_num=2, num_attention_heads=3,
                          intermediate_size=20, max_position_embeddings=16)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = AlbertPretrainer(config)
        for values in recorded.values():  # keep only the call below, not the build
            values.clear()
        ids = tf.constant(np.arange(18).reshape(2, 9) % 40, tf.int32)
        out = model({"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids),
                     "masked_lm_positions": tf.constant([[0, 3], [1, 2]], tf.int32)}, training=training)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    block = model.encoder.groups[0][0]
    # The policy is really in force: the dense layers compute in bfloat16.
    assert block.attention.query.compute_dtype == "bfloat16"
    assert block.intermediate.compute_dtype == "bfloat16"

    # 1 embedding LayerNorm, 2 per block call (2 layers x 2 inner blocks), 1 in the MLM head.
    computes = recorded["layer_norm_computes"]
    assert len(computes) == 1 + 2 * 4 + 1
    assert all(x == tf.float32 and y == tf.float32 for _, x, y in computes), computes
    arguments = recorded["layer_norm_argument"]
    assert len(arguments) == len(computes)
    # The embedding sum and each residual sum (x + attention, attention + ffn) arrive in float32.
    residual = [dtype for name, dtype in arguments[:-1]]
    assert [name for name, _ in arguments[:-1]] == ["LayerNorm"] + ["LayerNorm", "LayerNorm_1"] * 4
    assert residual == [tf.float32] * 9, arguments
    if training:  # the attention softmax runs compiled (recompute.attention_context), traced once per shape
        assert all(dtypes == (tf.float32, tf.float32) for dtypes in recorded["softmax"]), recorded["softmax"]
        compiled_functions = (recompute._attention_probs, recompute._attention_probs_grad)
        softmax_types = [node.attr["T"].type for compiled in compiled_functions
                         for function in compiled._list_all_concrete_functions()
                         for node in function.graph.as_graph_def().node if node.op == "Softmax"]
        assert softmax_types and set(softmax_types) == {tf.float32.as_datatype_enum}, softmax_types
    else:
        assert recorded["softmax"] == [(tf.float32, tf.float32)] * 4

    for key in ("embedding_output", "sequence_output", "pooled_output", "mlm_logits", "sop_logits"):
        assert out[key].dtype == tf.float32, key
    assert [x.dtype for x in out["encoder_outputs"]] == [tf.float32] * 4
