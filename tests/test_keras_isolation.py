"""albert_tf leaves the process's tf.keras alone: TensorFlow 2.21's tf.keras is Keras 3, albert_tf's models
are tf_keras (Keras 2), and both run side by side in one process, whichever is imported first."""
import ast
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = REPO / "albert_tf"

# Run in a fresh interpreter: Keras 3 and an albert_tf model, in the order given by argv[1].
SIDE_BY_SIDE = r"""
import importlib, os, pkgutil, sys
import numpy as np
import tensorflow as tf

def keras3():
    model = tf.keras.Sequential([tf.keras.layers.Dense(2)])
    out = model(np.ones([3, 4], np.float32))
    assert tuple(out.shape) == (3, 2), out.shape
    import keras
    assert isinstance(model, keras.Model), type(model)
    return model

def albert():
    import albert_tf
    # every library module (the drivers are programs: each defines its flags on import)
    for info in pkgutil.walk_packages(albert_tf.__path__, "albert_tf."):
        if not info.name.startswith("albert_tf.drivers."):
            importlib.import_module(info.name)
    from albert_tf import AlbertConfig
    from albert_tf.glue.heads import GlueClassifier
    config = AlbertConfig(vocab_size=40, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    model = GlueClassifier(config, num_labels=3)
    out = model(model.dummy_inputs(batch_size=2), training=False)
    assert tuple(out["logits"].shape) == (2, 3)
    import tf_keras
    assert isinstance(model, tf_keras.Model), type(model)
    return model

first, second = (keras3, albert) if sys.argv[1] == "keras3_first" else (albert, keras3)
first(); second()
assert tf.keras.__version__.startswith("3"), tf.keras.__version__
assert "TF_USE_LEGACY_KERAS" not in os.environ, os.environ["TF_USE_LEGACY_KERAS"]
keras3()  # a new Keras 3 model after both
print("keras", tf.keras.__version__)
"""


@pytest.mark.parametrize("order", ["keras3_first", "albert_first"])
def test_keras3_and_albert_models_side_by_side_in_a_fresh_process(order):
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run([sys.executable, "-c", SIDE_BY_SIDE, order], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1].startswith("keras 3."), done.stdout


def _keras_uses(source: str, name: str) -> list[str]:
    """`tf.keras` / `tensorflow.keras` attributes, imports of `keras` or `tensorflow.keras`, tf_keras
    outside albert_tf/keras.py, and any mention of TF_USE_LEGACY_KERAS in code."""
    tree = ast.parse(source, name)
    found = []
    for node in ast.walk(tree):
        where = f"{name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Attribute) and node.attr == "keras" and isinstance(node.value, ast.Name) \
                and node.value.id in ("tf", "tensorflow"):
            found.append(f"{where}: {node.value.id}.keras")
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        for module in modules:
            if module == "keras" or module.startswith("keras.") or module.startswith("tensorflow.keras") \
                    or module == "tensorflow.python.keras":
                found.append(f"{where}: imports {module}")
            if module.split(".")[0] == "tf_keras" and name != "albert_tf/keras.py":
                found.append(f"{where}: imports {module} (Keras is imported in albert_tf/keras.py only)")
        if isinstance(node, ast.Constant) and node.value == "TF_USE_LEGACY_KERAS":
            found.append(f"{where}: TF_USE_LEGACY_KERAS")
    return found


def test_no_module_of_the_package_uses_tf_keras():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 50  # the whole package, not a stray folder
    found = [use for path in modules for use in _keras_uses(path.read_text(), str(path.relative_to(REPO)))]
    assert found == [], "\n".join(found)
    # the check finds what it looks for
    sample = ("import os\nimport tensorflow as tf\nfrom tensorflow.keras import layers\nimport tf_keras\n"
              "x = tf.keras.layers.Dense(2)\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nfrom tensorflow import keras\n"
              "import keras\n")
    lines = {int(use.split(":")[1]) for use in _keras_uses(sample, "albert_tf/sample.py")}
    assert lines == {3, 4, 5, 6, 7, 8}
