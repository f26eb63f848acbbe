"""--serving_precision: a bfloat16 export's graph computes its matmuls in bf16 (read from the saved
function definitions), loads and runs as TensorFlow Serving loads it (a TF1 session on the
MetaGraph, no options), and agrees with the float32 export; float32 stays the default whatever
the training's policy; SQuAD's TFLite file stays float32."""
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.glue import export, heads
from albert_tf.glue.processors import get_task_spec
from albert_tf.keras import keras
from albert_tf.modeling.serving_precision import model_for_serving

# Small, but deep and wide enough for bf16 rounding to pile up over the layers as in a real model.
SMALL = dict(vocab_size=30000, embedding_size=32, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
             intermediate_size=512, max_position_embeddings=128)
SEQ = 128  # the setting users serve at
MATMULS = ("MatMul", "BatchMatMulV2", "_MklMatMul", "_FusedMatMul")
# Largest |p_bf16 - p_float32| accepted; measured 0.0025 on this model and these sentences (bf16 keeps 8 significant bits).
PROBABILITY_TOLERANCE = 0.02


def _cola_dev_sentences(shared, n=64):
    lines = shared("data", "glue", "CoLA", "dev.tsv").read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[3] for line in lines[:n]]


def _classifier():
    keras.utils.set_random_seed(3)
    model = heads.build_classifier(AlbertConfig(**SMALL), "sst-2")
    # A head that separates the sentences (a random one leaves every probability near 0.5,
    # where any rounding flips labels): scale its weights up.
    model.classifier.output_weights.assign(model.classifier.output_weights * 50.0)
    return model


def _matmul_types(export_dir) -> dict[str, set[str]]:
    """{op type: the dtypes (T) it runs in} over every function of the SavedModel."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((export_dir / "saved_model.pb").read_bytes())
    found: dict[str, set[str]] = {}
    for function in saved.meta_graphs[0].graph_def.library.function:
        for node in function.node_def:
            if node.op in MATMULS:
                found.setdefault(node.op, set()).add(tf.dtypes.as_dtype(node.attr["T"].type).name)
    return found


@pytest.fixture(scope="module")
def exports(tmp_path_factory, shared):
    spm = str(shared("data", "spm", "30k-clean.model"))
    folder = tmp_path_factory.mktemp("serving_precision")
    model = _classifier()
    spec = get_task_spec("sst-2")
    paths = {precision: export.export_classifier(model, spec, str(folder / precision), SEQ, spm,
                                                 serving_precision=precision)
             for precision in ("float32", "bfloat16")}
    return paths, model


def test_bfloat16_export_runs_its_matmuls_in_bf16(exports):
    import pathlib

    paths, _ = exports
    bf16 = _matmul_types(pathlib.Path(paths["bfloat16"]))
    assert "bfloat16" in bf16.get("MatMul", set()), bf16  # the dense layers
    assert "bfloat16" in bf16.get("BatchMatMulV2", set()), bf16  # attention scores and context
    fp32 = _matmul_types(pathlib.Path(paths["float32"]))
    assert fp32 and all(types == {"float32"} for types in fp32.values()), fp32


def test_bfloat16_export_agrees_with_float32_as_tensorflow_serving_loads_it(exports, shared, tmp_path):
    """Each export loaded in a fresh process through a TF1 session with a default ConfigProto (how
    TensorFlow Serving's SavedModelBundle loads a model), its `serving_text` signature run on real
    sentences (CoLA dev, the length of SST-2's)."""
    paths, _ = exports
    sentences = _cola_dev_sentences(shared)
    np.save(tmp_path / "sentences.npy", np.array(sentences, dtype=object), allow_pickle=True)
    script = f"""
import sys, numpy as np, tensorflow as tf, tensorflow_text  # noqa: F401
tf.compat.v1.disable_eager_execution()
sentences = np.load({str(tmp_path / 'sentences.npy')!r}, allow_pickle=True).tolist()
for precision, path in (("float32", {paths['float32']!r}), ("bfloat16", {paths['bfloat16']!r})):
    with tf.compat.v1.Session(graph=tf.Graph(), config=tf.compat.v1.ConfigProto()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta.signature_def["serving_text"]
        fetch = {{k: v.name for k, v in signature.outputs.items()}}
        out = session.run(fetch, {{signature.inputs["text_a"].name: sentences}})
        assert out["probabilities"].dtype == np.float32, out["probabilities"].dtype
        np.save({str(tmp_path)!r} + f"/{{precision}}.npy", out["probabilities"])
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    fp32, bf16 = np.load(tmp_path / "float32.npy"), np.load(tmp_path / "bfloat16.npy")
    assert fp32.shape == bf16.shape == (len(sentences), 2)
    difference = np.abs(fp32 - bf16).max()
    print(f"largest probability difference {difference:.5f}; float32 margins > {2 * PROBABILITY_TOLERANCE}: "
          f"{(np.abs(fp32[:, 1] - fp32[:, 0]) > 2 * PROBABILITY_TOLERANCE).sum()} of {len(fp32)}")
    assert 0 < difference <= PROBABILITY_TOLERANCE, difference  # 0 would mean bf16 did not run
    # Labels equal wherever float32's margin exceeds what bf16 can move a probability by.
    sure = np.abs(fp32[:, 1] - fp32[:, 0]) > 2 * PROBABILITY_TOLERANCE
    assert sure.sum() >= len(sentences) // 2, fp32  # the head does separate the sentences
    np.testing.assert_array_equal(fp32[sure].argmax(-1), bf16[sure].argmax(-1))


def test_float32_export_computes_the_keras_model(exports, shared):
    import tensorflow_text  # noqa: F401  (the loaded signature's SentencePiece ops)

    from albert_tf.glue import features
    from albert_tf.glue.processors import InputExample
    from albert_tf.tokenization import FullTokenizer

    paths, model = exports
    sentences = _cola_dev_sentences(shared, 8)
    tokenizer = FullTokenizer(spm_model_file=str(shared("data", "spm", "30k-clean.model")), do_lower_case=True)
    spec = get_task_spec("sst-2")
    rows = [features.convert_example(InputExample(str(i), s), spec, SEQ, tokenizer) for i, s in enumerate(sentences)]
    width = max(sum(r.input_mask) for r in rows)
    inputs = {k: tf.constant([getattr(r, k)[:width] for r in rows], tf.int32)
              for k in ("input_ids", "input_mask", "segment_ids")}
    want = model(inputs, training=False)["probabilities"].numpy()
    got = tf.saved_model.load(paths["float32"]).signatures["serving_text"](text_a=tf.constant(sentences))
    np.testing.assert_allclose(got["probabilities"].numpy(), want, atol=1e-5)


def test_serving_copy_holds_the_same_weights():
    """A bf16 copy and a float32 copy of that copy: the last computes exactly what the model did,
    so every weight went across (in the same order)."""
    model = _classifier()
    inputs = model.dummy_inputs(batch_size=2, seq_length=12)
    want = model(inputs, training=False)["probabilities"].numpy()
    bf16 = model_for_serving(model, "bfloat16")
    assert bf16 is not model and bf16.compute_dtype == "bfloat16"
    assert all(w.dtype == tf.float32 for w in bf16.weights)
    back = model_for_serving(bf16, "float32")
    np.testing.assert_array_equal(back(inputs, training=False)["probabilities"].numpy(), want)
    assert model_for_serving(model, "float32") is model
    with pytest.raises(ValueError, match="--serving_precision='fp8'"):
        model_for_serving(model, "fp8")


def test_default_export_is_float32_after_bf16_training(tmp_path, shared):
    """A model built under --mixed_precision=bf16's policy exports float32 unless asked."""
    import pathlib

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = heads.build_classifier(AlbertConfig(**dict(SMALL, num_hidden_layers=1)), "sst-2")
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert model.compute_dtype == "bfloat16"
    path = export.export_classifier(model, get_task_spec("sst-2"), str(tmp_path), 32,
                                    str(shared("data", "spm", "30k-clean.model")))
    types = _matmul_types(pathlib.Path(path))
    assert types and all(t == {"float32"} for t in types.values()), types


def test_squad_bfloat16_saved_model_and_float32_tflite(tmp_path):
    """run_squad.py --export_dir --serving_precision=bfloat16: the SavedModel computes in bf16, the
    TFLite file (built-in ops, no bf16 matmul) stays float32; both near the Keras model's logits."""
    import pathlib

    from albert_tf.squad.export import export_span_model
    from albert_tf.squad.heads import SquadV1Model

    keras.utils.set_random_seed(5)
    model = SquadV1Model(AlbertConfig(**dict(SMALL, num_hidden_layers=2)))
    ids = np.random.default_rng(0).integers(5, 30000, size=(1, SEQ)).astype(np.int32)
    mask = (np.arange(SEQ) < 90).astype(np.int32)[None]
    segments = (np.arange(SEQ) >= 20).astype(np.int32)[None]
    feats = {"input_ids": ids * mask, "input_mask": mask, "segment_ids": segments * mask}
    model(feats)
    want = {k: v.numpy() for k, v in model(feats, training=False).items()}
    saved, tflite = export_span_model(model, str(tmp_path), SEQ, serving_precision="bfloat16")
    assert "bfloat16" in _matmul_types(pathlib.Path(saved)).get("MatMul", set())
    served = tf.saved_model.load(saved).signatures["serving_default"](**{k: tf.constant(v) for k, v in feats.items()})
    from ai_edge_litert.interpreter import Interpreter  # LiteRT: tf.lite.Interpreter is deprecated

    lite = Interpreter(model_path=tflite).get_signature_runner("serving_default")(**feats)
    for name in ("start_logits", "end_logits"):
        real = mask[0] == 1
        scale = np.abs(want[name][:, real]).max()
        bf16 = np.abs(served[name].numpy()[:, real] - want[name][:, real]).max()
        assert 0 < bf16 <= 0.03 * scale, (name, bf16, scale)
        np.testing.assert_allclose(lite[name][:, real], want[name][:, real], atol=1e-4)
