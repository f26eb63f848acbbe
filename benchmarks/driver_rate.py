"""The fine-tuning rate through the driver itself: `run_classifier.py` on a GLUE task, input pipeline,
checkpointing and all, as a user runs it; the rate read from the driver's own progress lines.

`finetune.py` times the training step on batches it prepares; this runs the launcher in a
subprocess with an ALBERT-base config (albert-base-v2 shapes, random weights: speed does not depend
on them), `--train_step` steps, a progress line every `--log_steps` steps, and reports the
examples/s of each line after the first (which holds tracing and the first batches' compilation).
Batches are the driver's default: shuffled rows, each batch cut to its longest row.

The rate depends on which rows the timed steps drew: the driver runs with a recorder
(``--record_batches``, this script's child mode) that, after training, reads the driver's own
training dataset again (same seed, same order) and writes each step's batch length; the script
prints the timed steps' mean length, the lengths seen there for the first time (each compiles the
XLA-fused elementwise functions once, about 0.3 s), and with ``--ceiling`` TF's dense-matmul rate
at that many rows (``matmul_ceiling.py``'s tf worker) and the driver's rate as a share of the step
time it allows (issue 33's "% of the matmul ceiling", at the batches the driver really trained on).

  .venv/bin/python benchmarks/driver_rate.py --task_name=cola --mixed_precision=bf16 --ceiling
Compare with `finetune.py --task=cola` (its "hf longest" row: HF's default collator) on the same machine.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from finetune import BASE, SHARED  # noqa: E402  (albert-base-v2's shapes)
from harness import REPO, median, print_machine, write_result  # noqa: E402
import matmul_ceiling  # noqa: E402
from workload import classifier_step_gflop  # noqa: E402

ALBERT_BASE = dict(BASE, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # albert-base-v2: no dropout
PROGRESS = re.compile(r"step (\d+)/\d+: .*examples/s = ([0-9.]+)")


def record_batches(widths_path: str, driver_argv: list[str]) -> None:
    """Child mode: runs run_classifier.py's own entry point with ``driver_argv``; after training,
    reads the training dataset the driver built again from its start (the same seeded order) and
    writes the length of each of its first ``--train_step`` batches to ``widths_path``."""
    import albert_tf.drivers  # noqa: F401  (the launchers' quiet start-up, before TensorFlow)
    from albert_tf.data import datasets
    from albert_tf.finetuning import runner

    built = []
    make_dataset_fn = datasets.train_dataset_fn

    def recording_dataset_fn(*args, **kwargs):
        dataset_fn = make_dataset_fn(*args, **kwargs)

        def dataset(context):
            built.append((dataset_fn, context))
            return dataset_fn(context)
        return dataset

    datasets.train_dataset_fn = recording_dataset_fn
    train = runner._Runner.train

    def train_then_record(self):
        model = train(self)
        dataset_fn, context = built[0]
        steps = self.job.train.num_train_steps
        widths = [int(batch["input_ids"].shape[-1]) for batch in dataset_fn(context).take(steps)]
        write_result(widths_path, {"widths": widths})
        return model

    runner._Runner.train = train_then_record
    from albert_tf.drivers import run_classifier

    sys.argv = [os.path.join(REPO, "run_classifier.py"), *driver_argv]
    run_classifier.run()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--record_batches":
        record_batches(sys.argv[2], sys.argv[3:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task_name", default="cola")
    parser.add_argument("--data_dir", default=os.path.join(SHARED, "data", "glue"))
    parser.add_argument("--spm_model_file", default=os.path.join(SHARED, "data", "spm", "30k-clean.model"))
    parser.add_argument("--mixed_precision", default="bf16", choices=("none", "bf16"))
    parser.add_argument("--train_batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--train_step", type=int, default=40)
    parser.add_argument("--log_steps", type=int, default=5)
    parser.add_argument("--seq_length_multiple", type=int, default=None,
                        help="passed to the driver (its default when not given): batch lengths rounded up to this")
    matmul_ceiling.add_ceiling_flags(parser, "the driver's rate")
    args = parser.parse_args()
    print_machine()
    with tempfile.TemporaryDirectory(prefix="albert_driver_rate_") as tmp:
        config = os.path.join(tmp, "albert_config.json")
        with open(config, "w", encoding="utf-8") as f:
            json.dump(ALBERT_BASE, f)
        widths_path = os.path.join(tmp, "widths.json")
        command = [sys.executable, os.path.abspath(__file__), "--record_batches", widths_path,
                   f"--task_name={args.task_name}",
                   f"--data_dir={args.data_dir}", f"--spm_model_file={args.spm_model_file}",
                   f"--albert_config_file={config}", f"--output_dir={os.path.join(tmp, 'out')}", "--do_train",
                   f"--train_batch_size={args.train_batch_size}", f"--max_seq_length={args.max_seq_length}",
                   f"--train_step={args.train_step}", "--warmup_step=0", f"--log_steps={args.log_steps}",
                   f"--save_checkpoints_steps={args.train_step}", f"--mixed_precision={args.mixed_precision}"]
        if args.seq_length_multiple is not None:
            command.append(f"--seq_length_multiple={args.seq_length_multiple}")
        print(f"load average at start: {os.getloadavg()[0]:.1f}\n$ {' '.join(command)}", flush=True)
        done = subprocess.run(command, capture_output=True, text=True,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        lines = [(int(m.group(1)), float(m.group(2))) for m in PROGRESS.finditer(done.stdout + done.stderr)]
        if done.returncode or len(lines) < 2 or not os.path.exists(widths_path):
            sys.exit(f"error: run_classifier.py exited {done.returncode} with {len(lines)} progress lines:\n"
                     f"{(done.stdout + done.stderr)[-3000:]}")
        with open(widths_path, encoding="utf-8") as f:
            widths = json.load(f)["widths"]
        rates = [rate for _, rate in lines[1:]]
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
        print("progress lines (step: examples/s): " + ", ".join(f"{s}: {r:.1f}" for s, r in lines))
        first, last = lines[0][0], lines[-1][0]
        print(f"{args.task_name} through run_classifier.py, {args.mixed_precision}, batch {args.train_batch_size}: "
              f"median {median(rates):.2f} examples/s = {args.train_batch_size / median(rates):.3f} s/step "
              f"over steps {first + 1}-{last}")
        # The timed steps: what each window's rate covers (its steps since the line before).
        timed = widths[first:last]
        seconds = sum((step - before) * args.train_batch_size / rate
                      for (before, _), (step, rate) in zip(lines, lines[1:]))
        mean_width = sum(timed) / len(timed)
        rows = round(args.train_batch_size * mean_width)
        new = sorted(set(timed) - set(widths[:first]))
        print(f"their batches: mean length {mean_width:.2f} positions ({rows} rows per step), lengths "
              f"{min(timed)}-{max(timed)}; {len(new)} lengths first seen in these steps (each compiles the "
              f"XLA-fused functions once)")
        if args.ceiling:
            rate = matmul_ceiling.tf_training_rate(args.mixed_precision.replace("none", "fp32"), rows, tmp,
                                                   rounds=args.ceiling_rounds)
            if rate is not None:
                gflop = sum(classifier_step_gflop(BASE["embedding_size"], BASE["hidden_size"],
                                                  BASE["num_hidden_layers"], BASE["intermediate_size"],
                                                  args.train_batch_size, width) for width in timed)
                allowed = gflop / rate
                print(f"TF's matmul ceiling {rate:.0f} GFLOP/s at {rows} rows: the timed steps' "
                      f"{gflop / len(timed):.1f} GFLOP/step in {allowed / len(timed):.3f} s/step; the driver "
                      f"{seconds / len(timed):.3f} s/step = {100 * allowed / seconds:.0f}% of it")

if __name__ == "__main__":
    main()
