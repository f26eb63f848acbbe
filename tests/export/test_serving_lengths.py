"""Exported models take inputs of any length up to max_seq_length and compute each request at
its longest row: the outputs equal the padded-to-max form (in process; the reload of each
export in a fresh process is tested beside its driver)."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer
from albert_tf.data.records import MODEL_INPUTS
from albert_tf.export import HubModule
from albert_tf.glue import export, features, heads
from albert_tf.glue.processors import InputExample, get_task_spec
from albert_tf.squad.export import SpanServing
from albert_tf.squad.heads import SquadV1Model

CONFIG = dict(vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=64, max_position_embeddings=64)
SEQ = 48
TEXTS = ["The cat sat on the mat, quietly.", "Short.", "Version 3.0, released in 1,999 - on time, nothing to add!"]


@pytest.fixture(scope="module")
def spm(shared):
    return str(shared("data", "spm", "30k-clean.model"))


def _padded_ids(lengths, seq=SEQ, seed=0):
    rng = np.random.default_rng(seed)
    mask = (np.arange(seq)[None] < np.array(lengths)[:, None]).astype(np.int32)
    return {"input_ids": rng.integers(5, 30000, mask.shape).astype(np.int32) * mask, "input_mask": mask,
            "segment_ids": (np.arange(seq)[None] >= 3).astype(np.int32) * mask}


def _trim(inputs, length):
    return {k: tf.constant(v[:, :length]) for k, v in inputs.items()}


def test_classifier_text_and_examples_at_the_longest_row(spm):
    from albert_tf.tokenization import FullTokenizer, TFTokenizer

    spec = get_task_spec("sst-2")
    model = heads.build_classifier(AlbertConfig(**CONFIG), "sst-2")
    serving = export.ClassifierServing(model, TFTokenizer(spm), spec, SEQ)
    tokenizer = FullTokenizer(spm_model_file=spm, do_lower_case=True)
    feats = [features.convert_example(InputExample(str(i), t), spec, SEQ, tokenizer) for i, t in enumerate(TEXTS)]
    padded = {k: tf.constant([getattr(f, k) for f in feats], tf.int32) for k in MODEL_INPUTS}
    want = model(padded, training=False)["probabilities"].numpy()
    got = serving.serve_text(tf.constant(TEXTS))["probabilities"].numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)
    # serving_default: the original's fixed-length records, and records cut to their own length.
    full = [features.to_tf_example(f, False).SerializeToString() for f in feats]
    np.testing.assert_allclose(serving.serve_examples(tf.constant(full))["probabilities"].numpy(), want, atol=1e-5)
    short = []
    for f in feats:
        length = sum(f.input_mask)
        example = tf.train.Example()
        for name in MODEL_INPUTS:
            example.features.feature[name].int64_list.value.extend(getattr(f, name)[:length])
        short.append(example.SerializeToString())
    np.testing.assert_allclose(serving.serve_examples(tf.constant(short))["probabilities"].numpy(), want, atol=1e-5)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_seq_length \\(48\\)"):
        serving._outputs({k: tf.zeros([1, SEQ + 1], tf.int32) for k in MODEL_INPUTS})


def test_text_packing_width_is_the_longest_row(spm):
    from albert_tf.tokenization import TFTokenizer
    from albert_tf.tokenization.packing import pack_token_ids

    tokenizer = TFTokenizer(spm)
    pieces = tokenizer.tokenize(tf.constant(TEXTS))
    longest = int(tf.reduce_max(pieces.row_lengths())) + 2
    packed = pack_token_ids(pieces, None, SEQ, tokenizer.cls_id, tokenizer.sep_id, pad_to_longest=True)
    full = pack_token_ids(pieces, None, SEQ, tokenizer.cls_id, tokenizer.sep_id)
    assert longest < SEQ and packed["input_ids"].shape[1] == longest
    for name in packed:
        np.testing.assert_array_equal(packed[name].numpy(), full[name].numpy()[:, :longest])
    capped = pack_token_ids(pieces, None, 6, tokenizer.cls_id, tokenizer.sep_id, pad_to_longest=True)
    assert capped["input_ids"].shape[1] == 6  # truncation still at max_seq_length


def test_squad_signature_any_length():
    model = SquadV1Model(AlbertConfig(**CONFIG))
    model(model.dummy_inputs())
    serving = SpanServing(model, SEQ)
    function = serving.signature()
    padded = _padded_ids([30, 17])
    want = function(**{k: tf.constant(v) for k, v in padded.items()})
    got = function(**_trim(padded, 30))
    for name in ("start_logits", "end_logits"):
        assert want[name].shape == (2, SEQ) and got[name].shape == (2, 30)
        real = padded["input_mask"][:, :30] == 1
        np.testing.assert_allclose(got[name].numpy()[real], want[name].numpy()[:, :30][real], atol=1e-5, rtol=0)
    assert [s.shape for s in serving.signature(fixed=True).structured_input_signature[0]] == [(1, SEQ)] * 3
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_seq_length \\(48\\)"):
        function(**{k: tf.zeros([1, SEQ + 2], tf.int32) for k in padded})


def test_hub_signatures_any_length_and_text_at_the_longest_row(spm):
    from albert_tf.tokenization import TFTokenizer

    model = AlbertPretrainer(AlbertConfig(**CONFIG))
    model(model.dummy_inputs())
    module = HubModule(model, TFTokenizer(spm), spm, True, SEQ)
    padded = _padded_ids([21, 9, 14])
    want = module.tokens(**{k: tf.constant(v) for k, v in padded.items()})
    got = module.tokens(**_trim(padded, 21))
    np.testing.assert_allclose(got["pooled_output"].numpy(), want["pooled_output"].numpy(), atol=1e-5, rtol=0)
    real = padded["input_mask"][:, :21] == 1
    np.testing.assert_allclose(got["sequence_output"].numpy()[real], want["sequence_output"].numpy()[:, :21][real],
                               atol=1e-5, rtol=0)
    sop = module.sop(**_trim(padded, 21))["sop_log_probs"].numpy()
    np.testing.assert_allclose(sop, module.sop(**{k: tf.constant(v) for k, v in padded.items()})["sop_log_probs"],
                               atol=1e-5, rtol=0)
    text = module.serve_text(tf.constant(TEXTS))
    width = text["input_ids"].shape[1]
    assert width == int(tf.reduce_max(tf.reduce_sum(text["input_mask"], 1))) < SEQ
    ids = {"input_ids": text["input_ids"], "input_mask": text["input_mask"],
           "segment_ids": tf.zeros_like(text["input_ids"])}
    full = module.tokens(**{k: tf.pad(v, [[0, 0], [0, SEQ - width]]) for k, v in ids.items()})
    np.testing.assert_allclose(text["pooled_output"].numpy(), full["pooled_output"].numpy(), atol=1e-5, rtol=0)
    # The id signatures take up to max_position_embeddings (64), as the original module's.
    module.tokens(**{k: tf.zeros([1, SEQ + 1], tf.int32) for k in padded})
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings \\(64\\)"):
        module.tokens(**{k: tf.zeros([1, CONFIG["max_position_embeddings"] + 1], tf.int32) for k in padded})
