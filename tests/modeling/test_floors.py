"""The floors: importing every module of a package, in a fresh interpreter, loads nothing from a
higher floor (modeling: no training, task or data code; weights: no training or task code)."""
import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

IMPORT_ALL = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
names = [m.name for m in pkgutil.walk_packages(package.__path__, sys.argv[1] + ".")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"imported": names, "loaded": sorted(m for m in sys.modules if m.startswith("albert_tf"))}))
"""


FLOORS = {
    "albert_tf.modeling": ("albert_tf.training", "albert_tf.glue", "albert_tf.squad", "albert_tf.race", "albert_tf.data",
                           "albert_tf.pretraining", "albert_tf.weights"),
    "albert_tf.weights": ("albert_tf.training", "albert_tf.glue", "albert_tf.squad", "albert_tf.race",
                          "albert_tf.pretraining"),
}


@pytest.mark.parametrize("package", list(FLOORS))
def test_a_floor_imports_nothing_from_above(package):
    done = subprocess.run([sys.executable, "-c", IMPORT_ALL, package], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env={"PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "3", "PATH": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(report["imported"]) >= 5
    for floor in FLOORS[package]:
        loaded = [m for m in report["loaded"] if m == floor or m.startswith(floor + ".")]
        assert not loaded, f"importing {package} loaded {loaded}"
