"""Runs one fine-tuning driver several times in one process (one TensorFlow start-up), on a CPU
split into 2 logical devices, and records what each run computed, for test_length_policy.py.

    python length_runs.py <driver module> <runs.json> <result.json>

runs.json: {name: [flag, ...]}. For each run: the driver's task and job from the flags, the
runner's length policy, the sequence lengths of the first training batches (per replica, per step)
and of the dev batches under it, then the run itself. result.json: {name: {"losses": [per step],
"train_lengths": [[per replica] per step], "eval_lengths": [...], "padded": bool}}; the weights and
prediction files stay in each run's --output_dir.
"""
import importlib
import json
import sys

from albert_tf.training.distribution import split_cpu_into_logical_devices

split_cpu_into_logical_devices(2)  # before anything creates a tensor

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import flags  # noqa: E402

from albert_tf.data import datasets  # noqa: E402
from albert_tf.finetuning import run  # noqa: E402
from albert_tf.finetuning.runner import _Runner  # noqa: E402
from albert_tf.training import strategy_from_flags  # noqa: E402

PROBE_STEPS = 6


def _losses(output_dir: str) -> list[float]:
    """The per-step training loss the loop wrote to its summaries (--log_steps=1)."""
    found = {}
    for path in tf.io.gfile.glob(f"{output_dir}/events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "loss":
                    found[event.step] = float(tf.make_ndarray(value.tensor))
    return [found[step] for step in sorted(found)]


def _probe(task, job, strategy) -> dict:
    """The batch lengths the runner's policy gives: training (each replica of each step) and dev."""
    runner = _Runner(task, job, strategy)
    train = task.load_split("train")
    fn = datasets.train_dataset_fn(train.cached, job.train.train_batch_size, job.train.seed, task.shuffle_buffer,
                                   runner.lengths, job.group_by_length)
    replicas = strategy.num_replicas_in_sync
    per_step = []
    stream = iter(fn(tf.distribute.InputContext(1, 0, replicas)))
    for _ in range(PROBE_STEPS):
        per_step.append([int(next(stream)["input_ids"].shape[-1]) for _ in range(replicas)])
    evaluated = [int(b["input_ids"].shape[-1]) for b in datasets.eval_dataset(
        task.load_split("dev").cached, job.eval_batch_size, runner.lengths)]
    return {"train_lengths": per_step, "eval_lengths": evaluated, "padded": runner.lengths.pad_to_max,
            "describe": runner.lengths.describe()}


def main(driver: str, runs_file: str, result_file: str) -> None:
    module = importlib.import_module(f"albert_tf.drivers.{driver}")
    results = {}
    for name, argv in json.load(open(runs_file)).items():
        flags.FLAGS.unparse_flags()
        flags.FLAGS([driver, *argv])
        task, job = module.task_and_job_from_flags()
        strategy = strategy_from_flags(flags.FLAGS)
        probe = _probe(task, job, strategy)
        run(task, job, strategy)
        results[name] = {**probe, "losses": _losses(job.output_dir)}
        print(name, json.dumps(results[name]), flush=True)
    with open(result_file, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    np.set_printoptions(precision=6)
    main(*sys.argv[1:])
