"""Where the time of one ALBERT-base pretraining step goes: op and cast counts of the
step's graph, and per-op-type time from TensorFlow's profiler.

The step is the one ``pretraining_step.py`` times (same Trainer, data, optimizer and
workload).  Printed:

- op counts of one training step's graph (the loop body: forward, backward, clip,
  LAMB update), by op type, with Cast split by direction (float32->bfloat16, ...).
  They are exact and do not depend on the CPU: counts made here hold on an AMX machine.
- per-op-type time of ``--steps`` steps under ``tf.profiler.experimental``: each op's
  own time (its span on the executor thread minus nested spans), summed by op type, per
  step, and its share of all op time; the XLA-compiled functions (`albert_tf.fused`: GELU,
  residual LayerNorm, bf16 attention softmax, the optimizer's update) as one row.  Times
  depend on the CPU and on the load of a shared machine; on CPUs without AMX/AVX512_BF16,
  bf16 times say nothing about bf16 hardware.

  .venv/bin/python benchmarks/profile_step.py --precision fp32
  .venv/bin/python benchmarks/profile_step.py --precision bf16 --steps 1 --top 30
  .venv/bin/python benchmarks/profile_step.py --precision bf16 --counts_only   # no timing
"""
from __future__ import annotations

from albert_tf.startup import quiet_startup  # before TensorFlow: hides its start-up lines

quiet_startup()

import argparse
import collections
import glob
import os
import re
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import cpu_info, isa_note  # noqa: E402
from workload import XLA_SETTINGS, add_step_flags, build_trainer, train_more  # noqa: E402

# "<node name>:<OpType>" as the executor names its spans (not "Class::method" spans).
_OP_SPAN = re.compile(r"^(?P<node>[^:]+(?::[^:]+)*?):(?P<type>[A-Za-z_][A-Za-z0-9_]*)$")
# One run of an XLA-compiled function (`albert_tf.fused`): no op span names it, this span does.
_COMPILED_SPAN, COMPILED = "CpuExecutable::ExecuteAsyncOnStream", "XLA-compiled functions"
_DTYPES = {1: "f32", 2: "f64", 3: "i32", 9: "i64", 14: "bf16", 19: "f16", 10: "bool"}
MATMULS = ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum", "_FusedMatMul", "_MklMatMul",
           "_MklNativeFusedMatMul", "_MklFusedMatMul", "_MklBatchMatMulV2", "_MklEinsum",
           "_MklNativeBatchMatMulV2", "_FusedBatchMatMulV2", "_MklFusedBatchMatMulV2")


def graph_op_counts(function) -> collections.Counter:
    """Op types in a traced tf.function's graph and every function it calls (each
    function body once: the loop body counts as one step).  Casts as Cast f32->bf16 etc."""
    counts: collections.Counter = collections.Counter()
    concrete = function._list_all_concrete_functions()  # no public API lists the traces
    graph_def = concrete[-1].graph.as_graph_def()
    nodes = list(graph_def.node)
    for fn in graph_def.library.function:
        nodes.extend(fn.node_def)
    for node in nodes:
        op = node.op
        if op == "Cast":
            src = _DTYPES.get(node.attr["SrcT"].type, str(node.attr["SrcT"].type))
            dst = _DTYPES.get(node.attr["DstT"].type, str(node.attr["DstT"].type))
            op = f"Cast {src}->{dst}"
        counts[op] += 1
    return counts


# Ops that hand on their input's buffer (or only metadata) instead of computing.
_VIEWS = ("Const", "Placeholder", "ReadVariableOp", "Identity", "IdentityN", "Reshape", "Squeeze",
          "ExpandDims", "StopGradient", "Shape", "ShapeN", "NoOp", "VarHandleOp", "ResourceGather",
          "BroadcastGradientArgs", "Size", "Rank")


def gradient_graph(trainer):
    """The graph of one forward + backward pass of the trainer's task (model, loss, gradients;
    no optimizer), traced on one real batch so every shape is static."""
    import tensorflow as tf

    features = next(iter(trainer.task.train_dataset_fn(trainer._input_context())))
    model, loss_fn = trainer.model, trainer.task.loss_fn

    @tf.function
    def forward_backward(features):
        with tf.GradientTape() as tape:
            loss = loss_fn(model, features, True)
            loss = loss[0] if isinstance(loss, tuple) else loss
        return tape.gradient(loss, model.trainable_variables)

    return forward_backward.get_concrete_function(features).graph


def _elements(tensor) -> int:
    n = tensor.shape.num_elements()
    return 0 if n is None else n


def _reads_variable(tensor, depth: int = 4) -> bool:
    """Whether `tensor` is a variable's value (through a few identity-like ops)."""
    op = tensor.op
    for _ in range(depth):
        if op.type in ("ReadVariableOp", "VarHandleOp"):
            return True
        if op.type not in ("Identity", "Cast") or not op.inputs:
            return False
        op = op.inputs[0].op
    return False


def _live_ops(graph) -> list:
    """The ops the graph's outputs depend on (TensorFlow prunes the others before running)."""
    seen, stack = set(), [t.op for t in graph.outputs] + list(getattr(graph, "control_outputs", []))
    while stack:
        op = stack.pop()
        if op.name in seen:
            continue
        seen.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return [op for op in graph.get_operations() if op.name in seen]


def graph_volumes(graph) -> dict:
    """Per op type of a forward + backward graph: count, MB read + written (views excluded),
    matmul GFLOP; casts split by direction and by what they cast (weights / activations).
    Only ops that the outputs depend on count."""
    per_type: dict[str, list] = collections.defaultdict(lambda: [0, 0.0])
    casts: dict[str, list] = collections.defaultdict(lambda: [0, 0])
    gflop = 0.0
    for op in _live_ops(graph):
        if op.type in _VIEWS:
            continue
        moved = sum(_elements(t) * t.dtype.size for t in list(op.inputs) + list(op.outputs)
                    if t.dtype.is_floating or t.dtype.is_integer)
        per_type[op.type][0] += 1
        per_type[op.type][1] += moved / 2**20
        if op.type in ("MatMul", "BatchMatMulV2", "BatchMatMulV3", "Einsum") and op.outputs:
            # 2 * output elements * contracted length; the contracted length from the first input.
            out = op.outputs[0]
            first = op.inputs[0].shape
            if op.type == "Einsum":
                spec = op.get_attr("equation").decode()
                lhs, result = spec.split("->")
                a = lhs.split(",")[0]
                contracted = [first[i] for i, c in enumerate(a) if c not in result]
                k = 1
                for d in contracted:
                    k *= d
            else:
                transpose = op.get_attr("transpose_a" if op.type == "MatMul" else "adj_x")
                k = first[-2] if transpose else first[-1]
            gflop += 2 * _elements(out) * k / 1e9
        if op.type == "Cast":
            src, dst = op.inputs[0].dtype.name, op.outputs[0].dtype.name
            what = "weights" if _reads_variable(op.inputs[0]) else "activations/grads"
            key = f"{src}->{dst} {what}"
            casts[key][0] += 1
            casts[key][1] += _elements(op.outputs[0])
    return {"per_type": dict(per_type), "casts": dict(casts), "gflop": gflop}


def print_volumes(volumes: dict, top: int) -> None:
    per_type = volumes["per_type"]
    total = sum(mb for _, mb in per_type.values())
    print(f"\nforward + backward graph (no optimizer): {sum(n for n, _ in per_type.values())} computing ops, "
          f"{volumes['gflop']:.1f} matmul GFLOP, {total / 1024:.2f} GiB read + written by all ops")
    print(f"  {'op type':<24} {'ops':>5} {'MiB moved':>10} {'share':>6}")
    for kind, (n, mb) in sorted(per_type.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {kind:<24} {n:>5} {mb:>10.0f} {100 * mb / total:>5.1f}%")
    print("  casts (count, million elements): " + ", ".join(
        f"{k} {n} ({e / 1e6:.1f} M)" for k, (n, e) in sorted(volumes["casts"].items(), key=lambda kv: -kv[1][1])))


def load_xspace(logdir: str):
    """The XSpace that ``tf.profiler.experimental`` last wrote under `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    paths = sorted(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
    if not paths:
        raise RuntimeError(f"the profiler wrote no .xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    with open(paths[-1], "rb") as f:
        space.ParseFromString(f.read())
    return space


def profile_op_times(logdir: str) -> dict[str, tuple[int, float]]:
    """{op type: (executions, own seconds)} from the profiler's XSpace under `logdir`; the runs
    of XLA-compiled functions under `COMPILED`."""
    space = load_xspace(logdir)
    totals: dict[str, list] = collections.defaultdict(lambda: [0, 0])
    for plane in space.planes:
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            spans = []
            for event in line.events:
                name = names.get(event.metadata_id, "")
                match = _OP_SPAN.match(name)
                kind = match["type"] if match else COMPILED if name == _COMPILED_SPAN else None
                if kind and event.duration_ps > 0:
                    spans.append((event.offset_ps, event.offset_ps + event.duration_ps, kind))
            spans.sort(key=lambda s: (s[0], -s[1]))
            # Own time: a span's length minus the spans nested in it on the same thread.
            stack: list[list] = []  # [end, type, own]
            for start, end, kind in spans:
                while stack and stack[-1][0] <= start:
                    done = stack.pop()
                    totals[done[1]][1] += done[2]
                if stack:
                    stack[-1][2] -= end - start
                stack.append([end, kind, end - start])
                totals[kind][0] += 1
            for done in stack:
                totals[done[1]][1] += done[2]
    return {kind: (count, ps / 1e12) for kind, (count, ps) in totals.items()}


def print_counts(counts: collections.Counter, top: int) -> None:
    casts = {k: v for k, v in counts.items() if k.startswith("Cast ")}
    matmuls = sum(v for k, v in counts.items() if k in MATMULS)
    print(f"\nop counts of one training step's graph: {sum(counts.values())} ops, "
          f"{matmuls} matmul-type, {sum(casts.values())} casts")
    print("  casts: " + (", ".join(f"{k[5:]} {v}" for k, v in sorted(casts.items(), key=lambda kv: -kv[1]))
                         or "none"))
    for kind, n in counts.most_common(top):
        print(f"  {kind:<32} {n:>6}")


def print_times(times: dict[str, tuple[int, float]], steps: int, seconds_per_step: float, top: int,
                unit: str = "step") -> None:
    total = sum(t for _, t in times.values())
    print(f"\nper-op-type own time, {steps} profiled {unit}(s) ({seconds_per_step:.2f} s/{unit} while profiling; "
          f"op time {total / steps:.2f} s/{unit}):")
    print(f"  {'op type':<32} {'runs/' + unit:>9} {'s/' + unit:>8} {'share':>6}")
    groups = collections.Counter()
    for kind, (count, seconds) in sorted(times.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {kind:<32} {count / steps:>9.0f} {seconds / steps:>8.3f} {100 * seconds / total:>5.1f}%")
    for kind, (_, seconds) in times.items():
        groups["matmul" if kind in MATMULS else "cast" if kind == "Cast" else "compiled" if kind == COMPILED
               else "other"] += seconds
    print("  groups: " + ", ".join(f"{g} {100 * s / total:.1f}%" for g, s in groups.most_common()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    parser.add_argument("--xla", choices=XLA_SETTINGS, default="off",
                        help="--enable_xla of the loop (on: the loop's rule may turn it off for bf16 on CPU)")
    parser.add_argument("--steps", type=int, default=2, help="profiled steps (after one warm-up step)")
    parser.add_argument("--counts_only", action="store_true", help="op counts only, no profiled steps")
    parser.add_argument("--top", type=int, default=25, help="rows of each table")
    add_step_flags(parser)
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be >= 1")

    import tensorflow as tf

    info = cpu_info()
    print(f"CPU: {info['model']}; {isa_note(info)}")
    print(f"load average: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="albert_profile_") as tmp:
        trainer, policy = build_trainer(args, tmp)
        first = train_more(trainer, 1)
        print(f"policy {policy}, XLA {args.xla} (compiled: {trainer.xla_compiled}); warm-up step {first:.1f} s (incl. tracing)")
        print_counts(graph_op_counts(trainer._train_fn), args.top)
        print_volumes(graph_volumes(gradient_graph(trainer)), args.top)
        if args.counts_only:
            return
        logdir = os.path.join(tmp, "profile")
        tf.profiler.experimental.start(logdir)
        try:
            seconds_per_step = train_more(trainer, args.steps)
        finally:
            tf.profiler.experimental.stop()
        print_times(profile_op_times(logdir), args.steps, seconds_per_step, args.top)


if __name__ == "__main__":
    main()
