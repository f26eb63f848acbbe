"""Benchmark ALBERT-base encoder inference: examples/s of one forward pass (batch 32,
sequence 128 by default), ours against HuggingFace transformers' PyTorch AlbertModel in the
same run.

Ours is timed two ways, fp32 and bf16 (Keras ``mixed_bfloat16``):
- ``api``: the public API, ``AlbertModel(config)`` called inside a ``tf.function``
  (``training=False``), outputs ``sequence_output`` and ``pooled_output``;
- ``savedmodel``: ``export_hub_module`` writes a SavedModel (to a temp dir; the bf16 row with
  ``serving_precision="bfloat16"``, exports being float32 by default), which is
  reloaded with ``tf.saved_model.load`` and called through its ``tokens`` serving
  signature (input_ids, input_mask, segment_ids -> sequence_output, pooled_output).
HF (``--compare``): ``transformers.AlbertModel`` with the albert-base-v2 config built locally,
under ``torch.inference_mode()``; fp32, and bf16 under ``torch.autocast("cpu", bfloat16)``.
Weights are random (speed does not depend on them).  Every configuration runs in its own
process (Keras policies are global); ours/HF compares the same precision in the same round.

bf16 only has a fast path on CPUs with AMX or AVX512_BF16 (the header says which): on
others bf16 is emulated and its figures say nothing about the bf16 target.

  .venv/bin/python benchmarks/inference.py --compare                         # fp32 + bf16
  .venv/bin/python benchmarks/inference.py --compare --precisions fp32 --rounds 2
  .venv/bin/python benchmarks/inference.py --precisions bf16 --ways api --profile 2   # + per-op-type time
Peers: python3 -m venv .peer-venv && .peer-venv/bin/pip install -r benchmarks/requirements.txt
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (CpuUsage, check_peers, worker_command, comma_list, isa_note, median, print_machine, rss_mb,  # noqa: E402
                     write_result)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRECISIONS = ("fp32", "bf16")
WAYS = ("api", "savedmodel")
DEFAULT_SPM = os.path.join(os.path.dirname(REPO), "shared", "data", "spm", "30k-clean.model")


def batch(args, seed: int = 0):
    """Random full-length token ids, two segments, no padding (numpy, int32)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 30000, [args.batch_size, args.seq_length]).astype(np.int32)
    segments = (np.arange(args.seq_length)[None, :] >= args.seq_length // 2).astype(np.int32)
    return {"input_ids": ids, "input_mask": np.ones_like(ids),
            "segment_ids": np.repeat(segments, args.batch_size, axis=0)}


def time_calls(call, args) -> dict:
    """Warm-up, then `--steps` timed calls; seconds per call and cores busy."""
    for _ in range(args.warmup):
        call()
    usage, times = CpuUsage(), []
    for _ in range(args.steps):
        start = time.perf_counter()
        with usage:
            call()
        times.append(time.perf_counter() - start)
    return {"seconds": median(times), "best": min(times), "cores_busy": usage.cores_busy(),
            "peak_rss_mb": rss_mb("VmHWM")}


def run_ours(args) -> dict:
    import tensorflow as tf

    from albert_tf import AlbertConfig, AlbertModel, AlbertPretrainer
    from albert_tf.training import set_mixed_precision

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    policy = set_mixed_precision("bf16" if args.precision == "bf16" else "none")
    config = AlbertConfig.preset("base", 2)
    inputs = {k: tf.constant(v) for k, v in batch(args).items()}
    if args.way == "api":
        model = AlbertModel(config)

        @tf.function
        def forward(inputs):
            out = model(inputs, training=False)
            return out["sequence_output"], out["pooled_output"]

        def call():
            forward(inputs)[1].numpy()
    else:
        import tensorflow_text  # noqa: F401  (the serving graph holds its tokenizer ops)

        from albert_tf.export import export_hub_module
        from albert_tf.modeling.models import build

        pretrainer = build(AlbertPretrainer(config))  # heads too: their weights are in the export
        with tempfile.TemporaryDirectory(prefix="albert_bench_export_") as tmp:
            # Exports compute in float32 unless asked (--serving_precision): the bf16 row asks.
            precision = "bfloat16" if args.precision == "bf16" else "float32"
            path = export_hub_module(pretrainer, os.path.join(tmp, "module"), spm_model_file=args.spm_model_file,
                                     serving_precision=precision)
            del pretrainer
            signature = tf.saved_model.load(path).signatures["tokens"]

        def call():
            signature(**inputs)["pooled_output"].numpy()

    result = time_calls(call, args)
    if args.profile:
        result["op_times"] = profile_calls(call, args.profile)
    return {**result, "impl": "ours", "way": args.way, "precision": args.precision, "policy": policy,
            "versions": {"tensorflow": tf.__version__}}


def profile_calls(call, calls: int) -> dict:
    """Seconds per call while profiling and {op type: (runs, own seconds)} of `calls` calls under
    TensorFlow's profiler (profile_step.py's per-op-type own time), after the timed calls."""
    import tensorflow as tf

    from profile_step import profile_op_times

    with tempfile.TemporaryDirectory(prefix="albert_bench_profile_") as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            start = time.perf_counter()
            for _ in range(calls):
                call()
            seconds = (time.perf_counter() - start) / calls
        finally:
            tf.profiler.experimental.stop()
        return {"seconds_per_call": seconds, "times": profile_op_times(logdir)}


def run_hf(args) -> dict:
    import contextlib

    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    config = transformers.AlbertConfig(
        vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, hidden_act="gelu_new", hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
        max_position_embeddings=512, type_vocab_size=2, initializer_range=0.02)  # albert-base-v2
    model = transformers.AlbertModel(config).eval()
    data = {k: torch.from_numpy(v.astype("int64")) for k, v in batch(args).items()}
    inputs = {"input_ids": data["input_ids"], "attention_mask": data["input_mask"],
              "token_type_ids": data["segment_ids"]}
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if args.precision == "bf16"
                else contextlib.nullcontext())

    def call():
        with torch.inference_mode(), autocast:
            model(**inputs).pooler_output.float().numpy()

    result = time_calls(call, args)
    return {**result, "impl": "hf", "way": "-", "precision": args.precision, "policy": "-",
            "attention": getattr(model.config, "_attn_implementation", "?"),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__}}


def run_config(args, impl: str, way: str, precision: str, tmp: str, round_index: int) -> dict | None:
    print(f"== round {round_index + 1}/{args.rounds}: {impl} {way} {precision} (load {os.getloadavg()[0]:.1f})",
          flush=True)
    result_path = os.path.join(tmp, f"{impl}-{way}-{precision}-{round_index}.json")
    python, env = worker_command(impl == "hf")
    command = [*python, os.path.abspath(__file__), "--worker", impl, "--way", way, "--precision", precision,
               "--result", result_path, "--spm_model_file", args.spm_model_file]
    for name in ("steps", "warmup", "batch_size", "seq_length", "threads", "seed", "profile"):
        command += [f"--{name}", str(getattr(args, name))]
    env["TF_CPP_MIN_LOG_LEVEL"] = os.environ.get("TF_CPP_MIN_LOG_LEVEL", "3")
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode != 0 or not os.path.exists(result_path):
        print(f"  FAILED (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
        return None
    with open(result_path, encoding="utf-8") as f:
        result = json.load(f)
    result["round"] = round_index
    print(f"  {args.batch_size / result['seconds']:.2f} ex/s ({result['seconds']:.3f} s/batch, "
          f"{result['cores_busy']:.2f} cores, peak RSS {result['peak_rss_mb']:.0f} MiB)", flush=True)
    if "op_times" in result:
        from profile_step import print_times

        profile = result.pop("op_times")
        print_times({k: tuple(v) for k, v in profile["times"].items()}, args.profile,
                    profile["seconds_per_call"], top=15, unit="call")
    return result


def print_table(rows: list[dict], args) -> None:
    hf = {(r["round"], r["precision"]): r["seconds"] for r in rows if r["impl"] == "hf"}
    configs: dict[tuple, list[dict]] = {}
    for r in rows:
        configs.setdefault((r["impl"], r["way"], r["precision"]), []).append(r)
    print(f"\nALBERT-base encoder forward, batch {args.batch_size}, seq {args.seq_length}, {args.rounds} round(s)")
    header = (f"{'impl':<5} {'way':<10} {'prec':<5} {'s/batch':>8} {'ex/s':>7} {'best ex/s':>9} {'cores':>5} "
              f"{'ours/HF':>7} {'peak RSS MB':>11}")
    print(header)
    print("-" * len(header))
    for (impl, way, precision), runs in configs.items():
        seconds = median([r["seconds"] for r in runs])
        ratios = [hf[(r["round"], precision)] / r["seconds"] for r in runs
                  if impl == "ours" and (r["round"], precision) in hf]
        print(f"{impl:<5} {way:<10} {precision:<5} {seconds:>8.3f} {args.batch_size / seconds:>7.2f} "
              f"{args.batch_size / min(r['best'] for r in runs):>9.2f} "
              f"{median([r['cores_busy'] for r in runs]):>5.2f} "
              f"{(f'{median(ratios):.2f}x' if ratios else '-'):>7} {max(r['peak_rss_mb'] for r in runs):>11.0f}")
    print("s/batch: median over rounds of the median timed call; ours/HF: HF s/batch / ours at the same precision "
          "in the same round (> 1: ours faster), median over rounds.  Target (issue 12, for an AMX CPU): "
          "bf16 >= 1.7x HF.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precisions", default="fp32,bf16", help="comma list of fp32, bf16")
    parser.add_argument("--ways", default="api,savedmodel", help="comma list of api, savedmodel (ours)")
    parser.add_argument("--compare", action="store_true", help="also run HF transformers' PyTorch AlbertModel")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--steps", type=int, default=10, help="timed forward calls per configuration")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads of both frameworks; 0: defaults")
    parser.add_argument("--spm_model_file", default=DEFAULT_SPM,
                        help="SentencePiece model with 30000 pieces, stored in the exported SavedModel")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--profile", type=int, default=0,
                        help="ours: after timing, profile this many calls and print per-op-type time")
    parser.add_argument("--worker", choices=("ours", "hf"), help=argparse.SUPPRESS)
    parser.add_argument("--way", default="api", help=argparse.SUPPRESS)
    parser.add_argument("--precision", choices=PRECISIONS, help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name in ("rounds", "steps", "batch_size", "seq_length"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")

    if args.worker:
        result = run_ours(args) if args.worker == "ours" else run_hf(args)
        write_result(args.result, result)
        return

    precisions = comma_list(parser, "precisions", args.precisions, PRECISIONS)
    ways = comma_list(parser, "ways", args.ways, WAYS)
    if "savedmodel" in ways and not os.path.exists(args.spm_model_file):
        parser.error(f"--spm_model_file: {args.spm_model_file} not found (needed to export the SavedModel)")
    if args.compare:
        check_peers(parser)

    info = print_machine()
    print(f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="albert_bench_inference_") as tmp:
        for round_index in range(args.rounds):
            for precision in precisions:
                jobs = [("ours", way) for way in ways] + ([("hf", "-")] if args.compare else [])
                if round_index % 2:
                    jobs.reverse()
                for impl, way in jobs:
                    result = run_config(args, impl, way, precision, tmp, round_index)
                    if result:
                        rows.append(result)
    print(f"\nload average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    versions = {}
    for r in rows:
        versions.update(r["versions"])
    print("versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    if rows:
        print_table(rows, args)
    print(f"ISA: {isa_note(info)}")


if __name__ == "__main__":
    main()
