"""Benchmark fine-tuning and serving at the batch's length: ours against Hugging Face (issue 23).

Workload: ALBERT-base shapes (albert-base-v2: V 30000, E 128, H 768, 12 layers, 12 heads,
I 3072, encoder dropout ``--dropout``, head dropout 0.1), a binary classifier on the real
sentences of a GLUE training file (``--task``, default SST-2 under ``--data_dir``; rows
tokenized with Google's 30k-clean SentencePiece model), batch 32, ``--max_seq_length`` 128,
AdamW, forward + backward + clip + update, float32 and bf16.

Training configurations (each in its own subprocess, all on the same random batches):
- ``ours trim``: ``albert_tf.training.Trainer`` with a ``GlueClassifier``, batches cut by
  ``albert_tf.data.batching.trim_to_longest`` (longest row rounded up to ``--multiple``);
- ``ours pad``: the same, every batch at max_seq_length (the original's ``run_classifier.py``);
- ``hf longest``: transformers' ``AlbertForSequenceClassification``, batches made by
  ``DataCollatorWithPadding`` (Trainer's default: pad to the batch's longest row);
- ``hf pad``: the same collator with ``padding="max_length"``;
- with ``--group_by_length``: ``ours group`` (our seeded sampler, ``group_by_length_order``,
  then ``trim_to_longest``) against ``hf group`` (transformers' ``LengthGroupedSampler``,
  what ``TrainingArguments(group_by_length=True)`` uses); each side's own first batches.

Serving (float32): the exported classifier's ``serving_text`` signature (in-graph
SentencePiece, packs each request to its longest row) against the HF tokenizer (an
``AlbertTokenizer`` built from the same 30k-clean.model, no hub access) + model, on a batch
of 1 and of 32 sentences; median latency.

Warm-up: each side first runs the very batches it is timed on (tracing, and the per-shape
set-up of oneDNN kernels: torch pays it again at every new batch width, as a long run would
only at first), then runs them again, timed.  Figures are examples/s (and ms per request);
ratios are ours over HF within one run. The
machine may be shared: print ``uptime`` with the figures and compare only within a run.

  .venv/bin/python benchmarks/finetune.py --task=cola              # CoLA's sentences
  .venv/bin/python benchmarks/finetune.py --group_by_length --steps 8
  .venv/bin/python benchmarks/finetune.py --task=cola --precisions bf16 --profile 2   # + where ours spends it
Peers: python3 -m venv .peer-venv && .peer-venv/bin/pip install -r benchmarks/requirements.txt
"""
from __future__ import annotations

from albert_tf.startup import quiet_startup  # before TensorFlow: hides its start-up lines

quiet_startup()

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import cpu_info, isa_note, worker_command, write_result  # noqa: E402
import matmul_ceiling  # noqa: E402
from workload import classifier_step_gflop, hf_train_step  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")
TRAIN_MODES = {"ours": ("trim", "pad", "group"), "hf": ("longest", "pad", "group")}
BASE = dict(vocab_size=30000, embedding_size=128, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
            intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2,
            initializer_range=0.02)  # albert-base-v2
HF_BASE = dict(BASE, hidden_act="gelu_new")  # the original's tanh-approximated GELU: ours "gelu", HF "gelu_new"


# ---------------------------------------------------------------- data (main process)
def load_rows(args) -> dict:
    """The task's training rows as unpadded ids: {"ids": [[...]], "segments": [[...]], "labels": [...]}."""
    from albert_tf.glue.features import convert_example
    from albert_tf.glue.processors import get_processor
    from albert_tf.tokenization import FullTokenizer

    processor = get_processor(args.task)
    path = processor.data_file(args.data_dir, "train")
    if not os.path.isfile(path):
        sys.exit(f"error: {path}: no {args.task} training file (--data_dir/--task; ../shared has CoLA, "
                 f"MRPC, RTE, STS-B)")
    tokenizer = FullTokenizer(spm_model_file=args.spm_model_file, do_lower_case=True)
    rows = {"ids": [], "segments": [], "labels": [], "texts": []}
    labels = processor.get_labels()
    for example in processor.iter_examples(args.data_dir, "train"):
        f = convert_example(example, processor.spec, args.max_seq_length, tokenizer)
        length = sum(f.input_mask)
        rows["ids"].append(f.input_ids[:length])
        rows["segments"].append(f.segment_ids[:length])
        rows["labels"].append(labels.index(example.label) % 2 if labels != [None] else 0)
        rows["texts"].append(example.text_a)
    return rows


def plan_batches(args, lengths: np.ndarray) -> dict:
    """Example indices per step for every mode: random batches (shared) and each side's grouped ones."""
    from albert_tf.data.batching import group_by_length_order

    steps, b = args.steps, args.batch_size
    rng = np.random.default_rng(args.seed)
    random = np.stack([rng.choice(len(lengths), b, replace=False) for _ in range(steps)])
    ours = group_by_length_order(lengths, b, args.seed, 0).numpy()[:steps * b].reshape(steps, b)
    theirs = np.array(hf_group_order(lengths, b, args.seed)[:steps * b]).reshape(steps, b)
    return {"random": random.tolist(), "ours_group": ours.tolist(), "hf_group": theirs.tolist()}


def hf_group_order(lengths: np.ndarray, batch_size: int, seed: int) -> list[int]:
    """transformers' LengthGroupedSampler order, drawn in the peer's Python (torch lives there)."""
    python, env = worker_command(True)
    code = ("import json, sys, torch\n"
            "from transformers.trainer_pt_utils import LengthGroupedSampler\n"
            "a = json.load(sys.stdin)\n"
            "g = torch.Generator().manual_seed(a['seed'])\n"
            "print(json.dumps(list(LengthGroupedSampler(a['batch'], lengths=a['lengths'], generator=g))))")
    request = json.dumps({"lengths": lengths.tolist(), "batch": batch_size, "seed": seed})
    done = subprocess.run([*python, "-c", code], input=request, env=env, capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"error: transformers' LengthGroupedSampler failed in {python[0]}:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout)


# ---------------------------------------------------------------- workers
def padded(rows: dict, indices, width: int) -> dict:
    ids = np.zeros([len(indices), width], np.int32)
    segments, mask = np.zeros_like(ids), np.zeros_like(ids)
    for r, i in enumerate(indices):
        n = len(rows["ids"][i])
        ids[r, :n], segments[r, :n], mask[r, :n] = rows["ids"][i], rows["segments"][i], 1
    return {"input_ids": ids, "segment_ids": segments, "input_mask": mask,
            "label_ids": np.array([rows["labels"][i] for i in indices], np.int32)}


def run_ours(args, rows, batches, tmp) -> dict:
    import tensorflow as tf

    from albert_tf import AlbertConfig
    from albert_tf.data.batching import trim_to_longest
    from albert_tf.glue.heads import GlueClassifier
    from albert_tf.glue.processors import get_processor
    from albert_tf.glue.task import GlueTask
    from albert_tf.modeling.encoder import AlbertModel
    from albert_tf.training import Task, TrainConfig, Trainer, create_optimizer, set_mixed_precision
    from workload import train_more

    policy = set_mixed_precision("bf16" if args.precision == "bf16" else "none")
    config = AlbertConfig(**BASE, hidden_dropout_prob=args.dropout, attention_probs_dropout_prob=args.dropout)
    data = padded(rows, np.concatenate(batches), args.max_seq_length)
    data["is_real_example"] = np.ones_like(data["label_ids"])

    def dataset_fn(context):
        ds = tf.data.Dataset.from_tensor_slices(data).batch(args.batch_size, drop_remainder=True)
        if args.mode != "pad":
            ds = ds.map(lambda batch: trim_to_longest(batch, multiple=args.multiple))
        return ds.repeat().prefetch(2)

    glue = GlueTask(processor=get_processor("cola"), data_dir="", features_dir="", tokenizer=None, tokenizer_id="",
                    max_seq_length=args.max_seq_length)  # its loss: what run_classifier.py trains with
    task = Task(build_model=lambda: GlueClassifier(AlbertModel(config), 2), loss_fn=glue.loss,
                train_dataset_fn=dataset_fn)
    train_config = TrainConfig(
        output_dir=os.path.join(tmp, "out"), num_train_steps=1, train_batch_size=args.batch_size, steps_per_loop=1,
        save_checkpoints_steps=10**9, keep_checkpoint_max=1, log_steps=10**9, seed=args.seed, handle_signals=False)
    trainer = Trainer(task, tf.distribute.OneDeviceStrategy("/cpu:0"), lambda: create_optimizer(
        2e-5, 10**6, 0, "adamw"), train_config)
    train_more(trainer, args.steps)  # warm-up: the same batches (the dataset repeats them)
    seconds = train_more(trainer, args.steps)
    if args.profile and args.mode == "trim":
        profiled(lambda: train_more(trainer, args.profile), args.profile, "step", tmp)
    return {"policy": policy, "seconds_per_step": seconds}


def profiled(run, count: int, unit: str, tmp: str) -> None:
    """Per-op-type own time of `run()` (``count`` steps or requests) from TensorFlow's profiler."""
    import tensorflow as tf
    from profile_step import print_times, profile_op_times

    logdir = os.path.join(tmp, "profile")
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    try:
        run()
    finally:
        tf.profiler.experimental.stop()
    print_times(profile_op_times(logdir), count, (time.perf_counter() - start) / count, 12, unit=unit)


def run_hf(args, rows, batches, spm) -> dict:
    import contextlib

    import torch
    import transformers

    torch.manual_seed(args.seed)
    config = transformers.AlbertConfig(**HF_BASE, hidden_dropout_prob=args.dropout,
                                       attention_probs_dropout_prob=args.dropout, classifier_dropout_prob=0.1,
                                       num_labels=2)
    model = transformers.AlbertForSequenceClassification(config)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01, eps=1e-6)
    tokenizer = transformers.AlbertTokenizer(spm)
    padding = {"padding": "max_length", "max_length": args.max_seq_length} if args.mode == "pad" else {}
    collator = transformers.DataCollatorWithPadding(tokenizer, **padding)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if args.precision == "bf16" \
        else contextlib.nullcontext
    times = []
    for indices in batches + batches:  # the first pass warms up
        start = time.perf_counter()
        batch = collator([{"input_ids": rows["ids"][i], "token_type_ids": rows["segments"][i],
                           "attention_mask": [1] * len(rows["ids"][i]), "labels": rows["labels"][i]}
                          for i in indices])
        hf_train_step(model, optimizer, batch, autocast)
        times.append(time.perf_counter() - start)
    return {"seconds_per_step": sum(times[len(batches):]) / len(batches), "torch": torch.__version__,
            "transformers": transformers.__version__}


def run_serving(args, rows, spm, tmp) -> dict:
    """Median ms per request of 1 and of 32 sentences, float32."""
    texts = {n: [rows["texts"][i] for i in np.random.default_rng(args.seed).choice(len(rows["texts"]), n)]
             for n in (1, 32)}
    if args.impl == "ours":
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the loaded signature)

        from albert_tf import AlbertConfig
        from albert_tf.glue.export import export_classifier
        from albert_tf.glue.heads import GlueClassifier
        from albert_tf.glue.processors import get_task_spec

        model = GlueClassifier(AlbertConfig(**BASE), 2)
        model(model.dummy_inputs())
        path = export_classifier(model, get_task_spec("sst-2"), os.path.join(tmp, "export"), args.max_seq_length, spm)
        signature = tf.saved_model.load(path).signatures["serving_text"]
        run = lambda batch: signature(text_a=tf.constant(batch))["probabilities"].numpy()  # noqa: E731
    else:
        import torch
        import transformers

        model = transformers.AlbertForSequenceClassification(transformers.AlbertConfig(**HF_BASE, num_labels=2)).eval()
        tokenizer = transformers.AlbertTokenizer(spm)

        def run(batch):
            with torch.no_grad():
                inputs = tokenizer(batch, padding=True, truncation=True, max_length=args.max_seq_length,
                                   return_tensors="pt")
                return model(**inputs).logits.softmax(-1).numpy()
    result = {}
    for n, batch in texts.items():
        for _ in range(3):
            run(batch)
        times = []
        for _ in range(args.serving_repeats):
            start = time.perf_counter()
            run(batch)
            times.append(time.perf_counter() - start)
        result[f"ms_batch_{n}"] = 1000 * float(np.median(times))
        if args.profile and args.impl == "ours":
            print(f"   ours serving, batch of {n}:")
            profiled(lambda: [run(batch) for _ in range(args.profile)], args.profile, "request", tmp)
    return result


def worker_main(args) -> None:
    with open(args.data, encoding="utf-8") as f:
        shared = json.load(f)
    rows, batches = shared["rows"], shared["batches"].get(args.batches)
    with tempfile.TemporaryDirectory(prefix="albert_finetune_") as tmp:
        if args.mode == "serve":
            result = run_serving(args, rows, args.spm_model_file, tmp)
        elif args.impl == "ours":
            result = run_ours(args, rows, batches, tmp)
        else:
            result = run_hf(args, rows, batches, args.spm_model_file)
    write_result(args.result, result)


# ---------------------------------------------------------------- driver
def run_config(args, data: str, impl: str, mode: str, precision: str, batches: str, tmp: str) -> dict:
    result = os.path.join(tmp, f"{impl}-{mode}-{precision}.json")
    python, env = worker_command(impl == "hf")
    command = [*python, os.path.abspath(__file__), "--worker", "--impl", impl, "--mode", mode,
               "--precision", precision, "--batches", batches, "--data", data, "--result", result,
               *[f"--{k}={v}" for k, v in vars(args).items()
                 if k in ("batch_size", "max_seq_length", "steps", "seed", "multiple", "dropout",
                          "serving_repeats", "spm_model_file", "profile")]]
    print(f"-- {impl} {mode} {precision} (load {os.getloadavg()[0]:.1f})", flush=True)
    done = subprocess.run(command, env=dict(env, TF_CPP_MIN_LOG_LEVEL="3"))
    if done.returncode != 0:
        sys.exit(f"error: the {impl} {mode} {precision} worker failed (exit {done.returncode})")
    with open(result, encoding="utf-8") as f:
        return json.load(f)


def batch_widths(rows: dict, batches, multiple: int, limit: int) -> list[int]:
    """Each batch's length cut to its longest row: rounded up to ``multiple``, at most ``limit``."""
    widths = [max(len(rows["ids"][i]) for i in b) for b in batches]
    return [min(-(-w // multiple) * multiple, limit) for w in widths]


def mean_width(rows: dict, batches, multiple: int, limit: int) -> float:
    return float(np.mean(batch_widths(rows, batches, multiple, limit)))


def ceiling_rates(args, rows: dict, batches, tmp: str) -> dict:
    """Per precision: (TF's matmul ceiling at the timed batches' mean rows, the batches' mean matmul
    GFLOP per step, the rows).  Timed before the configurations run, on the machine as ours finds it."""
    widths = batch_widths(rows, batches, args.multiple, args.max_seq_length)
    gflop = float(np.mean([classifier_step_gflop(BASE["embedding_size"], BASE["hidden_size"],
                                                 BASE["num_hidden_layers"], BASE["intermediate_size"],
                                                 args.batch_size, width) for width in widths]))
    rows_per_step = round(args.batch_size * float(np.mean(widths)))
    return {precision: (matmul_ceiling.tf_training_rate(precision, rows_per_step, tmp, rounds=args.ceiling_rounds),
                        gflop, rows_per_step) for precision in args.precisions.split(",")}


def ceiling_shares(ceilings: dict, results: dict) -> list[str]:
    """Ours trim's step as a share of the step time TF's matmul ceiling allows (issue 33)."""
    lines = []
    for precision, (rate, gflop, rows_per_step) in ceilings.items():
        if rate is None:
            continue
        ours = results[("ours", "trim", precision)]["seconds_per_step"]
        lines.append(f"{precision}: TF's matmul ceiling {rate:.0f} GFLOP/s at {rows_per_step} rows: {gflop:.1f} "
                     f"GFLOP/step in {gflop / rate:.3f} s/step; ours trim {ours:.3f} s/step = "
                     f"{100 * gflop / rate / ours:.0f}% of it")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="sst-2")
    parser.add_argument("--data_dir", default=os.path.join(SHARED, "data", "glue"))
    parser.add_argument("--spm_model_file", default=os.path.join(SHARED, "data", "spm", "30k-clean.model"))
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=6, help="timed steps per configuration")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--multiple", type=int, default=1, help="trim_to_longest rounding (batching.DEFAULT_MULTIPLE)")
    parser.add_argument("--dropout", type=float, default=0.0, help="encoder dropout (albert-base-v2: 0)")
    parser.add_argument("--precisions", default="bf16,fp32")
    parser.add_argument("--group_by_length", action="store_true")
    parser.add_argument("--no_serving", action="store_true")
    parser.add_argument("--serving_repeats", type=int, default=10)
    parser.add_argument("--profile", type=int, default=0,
                        help="also print per-op-type time of N steps / requests of ours (trimmed, serving)")
    matmul_ceiling.add_ceiling_flags(parser, "ours trim")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name in ("impl", "mode", "precision", "batches", "data", "result"):
        parser.add_argument(f"--{name}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker_main(args)

    info = cpu_info()
    flags = [name for name, present in info["flags"].items() if present]
    print(f"CPU: {info['model']}, {info['cpus']} CPUs; flags: {' '.join(flags)}\n  {isa_note(info)}")
    print(f"load: {os.getloadavg()}")
    rows = load_rows(args)
    lengths = np.array([len(ids) for ids in rows["ids"]])
    plans = plan_batches(args, lengths)
    print(f"{args.task}: {len(lengths)} rows, mean length {lengths.mean():.1f} pieces; batch {args.batch_size}, "
          f"max_seq_length {args.max_seq_length}, {args.steps} steps per config (run twice, the second timed)")
    timed = plans
    with tempfile.TemporaryDirectory(prefix="albert_finetune_") as tmp:
        data = os.path.join(tmp, "data.json")
        with open(data, "w", encoding="utf-8") as f:
            json.dump({"rows": rows, "batches": plans}, f)
        configs = [("ours", "trim", "random", args.multiple), ("hf", "longest", "random", 1),
                   ("ours", "pad", "random", args.max_seq_length), ("hf", "pad", "random", args.max_seq_length)]
        if args.group_by_length:
            configs += [("ours", "group", "ours_group", args.multiple), ("hf", "group", "hf_group", 1)]
        ceilings = ceiling_rates(args, rows, timed["random"], tmp) if args.ceiling else {}
        results = {}
        for precision in args.precisions.split(","):
            for impl, mode, batches, multiple in configs:
                out = run_config(args, data, impl, mode, precision, batches, tmp)
                width = mean_width(rows, timed[batches], multiple, args.max_seq_length)
                out.update(examples_per_second=args.batch_size / out["seconds_per_step"], width=width)
                results[(impl, mode, precision)] = out
                print(f"   {out['seconds_per_step']:.2f} s/step, {out['examples_per_second']:.2f} examples/s, "
                      f"mean batch width {width:.1f}", flush=True)
        serving = {} if args.no_serving else {impl: run_config(args, data, impl, "serve", "fp32", "random", tmp)
                                              for impl in ("ours", "hf")}
        shares = ceiling_shares(ceilings, results)
    print(f"\nload after: {os.getloadavg()}; CPU {'AMX' if info['flags']['amx_bf16'] else 'AVX512_BF16' if info['flags']['avx512_bf16'] else 'AVX2'}")
    print(f"{'config':28s} {'s/step':>8s} {'ex/s':>8s} {'width':>6s}")
    for (impl, mode, precision), out in results.items():
        print(f"{impl + ' ' + mode + ' ' + precision:28s} {out['seconds_per_step']:8.2f} "
              f"{out['examples_per_second']:8.2f} {out['width']:6.1f}")
    for precision in args.precisions.split(","):
        r = lambda a, b: results[a + (precision,)]["examples_per_second"] / results[b + (precision,)]["examples_per_second"]  # noqa: E731
        line = (f"{precision}: ours trim / hf longest {r(('ours', 'trim'), ('hf', 'longest')):.2f}x (target 1.5x bf16 on AMX); "
                f"ours trim / ours pad {r(('ours', 'trim'), ('ours', 'pad')):.2f}x (target 2x); "
                f"ours pad / hf pad {r(('ours', 'pad'), ('hf', 'pad')):.2f}x")
        if args.group_by_length:
            line += f"; ours group / hf group {r(('ours', 'group'), ('hf', 'group')):.2f}x (target 1.25x)"
        print(line)
    for line in shares:
        print(line)
    for n in (1, 32):
        if serving:
            ours, hf = serving["ours"][f"ms_batch_{n}"], serving["hf"][f"ms_batch_{n}"]
            print(f"serving batch {n}: ours {ours:.1f} ms, hf {hf:.1f} ms, {hf / ours:.2f}x (target 1.5x)")


if __name__ == "__main__":
    main()
