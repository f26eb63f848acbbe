"""The fine-tuning rate through the driver itself: `run_classifier.py` on a GLUE task, input pipeline,
checkpointing and all, as a user runs it; the rate read from the driver's own progress lines.

`finetune.py` times the training step on batches it prepares; this runs the launcher in a
subprocess with an ALBERT-base config (albert-base-v2 shapes, random weights: speed does not depend
on them), `--train_step` steps, a progress line every `--log_steps` steps, and reports the
examples/s of each line after the first (which holds tracing and the first batches' compilation).
Batches are the driver's default: shuffled rows, each batch cut to its longest row.

  .venv/bin/python benchmarks/driver_rate.py --task_name=cola --mixed_precision=bf16
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
from harness import REPO, median, print_machine  # noqa: E402

ALBERT_BASE = dict(BASE, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # albert-base-v2: no dropout
PROGRESS = re.compile(r"step (\d+)/\d+: .*examples/s = ([0-9.]+)")


def main() -> None:
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
    args = parser.parse_args()
    print_machine()
    with tempfile.TemporaryDirectory(prefix="albert_driver_rate_") as tmp:
        config = os.path.join(tmp, "albert_config.json")
        with open(config, "w", encoding="utf-8") as f:
            json.dump(ALBERT_BASE, f)
        command = [sys.executable, os.path.join(REPO, "run_classifier.py"), f"--task_name={args.task_name}",
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
    if done.returncode or len(lines) < 2:
        sys.exit(f"error: run_classifier.py exited {done.returncode} with {len(lines)} progress lines:\n"
                 f"{(done.stdout + done.stderr)[-3000:]}")
    rates = [rate for _, rate in lines[1:]]
    print(f"load average at end: {os.getloadavg()[0]:.1f}")
    print("progress lines (step: examples/s): " + ", ".join(f"{s}: {r:.1f}" for s, r in lines))
    print(f"{args.task_name} through run_classifier.py, {args.mixed_precision}, batch {args.train_batch_size}: "
          f"median {median(rates):.2f} examples/s = {args.train_batch_size / median(rates):.3f} s/step "
          f"over steps {lines[0][0] + 1}-{lines[-1][0]}")


if __name__ == "__main__":
    main()
