"""Fixtures for the training tests: the toy task, its data, reference runs, subprocess launcher."""
from __future__ import annotations

import importlib.util
import os
import pathlib
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
DRIVER = HERE / "toy_driver.py"


def _load_toy():
    spec = importlib.util.spec_from_file_location("albert_tf_toy_driver", DRIVER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def toy():
    return _load_toy()


@pytest.fixture(scope="session")
def toy_data(toy, tmp_path_factory):
    """Training records (100) and eval records (23: batches of 5 leave a remainder of 3)."""
    root = tmp_path_factory.mktemp("toy_data")
    train, evaluation = str(root / "train.tfrecord"), str(root / "eval.tfrecord")
    toy.write_toy_data(train, 100, seed=0)
    toy.write_toy_data(evaluation, 23, seed=1)
    return {"train": train, "eval": evaluation}


def train_in_process(toy, toy_data, output_dir, evaluate=False, **options):
    """A one-device toy run in this process; returns (trainer, result, eval results)."""
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(output_dir),
                               eval_file=toy_data["eval"], **options)
    result = trainer.train()
    return trainer, result, (trainer.evaluate() if evaluate else None)


@pytest.fixture(scope="session")
def train_toy(toy, toy_data):
    def run(output_dir, evaluate=False, **options):
        return train_in_process(toy, toy_data, output_dir, evaluate=evaluate, **options)

    return run


@pytest.fixture(scope="session")
def reference_dropout(toy, toy_data, tmp_path_factory):
    """12 steps with dropout 0.1, checkpoints every 4 (keep 2), one device: the resume reference."""
    out = tmp_path_factory.mktemp("ref_dropout")
    trainer, result, _ = train_in_process(toy, toy_data, out, keep_checkpoint_max=2)
    return {"dir": out, "weights": toy.weights_by_name(trainer.model), "result": result}


@pytest.fixture(scope="session")
def reference_plain(toy, toy_data, tmp_path_factory):
    """6 steps without dropout, a loss summary every step, eval at the end: the distribution reference."""
    out = tmp_path_factory.mktemp("ref_plain")
    trainer, result, results = train_in_process(toy, toy_data, out, evaluate=True, dropout=0.0,
                                                num_train_steps=6, log_steps=1)
    return {"dir": out, "weights": toy.weights_by_name(trainer.model), "eval": results,
            "losses": read_scalars(out, "loss")}


def read_scalars(directory, tag) -> dict[int, float]:
    """{step: value} of a scalar summary in the event files of ``directory``."""
    values = {}
    for path in sorted(pathlib.Path(directory).glob("events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


@pytest.fixture
def scalars():
    return read_scalars


def assert_same_weights(got: dict, want: dict, atol: float) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=0, atol=atol, err_msg=name)


@pytest.fixture
def same_weights():
    return assert_same_weights


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ToyProcess:
    """The toy driver in a subprocess, stderr captured to a file we can poll."""

    def __init__(self, args, log_path, env=None):
        self.log_path = pathlib.Path(log_path)
        full_env = dict(os.environ, PYTHONPATH=str(REPO), TF_CPP_MIN_LOG_LEVEL="2", **(env or {}))
        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen([sys.executable, str(DRIVER), *args], cwd=str(REPO), env=full_env,
                                     stdout=self._log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, text: str, timeout: float = 120) -> None:
        deadline = time.time() + timeout
        while text not in self.log():
            if self.proc.poll() is not None:
                raise AssertionError(f"process exited ({self.proc.returncode}) before {text!r}:\n{self.log()}")
            if time.time() > deadline:
                self.proc.kill()
                raise AssertionError(f"timeout waiting for {text!r}:\n{self.log()}")
            time.sleep(0.1)

    def wait(self, timeout: float = 180) -> int:
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"process did not finish in {timeout}s:\n{self.log()}")
        finally:
            self._log.close()
        return code


@pytest.fixture
def toy_process(tmp_path, toy_data):
    """Starts the toy driver: ``toy_process(output_dir, *flags, env=..., name=...)``."""
    started = []

    def start(output_dir, *flags, env=None, name="run"):
        args = [f"--input_file={toy_data['train']}", f"--eval_file={toy_data['eval']}",
                f"--output_dir={output_dir}", *flags]
        process = ToyProcess(args, tmp_path / f"{name}-{len(started)}.log", env=env)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait()


@pytest.fixture
def ports():
    return free_port
