"""SavedModel export pieces: in-graph packing = Python features, the single-sentence signature,
the threshold rule. (Export → reload in another process: test_run_classifier.py.)"""
import os
import random
import re

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.data.records import MODEL_INPUTS
from albert_tf.glue import export, features, heads
from albert_tf.glue.processors import InputExample, get_task_spec
from albert_tf.tokenization.packing import pack_token_ids

TINY = dict(vocab_size=30000, embedding_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
            intermediate_size=32, max_position_embeddings=64)


def _ragged(rows):
    return tf.RaggedTensor.from_row_lengths(tf.constant(sum(rows, []), tf.int32), [len(r) for r in rows])


@pytest.mark.parametrize("max_seq_length", range(3, 13))
def test_pack_token_ids_matches_python_truncation(max_seq_length):
    """At every length: at 3 and 4 a pair's B can be cut to nothing, and the row is then packed as a
    single sentence (no second [SEP]), as convert_example and the original's features do."""
    rng = random.Random(0)
    rows_a = [[rng.randint(5, 50) for _ in range(rng.randint(0, 12))] for _ in range(200)]
    rows_b = [[rng.randint(5, 50) for _ in range(rng.randint(0, 12))] for _ in range(200)]
    packed = pack_token_ids(_ragged(rows_a), _ragged(rows_b), max_seq_length, cls_id=2, sep_id=3)
    single = pack_token_ids(_ragged(rows_a), None, max_seq_length, cls_id=2, sep_id=3)

    class Ids:  # a "tokenizer" whose texts are already ids
        def tokenize(self, text):
            return list(text)

        def convert_tokens_to_ids(self, tokens):
            return [{"[CLS]": 2, "[SEP]": 3}.get(t, t) for t in tokens]

    spec = get_task_spec("rte")
    for i, (a, b) in enumerate(zip(rows_a, rows_b)):
        want = features.convert_example(InputExample("x", a, b), spec, max_seq_length, Ids())
        assert packed["input_ids"][i].numpy().tolist() == want.input_ids
        assert packed["segment_ids"][i].numpy().tolist() == want.segment_ids
        assert packed["input_mask"][i].numpy().tolist() == want.input_mask
        want = features.convert_example(InputExample("x", a, None), spec, max_seq_length, Ids())
        assert single["input_ids"][i].numpy().tolist() == want.input_ids


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
    inputs = {k: tf.constant([getattr(f, k) for f in feats], tf.int32) for k in MODEL_INPUTS}
    serialized = [features.to_tf_example(f, spec.is_regression).SerializeToString() for f in feats]
    return model(inputs, training=False)["probabilities"].numpy(), serialized


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


@pytest.mark.parametrize("positive", [None, "0"])
def test_threshold_is_on_the_positive_class(shared, positive):
    """With --positive_label, the thresholded decision is that class where its probability reaches the
    threshold; `predictions` stays the argmax, as the original's."""
    import dataclasses

    from albert_tf.tokenization import TFTokenizer

    from albert_tf.keras import keras

    keras.utils.set_random_seed(1)  # the weights whatever ran before in this process (pytest -n 2 reorders)
    spec = dataclasses.replace(get_task_spec("mrpc"), positive_label=positive)
    model = heads.build_classifier(AlbertConfig(**TINY), "mrpc")
    _keras_outputs(model, spec, _tokenizer(shared), EXAMPLES)  # builds it
    for weight in model.classifier.trainable_variables:  # an untrained head gives every example ~0.5
        weight.assign(weight * 1000.0)
    probabilities, _ = _keras_outputs(model, spec, _tokenizer(shared), EXAMPLES)
    positive_id = 1 if positive is None else 0
    ordered = np.sort(probabilities[:, positive_id])
    gap = int(np.argmax(np.diff(ordered)))
    threshold = float(ordered[gap:gap + 2].mean())  # in the widest gap: examples on both sides
    assert ordered[gap + 1] - ordered[gap] > 1e-5, ordered  # clear of the served outputs' rounding
    serving = export.ClassifierServing(model, TFTokenizer(str(shared("data", "spm", "30k-clean.model"))), spec, SEQ,
                                       threshold=threshold)
    got = serving.serve_text(tf.constant([e.text_a for e in EXAMPLES]), tf.constant([e.text_b for e in EXAMPLES]))
    np.testing.assert_allclose(got["probabilities"].numpy(), probabilities, atol=1e-6)
    want = np.where(probabilities[:, positive_id] >= threshold, positive_id, 1 - positive_id)
    assert got["thresholded_predictions"].numpy().tolist() == want.tolist()
    assert got["thresholded_labels"].numpy().tolist() == [spec.labels[i].encode() for i in want]
    assert sorted(set(want.tolist())) == [0, 1]  # both decisions occur
    # The original's outputs keep their meaning: the most probable class.
    assert got["predictions"].numpy().tolist() == np.argmax(probabilities, axis=-1).tolist()


def test_an_export_without_the_text_signature_loads_in_plain_tensorflow(tmp_path, shared, saved_model_ops,
                                                                        tensorflow_text_ops):
    """text_signature=False (run_classifier's --notext_signature): serving_default on tf.Examples alone and
    no tensorflow-text op in the graph, so a process that never imports tensorflow_text (nor albert_tf),
    as stock TF Serving, loads it. Every export held the SentencePiece ops of serving_text: loading one
    failed without tensorflow_text, even for serving_default. It needs no SentencePiece model."""
    import json
    import subprocess
    import sys

    spec = get_task_spec("mrpc")
    model = heads.build_classifier(AlbertConfig(**TINY), "mrpc")
    want, serialized = _keras_outputs(model, spec, _tokenizer(shared), EXAMPLES)
    path = export.export_classifier(model, spec, str(tmp_path / "glue"), SEQ, None, text_signature=False)
    assert saved_model_ops(path) & tensorflow_text_ops == set()
    np.savez(tmp_path / "io.npz", serialized=np.array(serialized, dtype=object), want=want)
    script = f"""
import json, sys, numpy as np, tensorflow as tf
io = np.load({str(tmp_path / 'io.npz')!r}, allow_pickle=True)
obj = tf.saved_model.load({path!r})
got = obj.signatures["serving_default"](examples=tf.constant(list(io["serialized"])))["probabilities"].numpy()
print(json.dumps({{"signatures": sorted(obj.signatures), "diff": float(np.abs(got - io["want"]).max()),
                  "modules": sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow_text", "albert_tf"))}}))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"signatures": ["serving_default"], "diff": result["diff"], "modules": []}
    assert result["diff"] <= 1e-5, result


def test_export_to_remote_storage_writes_one_version_folder(shared):
    """gs:// export folders (TensorFlow's ram:// filesystem stands in for a bucket): written in place,
    loadable, and a second export is a new version beside the first."""
    import uuid

    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    config = AlbertConfig(vocab_size=30000, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    model = heads.build_classifier(config, "mrpc")
    spm = str(shared("data", "spm", "30k-clean.model"))
    base = f"ram://exports-{uuid.uuid4().hex}/mrpc"
    first = export.export_classifier(model, get_task_spec("mrpc"), base, 16, spm)
    second = export.export_classifier(model, get_task_spec("mrpc"), base, 16, spm)
    assert sorted(tf.io.gfile.listdir(base)) == sorted(p.rsplit("/", 1)[1] for p in (first, second))
    served = tf.saved_model.load(second).signatures["serving_text"](text_a=tf.constant(["a b"]),
                                                                    text_b=tf.constant(["c"]))
    assert served["probabilities"].shape == (1, 2)


def test_an_empty_request_gets_empty_outputs(tmp_path, shared):
    """Zero rows (a client flushing an empty batch) failed with 'slice index 0 of dimension 1 out of
    bounds' in every raw-text and tf.Example signature: padding to the longest row gave width 0."""
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    from albert_tf import AlbertPretrainer
    from albert_tf import export as hub_export

    config = AlbertConfig(**TINY)
    spm = str(shared("data", "spm", "30k-clean.model"))
    model = heads.build_classifier(config, "mrpc")
    served = tf.saved_model.load(export.export_classifier(model, get_task_spec("mrpc"), str(tmp_path / "glue"),
                                                          SEQ, spm))
    none = tf.constant([], tf.string)
    for outputs in (served.signatures["serving_text"](text_a=none, text_b=none),
                    served.signatures["serving_default"](examples=none)):
        assert outputs["probabilities"].shape == (0, 2)
    pretrainer = AlbertPretrainer(config)
    pretrainer(pretrainer.dummy_inputs())
    hub_export.export_hub_module(pretrainer, str(tmp_path / "hub"), spm_model_file=spm, max_seq_length=SEQ)
    outputs = tf.saved_model.load(str(tmp_path / "hub")).signatures["serving_default"](text=none)
    assert outputs["pooled_output"].shape == (0, config.hidden_size)


def test_a_full_disk_during_the_save_is_one_line_naming_the_version_and_keeps_the_earlier_one(tmp_path, monkeypatch,
                                                                                                  saved_model_disk_fills):
    """run_classifier.py --export_dir on a full disk gave TensorFlow's error naming the temporary version folder
    and its op ('{{function_node __wrapped__SaveV2...}} <export_dir>/.tmp-<time>-<pid>-<host>/variables/...; No
    space left on device [Op:SaveV2]', as a tmpfs showed): now one line naming the version; the earlier version is
    as it was and nothing is left beside it."""
    import re

    from albert_tf.training import faults

    spec = get_task_spec("mrpc")
    model = heads.build_classifier(AlbertConfig(**TINY), "mrpc")
    base = tmp_path / "glue"
    earlier = export.export_classifier(model, spec, str(base), SEQ, None, text_signature=False)
    files = {p: p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}
    saved_model_disk_fills()
    with pytest.raises(faults.DiskFullError) as err:
        export.export_classifier(model, spec, str(base), SEQ, None, text_signature=False)
    monkeypatch.undo()
    assert re.fullmatch(f"no space left on the device writing the export {re.escape(str(base))}/(\\d+); what was "
                        f"written of it is removed; free space and rerun", str(err.value)), str(err.value)
    assert {p: p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()} == files
    assert os.listdir(base) == [os.path.basename(earlier)]


def test_ids_outside_the_embedding_tables_are_named(tmp_path):
    """Examples holding another tokenizer's ids (>= vocab_size) or a segment id past type_vocab_size: the
    export's serving_default names the input, the id and the size (it failed in the embedding's gather;
    on a GPU the gather gives zeros, a wrong answer without an error)."""
    spec = get_task_spec("mrpc")
    model = heads.build_classifier(AlbertConfig(**TINY), "mrpc")
    path = export.export_classifier(model, spec, str(tmp_path / "glue"), SEQ, None, text_signature=False)
    serve = tf.saved_model.load(path).signatures["serving_default"]

    def example(input_ids, segment_ids):
        pad = SEQ - len(input_ids)
        feats = features.InputFeatures(input_ids=input_ids + [0] * pad, input_mask=[1] * len(input_ids) + [0] * pad,
                                       segment_ids=segment_ids + [0] * pad, label_id=0, is_real_example=True)
        return features.to_tf_example(feats, False).SerializeToString()

    assert serve(examples=tf.constant([example([2, 29999, 3], [0, 0, 0])]))["probabilities"].shape == (1, 2)
    for ids, segments, words in (([2, 30000, 3], [0, 0, 0], "input_ids holds an id outside [0, 30000) (vocab_size "
                                                            "30000 of the ALBERT config)"),
                                 ([2, 40, 3], [0, 2, 0], "segment_ids holds an id outside [0, 2) (type_vocab_size 2 "
                                                         "of the ALBERT config)")):
        with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(words)):
            serve(examples=tf.constant([example(ids, segments)]))
