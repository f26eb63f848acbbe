"""The model floor: importing every albert_tf.modeling module loads no training, task or data code."""
import json
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]

IMPORT_ALL = """
import importlib, json, pkgutil, sys
import albert_tf.modeling as package
names = [m.name for m in pkgutil.walk_packages(package.__path__, "albert_tf.modeling.")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "loaded": sorted(m for m in sys.modules if m.startswith("albert_tf"))}))
"""


def test_modeling_imports_nothing_from_training_tasks_or_data():
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert {"albert_tf.modeling.layers", "albert_tf.modeling.dropout"} <= set(report["imported"])
    for floor in ("albert_tf.training", "albert_tf.glue", "albert_tf.squad", "albert_tf.data",
                  "albert_tf.pretraining"):
        loaded = [m for m in report["loaded"] if m == floor or m.startswith(floor + ".")]
        assert not loaded, f"importing albert_tf.modeling loaded {loaded}"
