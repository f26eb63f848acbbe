"""convert_checkpoint.py both ways and with --converted_model=encoder, the results read
back with tf.train.load_checkpoint and compared bit for bit with Google's checkpoint."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The driver's own flags and main(), several conversions in one process (one TF start-up).
RUN_CONVERSIONS = r"""
import json, sys
from absl import flags
import convert_checkpoint
codes = []
for argv in json.loads(sys.argv[1]):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["convert_checkpoint.py", *argv])
    codes.append(convert_checkpoint.main([]))
print(json.dumps(codes))
"""


def _tensors(prefix) -> dict:
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


@pytest.fixture(scope="module")
def converted(tmp_path_factory, shared):
    folder = shared("reference", "albert_tiny_shared")
    out = tmp_path_factory.mktemp("convert_cli")
    config = f"--albert_config_file={folder / 'albert_config.json'}"
    google = str(folder / "model.ckpt")
    runs = []
    for model in ("pretrainer", "encoder"):
        runs += [
            [f"--checkpoint_to_convert={google}", config, f"--converted_model={model}",
             f"--converted_checkpoint={out / model / 'tf2' / 'model.ckpt'}", "--direction=tf1_to_tf2"],
            [f"--checkpoint_to_convert={out / model / 'tf2'}", config, f"--converted_model={model}",
             f"--converted_checkpoint={out / model / 'tf1' / 'model.ckpt'}", "--direction=tf2_to_tf1"],
        ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=REPO)
    done = subprocess.run([sys.executable, "-c", RUN_CONVERSIONS, json.dumps(runs)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [0, 0, 0, 0], done.stderr[-3000:]
    original = {n: v for n, v in _tensors(google).items() if n != "global_step" and "/adam_" not in n}
    return out, original


def test_tf1_to_tf2_to_tf1_is_bit_exact(converted):
    out, original = converted
    back = _tensors(out / "pretrainer" / "tf1" / "model.ckpt")
    assert sorted(back) == sorted(original)
    for name, value in original.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape, name
        assert np.array_equal(back[name], value), name
    # The intermediate checkpoint is ours (object-based names), with the same values.
    ours = _tensors(out / "pretrainer" / "tf2" / "model.ckpt")
    assert all(name.endswith("/.ATTRIBUTES/VARIABLE_VALUE") for name in ours if name != "_CHECKPOINTABLE_OBJECT_GRAPH")
    assert sorted(np.asarray(v).tobytes() for n, v in ours.items() if n != "_CHECKPOINTABLE_OBJECT_GRAPH") == \
        sorted(v.tobytes() for v in original.values())


def test_encoder_only_conversion_keeps_exactly_the_encoder(converted):
    out, original = converted
    encoder = {n: v for n, v in original.items() if n.startswith("bert/")}
    assert len(encoder) < len(original)  # the reference has heads to leave out
    back = _tensors(out / "encoder" / "tf1" / "model.ckpt")
    assert sorted(back) == sorted(encoder)
    for name, value in encoder.items():
        assert back[name].dtype == value.dtype and np.array_equal(back[name], value), name
    ours = _tensors(out / "encoder" / "tf2" / "model.ckpt")
    assert len([n for n in ours if n != "_CHECKPOINTABLE_OBJECT_GRAPH"]) == len(encoder)
