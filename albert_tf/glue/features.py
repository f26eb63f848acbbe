"""GLUE examples → `[CLS] A [SEP] B [SEP]` features → cached TFRecords → tf.data.

The TFRecord format is the original's (`file_based_convert_examples_to_features`):
int64 `input_ids`, `input_mask`, `segment_ids` of length max_seq_length, `label_ids`
(int64; float for STS-B) and `is_real_example`; `feature_spec()` below is the one
place those names and types are written.

What changes from the original:
- The cache file name carries a hash of everything the records depend on (task,
  split, data file contents, tokenizer model file, lower-casing, sequence length,
  format version), so a changed input rebuilds instead of silently reusing stale
  records (the original reused `<task>_train.tf_record` whatever changed).
- Files are written under a temporary name and renamed, with a JSON sidecar
  (written last) holding the example count; a crash leaves no half cache.
- Eval and predict never drop examples: the last batch is filled with
  `is_real_example = 0` rows (as the original did on TPU) so every batch has a
  static shape, and metrics/outputs skip those rows.
- Training reads through the project's one input pipeline (seeded shuffle,
  checkpointable iterator for exact resume).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Iterable, Protocol, Sequence

import tensorflow as tf

from albert_tf.fileio import atomic_output, atomic_write_text
from albert_tf.glue.processors import GlueProcessor, InputExample, TaskSpec

# Bump when the record contents change for the same inputs (invalidates caches).
FORMAT_VERSION = 1

CLS, SEP = "[CLS]", "[SEP]"


class Tokenizer(Protocol):
    def tokenize(self, text: str) -> list[str]: ...

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]: ...


def feature_spec(max_seq_length: int, regression: bool) -> dict[str, tf.io.FixedLenFeature]:
    """Parsing spec of one record: the original's names, types and shapes."""
    return {
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "label_ids": tf.io.FixedLenFeature([], tf.float32 if regression else tf.int64),
        "is_real_example": tf.io.FixedLenFeature([], tf.int64),
    }


MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")


@dataclasses.dataclass
class InputFeatures:
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    label_id: int | float
    is_real_example: bool = True


def truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """Trims the longer list one token at a time from its end (ties trim B), in place.

    The original's heuristic: a short sequence keeps all its tokens, which carry
    more information per token than those of a long one.
    """
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def label_to_id(spec: TaskSpec, label: str | float | None) -> int | float:
    """Class index (or the float score for STS-B); unlabelled (test) examples get 0."""
    if spec.is_regression:
        return 0.0 if label is None else float(label)
    return 0 if label is None else spec.labels.index(label)


def convert_example(
    example: InputExample, spec: TaskSpec, max_seq_length: int, tokenizer: Tokenizer
) -> InputFeatures:
    """One example → `[CLS] A [SEP] (B [SEP])`, segment ids 0 for A, 1 for B, zero-padded."""
    tokens_a = tokenizer.tokenize(example.text_a)
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else []
    if tokens_b:
        truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        tokens_a = tokens_a[: max_seq_length - 2]
    tokens = [CLS, *tokens_a, SEP]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += [*tokens_b, SEP]
        segment_ids += [1] * (len(tokens_b) + 1)
    input_ids = list(tokenizer.convert_tokens_to_ids(tokens))
    padding = [0] * (max_seq_length - len(input_ids))
    return InputFeatures(
        input_ids=input_ids + padding,
        input_mask=[1] * len(input_ids) + padding,
        segment_ids=segment_ids + padding,
        label_id=label_to_id(spec, example.label),
    )


def to_tf_example(features: InputFeatures, regression: bool) -> tf.train.Example:
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    label = (
        tf.train.Feature(float_list=tf.train.FloatList(value=[float(features.label_id)]))
        if regression
        else ints([int(features.label_id)])
    )
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "input_ids": ints(features.input_ids),
                "input_mask": ints(features.input_mask),
                "segment_ids": ints(features.segment_ids),
                "label_ids": label,
                "is_real_example": ints([int(features.is_real_example)]),
            }
        )
    )


def write_features(
    examples: Iterable[InputExample],
    path: str,
    spec: TaskSpec,
    max_seq_length: int,
    tokenizer: Tokenizer,
) -> int:
    """Streams examples into a TFRecord file (atomically); returns the number written."""
    count = 0
    with atomic_output(path) as tmp, tf.io.TFRecordWriter(tmp) as writer:
        for example in examples:
            features = convert_example(example, spec, max_seq_length, tokenizer)
            writer.write(to_tf_example(features, spec.is_regression).SerializeToString())
            count += 1
    return count


def file_sha256(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tokenizer_fingerprint(
    spm_model_file: str | None, vocab_file: str | None, do_lower_case: bool
) -> str:
    """Identifies a tokenizer by its model file contents and lower-casing."""
    parts = [f"lower={bool(do_lower_case)}"]
    if spm_model_file:
        parts.append("spm=" + file_sha256(spm_model_file))
    elif vocab_file:
        parts.append("vocab=" + file_sha256(vocab_file))
    return ";".join(parts)


@dataclasses.dataclass(frozen=True)
class CachedFeatures:
    """A TFRecord file of one split and what is needed to read it."""

    path: str
    num_examples: int
    max_seq_length: int
    regression: bool


def cached_features(
    processor: GlueProcessor,
    data_dir: str | os.PathLike,
    split: str,
    cached_dir: str | os.PathLike,
    tokenizer: Tokenizer,
    tokenizer_id: str,
    max_seq_length: int,
) -> CachedFeatures:
    """The features of a split, built once and reused while their inputs are unchanged.

    `tokenizer_id` identifies the tokenizer (see `tokenizer_fingerprint`); it is part
    of the cache key together with task, split, data file contents and length.
    """
    spec = processor.spec
    data_file = processor.data_file(data_dir, split)
    if not os.path.isfile(data_file):
        # Let the processor raise its message naming the file and the flag.
        next(iter(processor.iter_examples(data_dir, split)), None)
    key_fields = {
        "format_version": FORMAT_VERSION,
        "task": spec.name,
        "split": split,
        "data_sha256": file_sha256(data_file),
        "tokenizer": tokenizer_id,
        "max_seq_length": int(max_seq_length),
    }
    key = hashlib.sha256(json.dumps(key_fields, sort_keys=True).encode()).hexdigest()[:16]
    path = os.path.join(
        os.fspath(cached_dir), f"{spec.name}_{split}_{max_seq_length}_{key}.tf_record"
    )
    meta_path = path + ".json"
    if os.path.exists(path) and os.path.exists(meta_path):
        with open(meta_path, encoding="utf-8") as f:
            meta = json.load(f)
        if {k: meta.get(k) for k in key_fields} == key_fields:
            return CachedFeatures(path, int(meta["num_examples"]), max_seq_length, spec.is_regression)
    count = write_features(
        processor.iter_examples(data_dir, split), path, spec, max_seq_length, tokenizer
    )
    meta = dict(key_fields, num_examples=count, data_file=os.path.abspath(data_file))
    atomic_write_text(meta_path, json.dumps(meta, indent=1, sort_keys=True))
    return CachedFeatures(path, count, max_seq_length, spec.is_regression)


def decode_record(record: tf.Tensor, max_seq_length: int, regression: bool) -> dict[str, tf.Tensor]:
    """Parses one serialized record; int64 → int32 (what the model takes)."""
    parsed = tf.io.parse_single_example(record, feature_spec(max_seq_length, regression))
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}


def padding_example(max_seq_length: int, regression: bool) -> dict[str, tf.Tensor]:
    """A fake row (all zeros, is_real_example = 0) to fill the last batch."""
    zeros = tf.zeros([max_seq_length], tf.int32)
    return {
        "input_ids": zeros,
        "input_mask": zeros,
        "segment_ids": zeros,
        "label_ids": tf.constant(0.0 if regression else 0, tf.float32 if regression else tf.int32),
        "is_real_example": tf.constant(0, tf.int32),
    }


def train_dataset_fn(features: CachedFeatures, train_batch_size: int, seed: int,
                     shuffle_buffer: int = 10000):
    """`fn(input_context)` for the training loop: repeated, shuffled (seeded), per-replica
    batches through the shared input pipeline (`albert_tf.training.make_tfrecord_dataset`).

    The shuffle buffer (the original's was 100 records) covers up to `shuffle_buffer`
    records, the whole file for most GLUE tasks.
    """
    from albert_tf.training import make_tfrecord_dataset

    max_len, regression = features.max_seq_length, features.regression

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_tfrecord_dataset(
            features.path, lambda r: decode_record(r, max_len, regression),
            input_context.get_per_replica_batch_size(train_batch_size), is_training=True,
            input_context=input_context, seed=seed,
            shuffle_buffer_size=max(1, min(shuffle_buffer, features.num_examples)),
            shard_mode="records")

    return dataset_fn


def make_eval_dataset(features: CachedFeatures, batch_size: int) -> tf.data.Dataset:
    """Eval/predict batches in file order: every example exactly once, the last batch
    filled with `is_real_example = 0` rows so that every batch has `batch_size` rows."""
    max_len, regression = features.max_seq_length, features.regression
    dataset = tf.data.TFRecordDataset(features.path).map(
        lambda r: decode_record(r, max_len, regression), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True)
    pad = -features.num_examples % batch_size
    if pad:
        fake = tf.data.Dataset.from_tensors(padding_example(max_len, regression)).repeat(pad)
        dataset = dataset.concatenate(fake)
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
