"""The bf16 serving export (``--serving_precision=bfloat16``) against the float32 one (issue 33, items 3 and 4):
agreement on real sentences, latency at a batch of 1 and of 32, and the serving process's RSS; optionally
against Hugging Face's float32 pipeline (tokenizer + model), as ``finetune.py`` measures serving.

The model: ALBERT-base shapes (albert-base-v2), a binary ``GlueClassifier``. No fine-tuned ALBERT-base is
available here, and fine-tuning one on 2 shared cores takes hours, so the encoder keeps its seeded random
initialisation and the head is trained (logistic regression on the float32 pooled outputs of
``--train_rows`` (1,000) CoLA training sentences, with their labels): a classifier whose decisions depend on the
encoder's outputs, as a fine-tuned one's do. SST-2 is not in ``../shared`` (format only), so the
sentences are CoLA's (single sentences of about SST-2's length): the head is trained on CoLA train and
agreement is measured on all of CoLA dev (1,043 sentences).

The model is exported twice (``export_classifier`` with ``serving_precision`` float32 and bfloat16); each
export is then served in its own process (``tf.saved_model.load``, its ``serving_text`` signature, raw
text in): probabilities over the dev sentences in batches of 32, then the median latency of ``--repeats``
calls on a batch of 1 and of 32 sentences (after 3 warm-up calls on the very same batch), and the
process's RSS (VmRSS after loading and warming up, VmHWM at the end; TensorFlow's import alone is
printed beside). Agreement: the share of dev sentences whose label equals float32's (issue 33: >= 99.5%)
and the largest difference of a probability.

  .venv/bin/python benchmarks/serving_bf16.py
  .venv/bin/python benchmarks/serving_bf16.py --compare [--peer_python .peer-venv/bin/python]

``--compare`` runs HF's ``AlbertForSequenceClassification`` (float32, random weights: speed only) with an
``AlbertTokenizer`` built from the same 30k-clean.model, in ``--peer_python`` (a Python with torch and
transformers; ``benchmarks/requirements.txt``). Name the CPU and the load (``uptime``) beside the figures.
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
from finetune import BASE, HF_BASE, SHARED  # noqa: E402
from harness import cpu_info, isa_note, peer_python, worker_command  # noqa: E402

PRECISIONS = ("float32", "bfloat16")
LABEL_TARGET = 0.995  # issue 33: labels equal to float32's for >= 99.5% of sentences


def read_cola(path: str, rows: int | None = None) -> tuple[list[str], np.ndarray]:
    """CoLA's tsv (no header: source, label, original label, sentence)."""
    sentences, labels = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            sentences.append(fields[3])
            labels.append(int(fields[1]))
    return sentences[:rows], np.array(labels[:rows])


def rss_mb() -> dict[str, float]:
    with open("/proc/self/status", encoding="utf-8") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmRSS", "VmHWM")}


# ---------------------------------------------------------------- the model (main process)
def pooled_outputs(model, sentences: list[str], spm: str, max_seq_length: int) -> np.ndarray:
    """The float32 encoder's pooled outputs, batches of 32 cut to their longest row."""
    import tensorflow as tf

    from albert_tf.glue.features import convert_example
    from albert_tf.glue.processors import InputExample, get_task_spec
    from albert_tf.tokenization import FullTokenizer

    tokenizer, spec = FullTokenizer(spm_model_file=spm, do_lower_case=True), get_task_spec("cola")
    rows = [convert_example(InputExample(str(i), s), spec, max_seq_length, tokenizer) for i, s in enumerate(sentences)]
    out = []
    for start in range(0, len(rows), 32):
        batch = rows[start:start + 32]
        width = max(sum(r.input_mask) for r in batch)
        inputs = {k: tf.constant([getattr(r, k)[:width] for r in batch], tf.int32)
                  for k in ("input_ids", "input_mask", "segment_ids")}
        out.append(model.encoder(inputs, training=False)["pooled_output"].numpy())
    return np.concatenate(out)


def fit_head(features: np.ndarray, labels: np.ndarray, ridge: float = 1.0) -> tuple:
    """A linear classifier on the pooled outputs: ridge regression of the +-1 labels on the
    standardised features (closed form), its score then calibrated by a 1-D logistic regression
    (Newton steps), folded back to the raw features: (weights [2, H], bias [2]) for the two logits."""
    mean, std = features.mean(0), features.std(0) + 1e-6
    z = (features - mean) / std
    target = 2.0 * labels - 1
    w = np.linalg.solve(z.T @ z + ridge * len(z) * np.eye(z.shape[1]), z.T @ (target - target.mean()))
    score = z @ w
    a, b = 1.0, 0.0  # p = sigmoid(a * score + b)
    for _ in range(25):
        p = 1 / (1 + np.exp(-(a * score + b)))
        gradient = np.array([np.sum((p - labels) * score), np.sum(p - labels)])
        weight = p * (1 - p)
        hessian = np.array([[np.sum(weight * score * score), np.sum(weight * score)],
                            [np.sum(weight * score), np.sum(weight)]]) + 1e-9 * np.eye(2)
        a, b = np.array([a, b]) - np.linalg.solve(hessian, gradient)
    raw_w, raw_b = a * w / std, b - a * float(w @ (mean / std))
    # softmax([-l/2, l/2]) = sigmoid(l)
    return np.stack([-raw_w / 2, raw_w / 2]).astype(np.float32), np.array([-raw_b / 2, raw_b / 2], np.float32)


def build_and_export(args, folder: str) -> dict[str, str]:
    from albert_tf import AlbertConfig
    from albert_tf.glue.export import export_classifier
    from albert_tf.glue.heads import GlueClassifier
    from albert_tf.glue.processors import get_task_spec
    from albert_tf.keras import keras

    keras.utils.set_random_seed(args.seed)
    model = GlueClassifier(AlbertConfig(**BASE), 2)
    model(model.dummy_inputs())
    sentences, labels = read_cola(os.path.join(args.data_dir, "train.tsv"), args.train_rows)
    start = time.perf_counter()
    features = pooled_outputs(model, sentences, args.spm_model_file, args.max_seq_length)
    weights, bias = fit_head(features, labels)
    model.classifier.output_weights.assign(weights)
    model.classifier.output_bias.assign(bias)
    train_accuracy = float(np.mean((features @ weights[1] + bias[1] > features @ weights[0] + bias[0]) == labels))
    print(f"head trained on {len(sentences)} CoLA training sentences' float32 pooled outputs "
          f"({time.perf_counter() - start:.0f} s): training accuracy {train_accuracy:.3f} "
          f"(majority class {max(labels.mean(), 1 - labels.mean()):.3f})", flush=True)
    spec = get_task_spec("cola")
    return {p: export_classifier(model, spec, os.path.join(folder, p), args.max_seq_length, args.spm_model_file,
                                 serving_precision=p) for p in PRECISIONS}


# ---------------------------------------------------------------- serving (one process each)
def timed(run, batch: list[str], repeats: int) -> float:
    for _ in range(3):
        run(batch)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run(batch)
        times.append(time.perf_counter() - start)
    return 1000 * float(np.median(times))


def serve(args) -> dict:
    base = rss_mb()["VmRSS"]
    if args.worker == "hf":
        import torch
        import transformers

        base = rss_mb()["VmRSS"]
        model = transformers.AlbertForSequenceClassification(transformers.AlbertConfig(**HF_BASE, num_labels=2)).eval()
        tokenizer = transformers.AlbertTokenizer(args.spm_model_file)

        def run(batch):
            with torch.no_grad():
                inputs = tokenizer(batch, padding=True, truncation=True, max_length=args.max_seq_length,
                                   return_tensors="pt")
                return model(**inputs).logits.softmax(-1).numpy()
    else:
        import tensorflow as tf
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the loaded signature)

        base = rss_mb()["VmRSS"]
        signature = tf.saved_model.load(args.export).signatures["serving_text"]
        run = lambda batch: signature(text_a=tf.constant(batch))["probabilities"].numpy()  # noqa: E731
    sentences, _ = read_cola(os.path.join(args.data_dir, "dev.tsv"))
    probabilities = np.concatenate([run(sentences[i:i + 32]) for i in range(0, len(sentences), 32)])
    loaded = rss_mb()["VmRSS"]
    rng = np.random.default_rng(args.seed)
    result = {f"ms_batch_{n}": timed(run, [sentences[i] for i in rng.choice(len(sentences), n)], args.repeats)
              for n in (1, 32)}
    return {**result, "probabilities": probabilities.tolist(), "rss_after_import_mb": base,
            "rss_loaded_mb": loaded, "peak_rss_mb": rss_mb()["VmHWM"]}


def run_worker(python: str, args, worker: str, export: str | None, folder: str, name: str) -> dict | None:
    out = os.path.join(folder, f"{name}.json")
    command = [python, os.path.abspath(__file__), f"--worker={worker}", f"--out={out}", f"--seed={args.seed}",
               f"--repeats={args.repeats}", f"--data_dir={args.data_dir}", f"--spm_model_file={args.spm_model_file}",
               f"--max_seq_length={args.max_seq_length}"] + ([f"--export={export}"] if export else [])
    env = worker_command(torch_side=True)[1]  # the repository importable from either Python
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode:
        print(f"{worker} failed:\n{done.stderr[-2000:]}", flush=True)
        return None
    with open(out, encoding="utf-8") as f:
        return json.load(f)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", default=os.path.join(SHARED, "data", "glue", "CoLA"))
    parser.add_argument("--spm_model_file", default=os.path.join(SHARED, "data", "spm", "30k-clean.model"))
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--train_rows", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compare", action="store_true", help="also HF's float32 pipeline (speed, RSS)")
    parser.add_argument("--peer_python", default=peer_python(), help="a Python with torch and transformers")
    parser.add_argument("--worker", choices=["ours", "hf"], help=argparse.SUPPRESS)
    parser.add_argument("--export", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        result = serve(args)
        with open(args.out + ".tmp", "w", encoding="utf-8") as f:
            json.dump(result, f)
        os.replace(args.out + ".tmp", args.out)
        return

    info = cpu_info()
    print(f"CPU: {info['model']}; {' '.join(k for k, v in info['flags'].items() if v)}\n{isa_note(info)}")
    print(f"load average at start: {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory(prefix="albert_serving_bf16_") as folder:
        exports = build_and_export(args, folder)
        results = {p: run_worker(sys.executable, args, "ours", exports[p], folder, p) for p in PRECISIONS}
        if args.compare:
            results["hf float32"] = run_worker(args.peer_python, args, "hf", None, folder, "hf")
    _, dev_labels = read_cola(os.path.join(args.data_dir, "dev.tsv"))
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}\n")
    print(f"{'serving':<14}{'batch 1 ms':>11}{'batch 32 ms':>12}{'RSS import MB':>14}{'RSS loaded MB':>14}"
          f"{'peak RSS MB':>12}{'dev acc':>8}")
    for name, r in results.items():
        if r is None:
            continue
        accuracy = "" if name.startswith("hf") else f"{np.mean(np.argmax(r['probabilities'], 1) == dev_labels):.3f}"
        print(f"{name:<14}{r['ms_batch_1']:>11.1f}{r['ms_batch_32']:>12.1f}{r['rss_after_import_mb']:>14.0f}"
              f"{r['rss_loaded_mb']:>14.0f}{r['peak_rss_mb']:>12.0f}{accuracy:>8}")
    fp32, bf16 = results["float32"], results["bfloat16"]
    if fp32 and bf16:
        p32, p16 = np.array(fp32["probabilities"]), np.array(bf16["probabilities"])
        same = float(np.mean(p32.argmax(1) == p16.argmax(1)))
        margin = np.abs(p32[:, 1] - p32[:, 0])
        print(f"\nagreement on {len(p32)} CoLA dev sentences: labels equal to float32's {100 * same:.2f}% "
              f"({'meets' if same >= LABEL_TARGET else 'MISSES'} the 99.5% target); largest probability difference "
              f"{np.abs(p32 - p16).max():.4f} (mean {np.abs(p32 - p16).mean():.5f}); float32 margins "
              f"|p1 - p0| < 0.02: {int((margin < 0.02).sum())}")
        flipped = p32.argmax(1) != p16.argmax(1)
        if flipped.any():
            print(f"the {int(flipped.sum())} sentences labelled otherwise: float32 |p1 - p0| at most "
                  f"{margin[flipped].max():.4f} (near-ties of this classifier)")
        print(f"bf16 / float32 speed: batch 1 {fp32['ms_batch_1'] / bf16['ms_batch_1']:.2f}x, "
              f"batch 32 {fp32['ms_batch_32'] / bf16['ms_batch_32']:.2f}x")
    hf = results.get("hf float32")
    if hf and bf16:
        for name in PRECISIONS:
            ours = results[name]
            print(f"ours {name} / HF float32 pipeline: batch 1 {hf['ms_batch_1'] / ours['ms_batch_1']:.2f}x, "
                  f"batch 32 {hf['ms_batch_32'] / ours['ms_batch_32']:.2f}x (target for bf16: 1.5x, on AMX)")


if __name__ == "__main__":
    main()
