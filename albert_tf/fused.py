"""Elementwise steps compiled by XLA, each into one loop, beside TensorFlow's own kernels.

Why: run as separate TensorFlow ops, an elementwise formula is one pass over memory per op,
and in bf16 each op converts every element to float32 and back.  GELU and its gradient are
about twenty such passes over a [tokens, intermediate] tensor per layer; on an AMX CPU they
took more time than the FFN's matmuls (forward and gradient over 672 x 3072 bf16 elements:
13.6 ms as separate ops, 6.1 ms compiled, `benchmarks/fused_steps.py`).  AdamW's
update is a dozen passes over every weight (11.3 ms and 7.2 ms for a 768 x 3072 kernel).

Only such elementwise functions are compiled; the matmuls stay oneDNN's (XLA's CPU backend
has no AMX kernels).  XLA compiles once per input shape: a new batch length costs about
0.1 s, once per run.  Compiled functions are for training steps; exported models keep plain
ops (serving runtimes need not have XLA).
"""
from __future__ import annotations

from typing import Callable

import tensorflow as tf


def fused(fn: Callable) -> Callable:
    """`fn` as one XLA-compiled function (traced per dtype and rank, compiled per shape)."""
    return tf.function(fn, jit_compile=True, reduce_retracing=True, autograph=False)
