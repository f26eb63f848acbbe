"""The encoder's forward pass is built so that TensorFlow fuses its dense layers: each dense
layer's MatMul + BiasAdd, and outside training the FFN's GELU too (oneDNN's fused matmul).
Checked on the ops that actually run (the profiler's record of the executed graph), with
oneDNN switched on (TF_ENABLE_ONEDNN_OPTS=1), in a fresh process."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

PROGRAM = textwrap.dedent("""
    import glob, json, os, sys, tempfile
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    from albert_tf import AlbertConfig, AlbertModel
    from albert_tf.training import set_mixed_precision

    def executed(forward, inputs):
        \"\"\"(op types, XLA-compiled functions) of one profiled call of a traced function.\"\"\"
        forward(inputs)
        with tempfile.TemporaryDirectory() as logdir:
            tf.profiler.experimental.start(logdir)
            forward(inputs)
            tf.profiler.experimental.stop()
            space = xplane_pb2.XSpace()
            path = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))[-1]
            with open(path, "rb") as f:
                space.ParseFromString(f.read())
        names = [meta.name for plane in space.planes for meta in plane.event_metadata.values()]
        # The executor names an op's span "<node name>:<op type>"; XLA-compiled functions run as
        # modules named after the function ("..._inference_<name>_<id>...").
        types = {name.rsplit(":", 1)[1] for name in names if ":" in name and "/" in name}
        compiled = {name for name in names if "inference_" in name and ":" not in name}
        return sorted(types), sorted(compiled)

    config = AlbertConfig(vocab_size=50, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=64)
    result = {}
    for policy in ("none", "bf16"):
        set_mixed_precision(policy)
        model = AlbertModel(config)
        inputs = model.dummy_inputs(2, 8)
        for training in (False, True):
            forward = tf.function(lambda inputs: model(inputs, training=training)["sequence_output"])
            key = str(training) if policy == "none" else f"bf16 {training}"
            result[key], result["compiled " + key] = executed(forward, inputs)
    print(json.dumps(result))
""")



@pytest.fixture(scope="module")
def executed_op_types():
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="1", TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {k: set(v) for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}


def _fused_keys() -> tuple[str, ...]:
    """The runs whose dense layers must be fused: float32 everywhere; bf16 only where the CPU has
    bf16 hardware, since TensorFlow's oneDNN rewrite leaves bf16 ops to Eigen (plain MatMul and
    BiasAdd) on a CPU without AVX512_BF16 or AMX, whatever the model does."""
    from albert_tf import cpu_bf16

    bf16 = ("bf16 False", "bf16 True") if cpu_bf16.cpu_has_bf16() is not False else ()
    return ("False", "True") + bf16


def _ran_compiled(names, function: str) -> bool:
    return any(f"inference_{function}_" in name for name in names)


def test_dense_layers_run_as_fused_matmuls(executed_op_types):
    """In float32 and bf16 (where training adds a custom bias gradient: `albert_tf.modeling.bias`)."""
    for training, types in ((k, executed_op_types[k]) for k in _fused_keys()):
        assert any("FusedMatMul" in t for t in types), (training, types)
        assert "BiasAdd" not in types, (training, types)


# An unfused dense layer runs as one of these (plain or oneDNN's), beside a separate BiasAdd or Add;
# attention's score and context products are batched matmuls, which are not dense layers.
UNFUSED_DENSE = ("MatMul", "_MklMatMul")


def test_no_dense_matmul_runs_unfused(executed_op_types):
    """Every dense layer (Q/K/V, attention output, FFN, embedding mapping, pooler) is a fused matmul:
    a bias added after a reshape would leave a plain matmul and an Add."""
    for training, types in ((k, executed_op_types[k]) for k in _fused_keys()):
        assert not types & set(UNFUSED_DENSE), (training, sorted(types))


def test_gelu_fused_into_the_matmul_outside_training(executed_op_types):
    assert "Tanh" not in executed_op_types["False"], executed_op_types["False"]
    assert not _ran_compiled(executed_op_types["compiled False"], "gelu_value")


def test_gelu_runs_as_one_compiled_kernel_in_training(executed_op_types):
    """In training the GELU input is kept for the backward pass, so the GELU cannot join the
    matmul: it runs as one XLA-compiled loop (`activations.fused`), not as separate ops."""
    assert "Tanh" not in executed_op_types["True"], executed_op_types["True"]
    assert _ran_compiled(executed_op_types["compiled True"], "gelu_value"), executed_op_types["compiled True"]


def test_residual_layer_norm_runs_as_one_compiled_kernel_in_training(executed_op_types):
    """In training each block's residual add + LayerNorm is one XLA-compiled loop; outside
    training (and in exports) they stay plain ops."""
    assert _ran_compiled(executed_op_types["compiled True"], "_residual_norm_value"), executed_op_types["compiled True"]
    assert not _ran_compiled(executed_op_types["compiled False"], "_residual_norm_value")


def test_attention_softmax_runs_as_one_compiled_kernel_in_bf16_training(executed_op_types):
    """In a bf16 training step (no attention dropout) the attention's scale, mask, softmax and cast
    are one XLA-compiled loop; outside training (and in exports) and in float32 they stay plain ops."""
    assert _ran_compiled(executed_op_types["compiled bf16 True"], "_attention_probs"), \
        executed_op_types["compiled bf16 True"]
    for key in ("compiled bf16 False", "compiled True", "compiled False"):
        assert not _ran_compiled(executed_op_types[key], "_attention_probs"), key
