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
    # A machine with CUDA libraries and no GPU (the CI machine), printed when the devices are first listed.
    "E0000 00:00:1796457126.170106   24320 cuda_platform.cc:52] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)\n",
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
    (["--verbosity=0", "--verbosity=1"], {}, True),  # absl keeps the last value
    (["--verbosity=1", "--verbosity=0"], {}, False),
    (["-v", "1", "--v=0"], {}, False),
    (["--v=0", "-v", "1"], {}, True),
    (["--output_dir=v"], {VERBOSE_ENV: "1"}, True),
    ([], {VERBOSE_ENV: "yes"}, True),
    ([], {VERBOSE_ENV: "0"}, False),
    ([], {VERBOSE_ENV: ""}, False),
])
def test_verbose_requested(argv, env, expected):
    assert verbose_requested(argv, env) is expected


@pytest.mark.parametrize("argv", [
    ["--verbosity=0", "--verbosity=1"],
    ["--verbosity=1", "--verbosity=0"],
    ["-v", "1", "--v=0"],
    ["--v=0", "-v", "2"],
    ["--output_dir=v", "--verbosity", "1", "-v=0"],
])
def test_verbose_requested_agrees_with_absl(argv):
    # Independent oracle: absl's own parser for an int flag named like its --verbosity (short name v).
    from absl import flags
    values = flags.FlagValues()
    flags.DEFINE_integer("verbosity", -1, "", short_name="v", flag_values=values)
    flags.DEFINE_string("output_dir", None, "", flag_values=values)
    values(["prog", *argv])
    assert verbose_requested(argv, {}) is (values.verbosity >= 1)


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


def test_a_users_log_level_2_shows_no_cuinit_record_beside_the_error_and_devices_stay_configurable():
    """`export TF_CPP_MIN_LOG_LEVEL=2` hides TensorFlow's INFO lines but shows its errors; on a machine with CUDA
    libraries and no GPU, CUDA's cuInit record then came out beside a driver's one-line error when the first
    op ran (CI, stop 48). The quiet start lists the devices inside its capture, which must leave the runtime
    unconfigured: logical devices and thread counts can still be set afterwards."""
    script = (
        "import albert_tf.drivers, sys\n"
        "import tensorflow as tf\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "tf.config.threading.set_intra_op_parallelism_threads(1)\n"
        "assert len(tf.config.list_logical_devices('CPU')) == 2 and int(tf.constant(1) + 1) == 2\n"
        "sys.exit('some_driver.py: error: --flag: what was expected')\n")
    env = {k: v for k, v in os.environ.items() if k != VERBOSE_ENV}
    env.update(PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr == "some_driver.py: error: --flag: what was expected\n"


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


def test_tensorflows_info_records_are_hidden_between_a_drivers_lines_and_its_warnings_kept(tmp_path):
    """Each checkpoint save logged "Sharding callback duration: 8 microseconds" twice among a driver's INFO
    lines, each export "Assets written to" twice (absl's handler and TensorFlow's own), a fingerprint line
    and the renaming of numbered inputs. ALBERT_TF_VERBOSE=1 shows them."""
    script = (
        "import albert_tf.drivers, sys\n"
        "import tensorflow as tf\n"
        "from absl import logging\n"
        "from tensorflow.python.platform import tf_logging\n"
        "logging.use_absl_handler()\n"
        "logging.set_verbosity(logging.INFO)\n"
        "logging.info('ours before')\n"
        f"tf.train.Checkpoint(v=tf.Variable(1.0)).write({str(tmp_path / 'ckpt')!r})\n"
        f"open({str(tmp_path / 'vocab.txt')!r}, 'w').write('a')\n"
        f"module = tf.Module(); module.vocab = tf.saved_model.Asset({str(tmp_path / 'vocab.txt')!r})\n"
        f"tf.saved_model.save(module, {str(tmp_path / 'export')!r})\n"  # 'Assets written to', TensorFlow's
        "tf_logging.warning('a warning')\n"
        "tf_logging.info('ours through tf_logging')\n"  # named by its caller, here: not TensorFlow's
        "logging.info('ours after')\n")
    env = {k: v for k, v in os.environ.items() if k != VERBOSE_ENV}
    env.update(PYTHONPATH=str(REPO))

    def run(extra_env, *argv):
        done = subprocess.run([sys.executable, "-c", script, *argv], env={**env, **extra_env}, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stderr

    for loud in (run({VERBOSE_ENV: "1"}), run({}, "--verbosity=1")):
        assert "Sharding callback duration" in loud and "Assets written to" in loud
        # once at this verbosity too (it printed "WARNING:tensorflow:a warning" besides absl's line)
        assert loud.count("a warning") == 1 and loud.count("Assets written to") == 1, loud
    quiet = run({})
    assert "Sharding callback duration" not in quiet and "Assets written to" not in quiet
    for line in ("ours before", "a warning", "ours through tf_logging", "ours after"):
        assert line in quiet
    # once: it also went through TensorFlow's own handler ("WARNING:tensorflow:a warning")
    assert quiet.count("a warning") == 1, quiet
