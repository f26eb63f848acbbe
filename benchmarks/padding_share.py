"""How much of a batch is padding: pretraining records and GLUE fine-tuning batches.

  .venv/bin/python benchmarks/padding_share.py [--seq 128] [--batch 32] [--rows 2000]

Pretraining: creates records from Botchan (`../shared/data/corpus/botchan.txt`, one sentence per line, dupe_factor 1)
with the 30k-clean SentencePiece model and prints the share of positions that are padding (input_mask 0).
Fine-tuning: tokenizes the first --rows training rows of each GLUE task in `../shared/data/glue` as run_classifier
does, and prints the mean row length, the padded share of batches padded to --seq (the original), and of the same
random batches cut to their longest row (rounded up to --multiple, this project's default 1).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.path.join(os.path.dirname(REPO), "shared")
sys.path.insert(0, REPO)


def pretraining_padded_share(seq: int, tmp: str) -> tuple[float, int]:
    import tensorflow as tf

    from albert_tf.pretraining_data.features import SCHEMA

    corpus = os.path.join(tmp, "botchan_sentences.txt")
    with open(os.path.join(SHARED, "data", "corpus", "botchan.txt"), encoding="utf-8") as f, \
            open(corpus, "w", encoding="utf-8") as out:
        for paragraph in f.read().split("\n\n"):
            text = " ".join(paragraph.split())
            out.write("".join(s.strip() + ".\n" for s in text.split(".") if s.strip()) + "\n")
    records = os.path.join(tmp, "pretrain.tfrecord")
    subprocess.run([sys.executable, os.path.join(REPO, "create_pretraining_data.py"), f"--input_file={corpus}",
                    f"--output_file={records}", f"--spm_model_file={os.path.join(SHARED, 'data', 'spm', '30k-clean.model')}",
                    f"--max_seq_length={seq}", "--max_predictions_per_seq=20", "--dupe_factor=1"],
                   check=True, capture_output=True)
    real = total = short = 0
    for batch in tf.data.TFRecordDataset(records).batch(512):
        mask = SCHEMA.parse(batch, max_seq_length=seq, max_predictions_per_seq=20)["input_mask"].numpy()
        real += int(mask.sum())
        total += mask.size
        short += int((mask.sum(axis=1) < seq).sum())
    return 1 - real / total, total // seq, short


def glue_lengths(task: str, rows: int) -> np.ndarray:
    from albert_tf.glue import features
    from albert_tf.glue.processors import get_processor
    from albert_tf.tokenization import FullTokenizer

    tokenizer = FullTokenizer(spm_model_file=os.path.join(SHARED, "data", "spm", "30k-clean.model"))
    processor = get_processor(task)
    lengths = []
    for example in processor.iter_examples(os.path.join(SHARED, "data", "glue"), "train"):
        lengths.append(sum(features.convert_example(example, processor.spec, 512, tokenizer).input_mask))
        if len(lengths) == rows:
            break
    return np.array(lengths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--multiple", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        share, instances, short = pretraining_padded_share(args.seq, tmp)
    print(f"pretraining records (Botchan, max_seq_length {args.seq}, {instances} instances, {short} shorter than "
          f"{args.seq}): {100 * share:.2f}% of positions are padding")
    print(f"\nGLUE training rows, batches of {args.batch}, max_seq_length {args.seq}:")
    print(f"| task | rows | mean length | padded share at max | padded share per batch (x{args.multiple}) | work ratio |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for task in ("cola", "sts-b", "mrpc", "rte", "wnli"):
        lengths = np.minimum(glue_lengths(task, args.rows), args.seq)
        order = rng.permutation(len(lengths))[: len(lengths) // args.batch * args.batch].reshape(-1, args.batch)
        per_batch = np.minimum(-(-lengths[order].max(axis=1) // args.multiple) * args.multiple, args.seq)
        real = lengths[order].sum()
        at_max = 1 - real / (order.size * args.seq)
        cut = 1 - real / (per_batch.sum() * args.batch)
        print(f"| {task} | {len(lengths)} | {lengths.mean():.1f} | {100 * at_max:.1f}% | {100 * cut:.1f}% | "
              f"{args.seq * len(per_batch) / per_batch.sum():.2f}x |")


if __name__ == "__main__":
    main()
