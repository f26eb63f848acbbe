"""Installing puts only the albert_tf package into site-packages (the drivers live in
albert_tf/drivers), the console scripts point there, and the checkout's top-level scripts
launch the same drivers with their full --help."""
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
DRIVERS = ("create_pretraining_data", "run_pretraining", "run_classifier", "run_squad", "convert_checkpoint",
           "export_model")


def test_wheel_holds_only_the_package(tmp_path):
    source = tmp_path / "src"  # a copy: building writes build/ and *.egg-info beside setup.py
    shutil.copytree(REPO / "albert_tf", source / "albert_tf", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("setup.py", *(f"{d}.py" for d in DRIVERS)):
        shutil.copy(REPO / name, source / name)
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {"albert_tf", next(n for n in names if ".dist-info/" in n).split("/")[0]}
    scripts = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    for driver in DRIVERS:
        assert f"= albert_tf.drivers.{driver}:run" in scripts, driver
        assert f"albert_tf/drivers/{driver}.py" in names


@pytest.mark.parametrize("driver,flag", [("run_classifier", "--task_name"), ("create_pretraining_data", "--dupe_factor"),
                                         ("run_pretraining", "--save_checkpoints_steps")])
def test_launcher_help_describes_the_driver(driver, flag):
    done = subprocess.run([sys.executable, f"{driver}.py", "--help"], capture_output=True, text=True, timeout=300,
                          cwd=REPO, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert f"  {flag}:" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    assert "launches albert_tf/drivers" not in done.stdout  # the driver's description, not the launcher's


def test_setup_makes_again_a_venv_whose_creation_was_interrupted(tmp_path):
    """`python -m venv` stopped before it installed pip (or run without ensurepip) leaves python but no
    pip; setup's first step then made every later `make` fail. It now makes the venv again."""
    first = next(line.strip() for line in (REPO / "Makefile").read_text().splitlines()
                 if line.startswith("\t") and " -m venv " in line)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", ".venv"], cwd=tmp_path, check=True)
    assert subprocess.run([".venv/bin/python", "-m", "pip", "--version"], cwd=tmp_path,
                          capture_output=True).returncode != 0
    command = first.replace("$(PY)", ".venv/bin/python").replace("$(PYTHON)", sys.executable) \
                   .replace("$(VENV)", ".venv")
    subprocess.run(["bash", "-c", command], cwd=tmp_path, check=True, timeout=300)
    assert subprocess.run([".venv/bin/python", "-m", "pip", "--version"], cwd=tmp_path,
                          capture_output=True).returncode == 0
