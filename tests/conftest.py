"""Shared test helpers: where ../shared lives, and a clear failure if it is missing."""
import os
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_ROOT = pathlib.Path(os.environ.get("ALBERT_TF_SHARED", REPO_ROOT.parent / "shared"))


def shared_file(*parts: str) -> pathlib.Path:
    """Path of a file under ../shared; fails the test (not skips) if it is absent."""
    path = SHARED_ROOT.joinpath(*parts)
    if not path.exists():
        pytest.fail(
            f"test data not found: expected {path} (the ../shared folder beside the "
            f"repository, or set ALBERT_TF_SHARED to its location)",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def shared():
    return shared_file


# Runs a driver's main on several argument lists in one process (one TensorFlow start-up).
_DRIVER_CASES = r"""
import contextlib, importlib, io, json, logging, sys
from absl import flags
driver = importlib.import_module(sys.argv[1])
warnings = []
class Collect(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger().addHandler(Collect(logging.WARNING))
results = []
for argv in json.loads(sys.argv[2]):
    flags.FLAGS.unparse_flags()
    flags.FLAGS([sys.argv[1] + ".py", *argv])
    err = io.StringIO()
    del warnings[:]
    with contextlib.redirect_stderr(err):
        code = driver.main([])
    results.append({"code": code, "stderr": err.getvalue(), "warnings": list(warnings)})
print(json.dumps(results))
"""


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt, as in a user's Python; pytest-xdist's workers ignore SIGINT, so a test
    that sends one to itself there saw nothing."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def driver_cases():
    """``run(driver, cases)``: {case name: {"code": exit code, "stderr": what main wrote, "warnings": the
    messages logged at WARNING or above}} for {name: argv}, ``driver`` a module such as "run_squad"."""
    import json
    import subprocess
    import sys

    def run(driver: str, cases: dict) -> dict:
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO_ROOT))
        proc = subprocess.run([sys.executable, "-c", _DRIVER_CASES, driver, json.dumps(list(cases.values()))],
                              capture_output=True, text=True, env=env, timeout=300, cwd=REPO_ROOT)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return dict(zip(cases, json.loads(proc.stdout.strip().splitlines()[-1])))

    return run


# ---- what a SavedModel needs besides plain TensorFlow ----
@pytest.fixture(scope="session")
def saved_model_ops():
    """``ops(path)``: every op type in a SavedModel's ``saved_model.pb``, its graphs' nodes and their
    function libraries'."""
    from tensorflow.core.protobuf import saved_model_pb2

    def ops(path) -> set:
        saved = saved_model_pb2.SavedModel()
        saved.ParseFromString(pathlib.Path(path, "saved_model.pb").read_bytes())
        return {node.op for graph in saved.meta_graphs for node in
                [*graph.graph_def.node, *(n for f in graph.graph_def.library.function for n in f.node_def)]}

    return ops


_TEXT_OPS = r"""
import json
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session as c_api

def registered():
    buf = c_api.TF_GetAllOpList()
    try:
        return {op.name for op in op_def_pb2.OpList.FromString(c_api.TF_GetBuffer(buf)).op}
    finally:
        c_api.TF_DeleteBuffer(buf)

plain = registered()
import tensorflow_text  # noqa: F401
print(json.dumps(sorted(registered() - plain)))
"""


@pytest.fixture(scope="session")
def tensorflow_text_ops() -> set:
    """The op types tensorflow-text registers (TensorFlow's registry after importing it, less before)."""
    import json
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _TEXT_OPS], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    ops = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    assert "SentencepieceOp" in ops, sorted(ops)[:20]
    return ops


# ---- ALBERT model fixtures (modeling and checkpoint tests) ----
@pytest.fixture
def reference(shared):
    """The reference tiny checkpoint and its recorded inputs/outputs."""
    import numpy as np

    folder = shared("reference", "albert_tiny_shared")
    return folder, dict(np.load(folder / "io.npz"))


def _numpy_forward(weights, config, input_ids, input_mask, segment_ids, positions):
    """ALBERT written from ALBERT_SPEC §3 in NumPy, reading TF1-named weights."""
    import math

    import numpy as np

    def layer_norm(x, p):
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + 1e-12) * weights[p + "/gamma"] + weights[p + "/beta"]

    def dense(x, p, act=None):
        y = x @ weights[p + "/kernel"] + weights[p + "/bias"]
        return act(y) if act else y

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))

    seq = input_ids.shape[1]
    x = (weights["bert/embeddings/word_embeddings"][input_ids]
         + weights["bert/embeddings/token_type_embeddings"][segment_ids]
         + weights["bert/embeddings/position_embeddings"][:seq][None])
    x = layer_norm(x, "bert/embeddings/LayerNorm")
    if config.embedding_size != config.hidden_size:
        x = dense(x, "bert/encoder/embedding_hidden_mapping_in")
    embedding_output = x
    heads, size = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    adder = (1.0 - input_mask[:, None, None, :]) * -10000.0
    outputs = []
    for layer in range(config.num_hidden_layers):
        g = int(layer / config.num_hidden_layers * config.num_hidden_groups)
        for i in range(config.inner_group_num):
            p = f"bert/encoder/transformer/group_{g}/inner_group_{i}"
            split = lambda t: t.reshape(t.shape[0], seq, heads, size).transpose(0, 2, 1, 3)
            q = split(dense(x, p + "/attention_1/self/query"))
            k = split(dense(x, p + "/attention_1/self/key"))
            v = split(dense(x, p + "/attention_1/self/value"))
            scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + adder
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            probs = scores / scores.sum(-1, keepdims=True)
            ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
            att = layer_norm(x + dense(ctx, p + "/attention_1/output/dense"), p + "/LayerNorm")
            ffn = dense(dense(att, p + "/ffn_1/intermediate/dense", gelu), p + "/ffn_1/intermediate/output/dense")
            x = layer_norm(ffn + att, p + "/LayerNorm_1")
            outputs.append(x)
    pooled = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
    h = np.take_along_axis(x, positions[:, :, None], axis=1)
    h = layer_norm(dense(h, "cls/predictions/transform/dense", gelu), "cls/predictions/transform/LayerNorm")
    mlm = h @ weights["bert/embeddings/word_embeddings"].T + weights["cls/predictions/output_bias"]
    sop = pooled @ weights["cls/seq_relationship/output_weights"].T + weights["cls/seq_relationship/output_bias"]
    return {"sequence_output": x, "pooled_output": pooled, "embedding_output": embedding_output,
            "encoder_outputs": outputs, "mlm_logits": mlm, "sop_logits": sop}


def _tf1_shapes(config):
    c = config
    shapes = {
        "bert/embeddings/word_embeddings": [c.vocab_size, c.embedding_size],
        "bert/embeddings/token_type_embeddings": [c.type_vocab_size, c.embedding_size],
        "bert/embeddings/position_embeddings": [c.max_position_embeddings, c.embedding_size],
        "bert/embeddings/LayerNorm/gamma": [c.embedding_size], "bert/embeddings/LayerNorm/beta": [c.embedding_size],
        "bert/pooler/dense/kernel": [c.hidden_size, c.hidden_size], "bert/pooler/dense/bias": [c.hidden_size],
        "cls/predictions/transform/dense/kernel": [c.hidden_size, c.embedding_size],
        "cls/predictions/transform/dense/bias": [c.embedding_size],
        "cls/predictions/transform/LayerNorm/gamma": [c.embedding_size],
        "cls/predictions/transform/LayerNorm/beta": [c.embedding_size],
        "cls/predictions/output_bias": [c.vocab_size],
        "cls/seq_relationship/output_weights": [2, c.hidden_size], "cls/seq_relationship/output_bias": [2],
    }
    if c.embedding_size != c.hidden_size:
        shapes["bert/encoder/embedding_hidden_mapping_in/kernel"] = [c.embedding_size, c.hidden_size]
        shapes["bert/encoder/embedding_hidden_mapping_in/bias"] = [c.hidden_size]
    H, I = c.hidden_size, c.intermediate_size
    for g in range(c.num_hidden_groups):
        for i in range(c.inner_group_num):
            p = f"bert/encoder/transformer/group_{g}/inner_group_{i}"
            for part in ("query", "key", "value"):
                shapes[f"{p}/attention_1/self/{part}/kernel"] = [H, H]
                shapes[f"{p}/attention_1/self/{part}/bias"] = [H]
            shapes[f"{p}/attention_1/output/dense/kernel"] = [H, H]
            shapes[f"{p}/attention_1/output/dense/bias"] = [H]
            shapes[f"{p}/ffn_1/intermediate/dense/kernel"] = [H, I]
            shapes[f"{p}/ffn_1/intermediate/dense/bias"] = [I]
            shapes[f"{p}/ffn_1/intermediate/output/dense/kernel"] = [I, H]
            shapes[f"{p}/ffn_1/intermediate/output/dense/bias"] = [H]
            for ln in ("LayerNorm", "LayerNorm_1"):
                shapes[f"{p}/{ln}/gamma"] = [H]
                shapes[f"{p}/{ln}/beta"] = [H]
    return shapes


def _write_random_tf1_checkpoint(config, prefix, seed=0, extra=None, prefix_names=""):
    """A Google-format checkpoint (TF1 names, global_step, adam slots) with random weights."""
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    weights = {n: (rng.standard_normal(s) * 0.2).astype(np.float32) for n, s in _tf1_shapes(config).items()}
    for n in weights:
        if n.endswith("/gamma"):
            weights[n] += 1.0
    entries = {prefix_names + n: v for n, v in weights.items()}
    entries["global_step"] = np.array(7, np.int64)
    entries[prefix_names + "bert/pooler/dense/kernel/adam_m"] = np.zeros([config.hidden_size] * 2, np.float32)
    entries.update(extra or {})
    names = sorted(entries)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(entries[n]) for n in names])
    return weights


@pytest.fixture
def numpy_forward():
    return _numpy_forward


@pytest.fixture
def random_tf1_checkpoint():
    return _write_random_tf1_checkpoint


@pytest.fixture
def tf1_shapes():
    return _tf1_shapes


def _misfit_init_checkpoints(config: dict, folder, config_file) -> dict:
    """{case: (checkpoint prefix, the driver's error line after 'error: ')}: TF1 checkpoints that do not fit
    the tiny ``config`` (a dict, written to ``config_file``). "larger": every size grown (ALBERT large with a
    base config), "vocab" and "embedding": one or a few weights differ, "layers missing": its embeddings only,
    "not albert": another model's weights. Each message is made from the shape table, not by the loader."""
    import pathlib

    import tensorflow as tf

    from albert_tf import AlbertConfig

    base = AlbertConfig(**config)
    expected = {n: s for n, s in _tf1_shapes(base).items() if n.startswith("bert/")}
    question = f" (was it written for another config than --albert_config_file={config_file}?)"
    folder = pathlib.Path(folder)
    cases = {}
    others = {"larger": {"embedding_size": base.embedding_size * 2, "hidden_size": base.hidden_size * 2,
                         "intermediate_size": base.intermediate_size * 2},
              "vocab": {"vocab_size": base.vocab_size + 1},
              "embedding": {"embedding_size": base.embedding_size // 2}}
    for name, change in others.items():
        other = AlbertConfig(**{**config, **change})
        prefix = folder / name / "model.ckpt"
        prefix.parent.mkdir(parents=True)
        _write_random_tf1_checkpoint(other, prefix)
        found = _tf1_shapes(other)
        differ = [n for n in expected if found.get(n) != expected[n]]
        assert len(differ) == len(expected) if name == "larger" else 0 < len(differ) < len(expected)
        word = "bert/embeddings/word_embeddings"
        field = "vocab_size" if name == "vocab" else "embedding_size"
        cases[name] = (str(prefix), f"--init_checkpoint: checkpoint {prefix} does not fit the model "
                                    f"({len(differ)} variables): {word}: expected shape {expected[word]}, "
                                    f"found shape {found[word]}; check config field {field}"
                                    f"{' ...' if len(differ) > 1 else ''}{question}")
    prefix = folder / "layers_missing" / "model.ckpt"
    prefix.parent.mkdir(parents=True)
    kept = sorted(n for n in expected if "/transformer/" not in n)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=kept, shape_and_slices=[""] * len(kept),
                      tensors=[tf.zeros(expected[n]) for n in kept])
    missing = [n for n in expected if "/transformer/" in n]
    first = "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/kernel"
    cases["layers missing"] = (str(prefix), f"--init_checkpoint: checkpoint {prefix} does not fit the model "
                                            f"({len(missing)} variables): {first}: expected shape "
                                            f"{expected[first]}, missing; the checkpoint has no such encoder "
                                            f"weight (is it an ALBERT checkpoint, or another model's?) ...{question}")
    assert first in missing
    prefix = folder / "not_albert" / "model.ckpt"
    prefix.parent.mkdir(parents=True)
    tf.raw_ops.SaveV2(prefix=str(prefix), tensor_names=["resnet/conv1/kernel"], shape_and_slices=[""],
                      tensors=[tf.zeros([3, 3])])
    cases["not albert"] = (str(prefix), f"--init_checkpoint={prefix}: checkpoint holds neither Google's TF1 ALBERT "
                                        f"names (bert/...) nor an albert_tf model; found e.g. resnet/conv1/kernel")
    return cases


@pytest.fixture
def misfit_init_checkpoints():
    """``make(config, folder, config_file)``: see ``_misfit_init_checkpoints``."""
    return _misfit_init_checkpoints


@pytest.fixture
def saved_model_disk_fills(monkeypatch):
    """Call it to make ``tf.saved_model.save`` write its files, then fail as on a full disk (TensorFlow's error
    names the temporary file it was writing): what an export meets when the disk fills during its save.
    Undone by ``monkeypatch.undo()`` or at the test's end."""
    import tensorflow as tf

    save = tf.saved_model.save

    def full_disk(obj, export_dir, signatures=None, options=None):
        save(obj, export_dir, signatures=signatures, options=options)
        raise tf.errors.ResourceExhaustedError(None, None, f"{export_dir}/saved_model.pb.tmp0123; No space left "
                                                           f"on device")

    return lambda: monkeypatch.setattr(tf.saved_model, "save", full_disk)


def _example_feature_order(record: bytes) -> list[str]:
    """The feature names of a serialized Example, in the order its bytes hold them (protobuf read by hand)."""
    def varint(buf, i):
        value, shift = 0, 0
        while True:
            byte = buf[i]
            value |= (byte & 0x7F) << shift
            i, shift = i + 1, shift + 7
            if byte < 0x80:
                return value, i

    def fields(buf):  # (field number, payload) of each length-delimited field
        i = 0
        while i < len(buf):
            tag, i = varint(buf, i)
            assert tag & 7 == 2, "only length-delimited fields expected"
            size, i = varint(buf, i)
            yield tag >> 3, buf[i:i + size]
            i += size

    (_, features), = fields(record)
    return [dict(fields(entry))[1].decode() for _, entry in fields(features)]


@pytest.fixture
def example_feature_order():
    """The feature names of a serialized tf.train.Example, in the order its bytes hold them."""
    return _example_feature_order
