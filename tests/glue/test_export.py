"""SavedModel export: in-graph packing = Python features; reloaded in a fresh process = Keras outputs."""
import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.glue import export, features, heads
from albert_tf.glue.processors import InputExample, get_task_spec

TINY = dict(vocab_size=30000, embedding_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=64)


def _ragged(rows):
    return tf.RaggedTensor.from_row_lengths(tf.constant(sum(rows, []), tf.int32), [len(r) for r in rows])


def test_pack_token_ids_matches_python_truncation():
    rng = random.Random(0)
    rows_a = [[rng.randint(5, 50) for _ in range(rng.randint(0, 12))] for _ in range(200)]
    rows_b = [[rng.randint(5, 50) for _ in range(rng.randint(0, 12))] for _ in range(200)]
    packed = export.pack_token_ids(_ragged(rows_a), _ragged(rows_b), 9, cls_id=2, sep_id=3)
    single = export.pack_token_ids(_ragged(rows_a), None, 9, cls_id=2, sep_id=3)

    class Ids:  # a "tokenizer" whose texts are already ids
        def tokenize(self, text):
            return list(text)

        def convert_tokens_to_ids(self, tokens):
            return [{"[CLS]": 2, "[SEP]": 3}.get(t, t) for t in tokens]

    spec = get_task_spec("rte")
    for i, (a, b) in enumerate(zip(rows_a, rows_b)):
        want = features.convert_example(InputExample("x", a, b), spec, 9, Ids())
        assert packed["input_ids"][i].numpy().tolist() == want.input_ids
        assert packed["segment_ids"][i].numpy().tolist() == want.segment_ids
        assert packed["input_mask"][i].numpy().tolist() == want.input_mask
        want = features.convert_example(InputExample("x", a, None), spec, 9, Ids())
        assert single["input_ids"][i].numpy().tolist() == want.input_ids


RELOAD = r"""
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # registers the SentencePiece ops
for job in json.loads(sys.argv[1]):
    loaded = tf.saved_model.load(job["path"])
    examples = tf.constant([bytes.fromhex(h) for h in job["examples"]])
    ex = loaded.signatures["serving_default"](examples=examples)
    text = loaded.signatures["serving_text"](**{k: tf.constant(v) for k, v in job["texts"].items()})
    arrays = {"ex_" + k: v.numpy() for k, v in ex.items()}
    arrays.update({"text_" + k: v.numpy() for k, v in text.items()})
    np.savez(job["out"], **{k: v.astype(str) if v.dtype == object else v for k, v in arrays.items()})
"""

EXAMPLES = [
    InputExample("0", "The cat sat on the mat, quietly.", "A cat was sitting on a mat."),
    InputExample("1", "Version 3.0, released in 1,999 \u2013 on time!",
                 "Nothing at all to say here, really nothing at all, it is a long second sentence indeed."),
    InputExample("2", "Short.", ""),
]
SEQ = 16


def _tokenizer(shared):
    from albert_tf.tokenization import FullTokenizer

    return FullTokenizer(spm_model_file=str(shared("data", "spm", "30k-clean.model")), do_lower_case=True)


def _keras_outputs(model, spec, tok, examples):
    feats = [features.convert_example(e, spec, SEQ, tok) for e in examples]
    inputs = {k: tf.constant([getattr(f, k) for f in feats], tf.int32) for k in features.MODEL_INPUTS}
    serialized = [features.to_tf_example(f, spec.is_regression).SerializeToString() for f in feats]
    return model(inputs, training=False)["probabilities"].numpy(), serialized


def test_export_reload_in_fresh_process(shared, tmp_path):
    """MRPC (sentence pair, with a threshold) and STS-B (regression), reloaded in one new process."""
    spm = str(shared("data", "spm", "30k-clean.model"))
    tok = _tokenizer(shared)
    jobs, expected = [], {}
    for task, threshold in (("mrpc", 0.25), ("sts-b", None)):
        spec = get_task_spec(task)
        model = heads.build_classifier(AlbertConfig(**TINY), task)
        expected[task], serialized = _keras_outputs(model, spec, tok, EXAMPLES)
        export_dir = tmp_path / task
        path = export.export_classifier(model, spec, str(export_dir), SEQ, spm, True, threshold=threshold)
        assert os.path.dirname(path) == str(export_dir) and os.path.basename(path).isdigit()
        assert os.listdir(export_dir) == [os.path.basename(path)]  # no temporary left behind
        texts = {"text_a": [e.text_a for e in EXAMPLES], "text_b": [e.text_b for e in EXAMPLES]}
        jobs.append({"path": path, "examples": [e.hex() for e in serialized], "texts": texts,
                     "out": str(tmp_path / f"{task}.npz")})
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run([sys.executable, "-c", RELOAD, json.dumps(jobs)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]

    mrpc = dict(np.load(tmp_path / "mrpc.npz"))
    np.testing.assert_allclose(mrpc["ex_probabilities"], expected["mrpc"], atol=1e-5)
    np.testing.assert_allclose(mrpc["text_probabilities"], expected["mrpc"], atol=1e-5)  # in-graph = Python
    np.testing.assert_array_equal(mrpc["ex_predictions"], (expected["mrpc"][:, 1] >= 0.25).astype(np.int32))
    assert mrpc["ex_threshold"] == pytest.approx(0.25)
    assert mrpc["text_labels"].tolist() == [["0", "1"][i] for i in mrpc["text_predictions"]]
    stsb = dict(np.load(tmp_path / "sts-b.npz"))
    assert stsb["ex_score"].shape == (3,)
    np.testing.assert_allclose(stsb["ex_score"], expected["sts-b"], atol=1e-5)
    np.testing.assert_allclose(stsb["text_score"], expected["sts-b"], atol=1e-5)


def test_single_sentence_text_signature(shared):
    tok = _tokenizer(shared)
    spec = get_task_spec("cola")
    model = heads.build_classifier(AlbertConfig(**TINY), "cola")
    from albert_tf.tokenization import TFTokenizer

    serving = export.ClassifierServing(model, TFTokenizer(str(shared("data", "spm", "30k-clean.model"))), spec, SEQ)
    assert not serving.pair
    singles = [InputExample(e.guid, e.text_a + " " + e.text_b) for e in EXAMPLES]
    want, _ = _keras_outputs(model, spec, tok, singles)
    got = serving.serve_text(tf.constant([e.text_a for e in singles]))
    np.testing.assert_allclose(got["probabilities"].numpy(), want, atol=1e-6)


def test_threshold_only_for_binary_tasks():
    model = heads.GlueClassifier(AlbertConfig(**TINY), 3)
    with pytest.raises(ValueError, match="binary tasks only.*mnli has 3 labels"):
        export.ClassifierServing(model, None, get_task_spec("mnli"), 16, threshold=0.5)
