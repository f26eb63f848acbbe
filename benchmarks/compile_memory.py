"""What XLA's just-in-time compiler adds to a process's resident memory.

The training step compiles a few elementwise functions (`albert_tf/fused.py`: GELU and its
gradient, the residual LayerNorm, the optimizer's update).  The first compiled function loads and
initialises XLA's CPU compiler; each new shape compiles again.  This prints VmRSS after a plain
`tf.function` call, then after the same elementwise function compiled at `--shapes` shapes in turn,
so the step's peak RSS can be read as TensorFlow + this + the step's own tensors.  The first
line after the plain call is at the same shape (its tensors are already allocated): the
compiler alone; later lines include each new shape's input and output (8-16 MiB) too.

  .venv/bin/python benchmarks/compile_memory.py
"""
from __future__ import annotations

from albert_tf.startup import quiet_startup  # before TensorFlow: hides its start-up lines

quiet_startup()

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import print_machine, rss_mb  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=int, default=8, help="compile at this many row counts (x 100, width 3072)")
    args = parser.parse_args()
    print_machine()
    import tensorflow as tf

    def formula(x):  # GELU's kind of elementwise work
        return x * tf.tanh(x) + 1.0

    plain = tf.function(formula)
    from albert_tf.fused import fused  # compiled as the model's functions are

    compiled = fused(formula)
    plain(tf.ones([672, 3072]))
    before = rss_mb()
    print(f"VmRSS after TensorFlow's import and a plain tf.function call: {before:.0f} MiB")
    previous = before
    for i in range(args.shapes):
        compiled(tf.ones([672 + 100 * i, 3072]))
        now = rss_mb()
        print(f"  after compiling shape {i + 1} ([{672 + 100 * i}, 3072]): {now:.0f} MiB (+{now - previous:.0f})")
        previous = now
    print(f"XLA's compiler added {previous - before:.0f} MiB in all")


if __name__ == "__main__":
    main()
