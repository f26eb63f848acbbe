"""Quiet start of the drivers (albert_tf.startup): TensorFlow's start-up lines hidden by
default, shown with --verbosity=1 or ALBERT_TF_VERBOSE=1; errors still printed."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from albert_tf.startup import VERBOSE_ENV, filtered_stderr, is_noise, verbose_requested

REPO = pathlib.Path(__file__).resolve().parents[1]

# Lines TensorFlow 2.21 printed on this project's machines (copied from real runs).
NOISE = [
    "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
    "I0000 00:00:1796095900.338775   18106 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
    "GPU will not be used.\n",
    "I0000 00:00:1796095900.437668   18106 cpu_feature_guard.cc:227] This TensorFlow binary is optimized to "
    "use available CPU instructions in performance-critical operations.\n",
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.\n",
    "I1203 10:11:12.123456   18106 onednn_notice.cc:10] oneDNN custom operations are on.\n",
]
KEPT = [
    "convert_checkpoint.py: error: checkpoint not found: /x (expected /x.index, or a directory)\n",
    "E0000 00:00:1796095944.111778   18234 some_kernel.cc:52] a real error\n",
    "Traceback (most recent call last):\n",
    "WARNING: something else\n",
]


@pytest.mark.parametrize("argv, env, expected", [
    ([], {}, False),
    (["--verbosity=1"], {}, True),
    (["--verbosity", "2"], {}, True),
    (["-v", "1"], {}, True),
    (["-v=1"], {}, True),
    (["--verbosity=0"], {}, False),
    (["--verbosity=-1"], {}, False),
    (["--verbosity=x"], {}, False),
    (["--", "--verbosity=1"], {}, False),
    (["--output_dir=v"], {VERBOSE_ENV: "1"}, True),
    ([], {VERBOSE_ENV: "yes"}, True),
    ([], {VERBOSE_ENV: "0"}, False),
    ([], {VERBOSE_ENV: ""}, False),
])
def test_verbose_requested(argv, env, expected):
    assert verbose_requested(argv, env) is expected


def test_noise_lines_are_recognized_and_others_kept():
    assert [line for line in NOISE if not is_noise(line)] == []
    assert [line for line in KEPT if is_noise(line)] == []


def test_filtered_stderr_drops_noise_keeps_the_rest_even_on_error(capfd):
    with pytest.raises(RuntimeError):
        with filtered_stderr():
            for line in [NOISE[0], KEPT[0], NOISE[1], KEPT[1], NOISE[3], KEPT[2]]:
                os.write(2, line.encode())  # what C++ and Python print both reach file descriptor 2
            raise RuntimeError("import failed")
    assert capfd.readouterr().err == "".join(KEPT[:3])


def _driver(tmp_path, extra_env=None, command=("convert_checkpoint.py",)):
    env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL", VERBOSE_ENV)}
    env.update(PYTHONPATH=str(REPO), **(extra_env or {}))
    missing = tmp_path / "missing"
    command = [str(REPO / command[0])] if command[0].endswith(".py") else list(command)
    return subprocess.run(
        [sys.executable, *command, f"--checkpoint_to_convert={missing}",
         f"--converted_checkpoint={tmp_path / 'out'}"],
        env=env, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))


@pytest.mark.parametrize("command", [("convert_checkpoint.py",), ("-m", "albert_tf.drivers.convert_checkpoint")],
                         ids=["launcher", "package module"])
def test_driver_starts_quietly_and_shows_start_up_lines_on_request(tmp_path, command):
    error = f"convert_checkpoint.py: error: checkpoint not found: {tmp_path / 'missing'}"
    loud = _driver(tmp_path, {VERBOSE_ENV: "1"}, command)
    assert loud.returncode == 1
    assert error in loud.stderr
    shown = [line for line in loud.stderr.splitlines(keepends=True) if is_noise(line)]
    if not shown:
        pytest.skip("this TensorFlow build printed no start-up lines here: nothing to hide")

    quiet = _driver(tmp_path, command=command)
    assert quiet.returncode == 1
    lines = quiet.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(error), quiet.stderr
    assert quiet.stdout == "" and not (tmp_path / "out").exists()


def test_every_launcher_and_console_script_starts_through_the_drivers_package():
    """The quiet start lives in albert_tf/drivers/__init__.py: whatever starts a driver must import it
    (that package) before the driver's module imports TensorFlow."""
    launchers = sorted(p for p in REPO.glob("*.py") if p.name != "setup.py")
    assert launchers
    for launcher in launchers:
        code = launcher.read_text()
        assert f"from albert_tf.drivers.{launcher.stem} import" in code or \
            f"from albert_tf.drivers import {launcher.stem}" in code, launcher.name
    scripts = re.findall(r'"albert-[\w-]+=([\w.]+):run"', (REPO / "setup.py").read_text())
    assert scripts and all(s.startswith("albert_tf.drivers.") for s in scripts), scripts
