"""RACE's TFRecord format and its cache: one record per question, its four choices
flattened ([4 * max_seq_length] per input), the answer index and `is_real_example`.

The records of a split are built once (`data.feature_cache`) at the original's paths
(`--train_file`/`--eval_file`/`--predict_file`, default `<output_dir>/{train,eval,
predict}.tf_record`) and rebuilt when a data file, the tokenizer, a length or the
selected levels change. Eval and predict batches are in file order and their last
batch is filled with `is_real_example = 0` rows, so no question is dropped.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Sequence

import tensorflow as tf

from albert_tf.data.feature_cache import cached_records, file_sha256
from albert_tf.data.records import RecordSchema
from albert_tf.race.data import NUM_CHOICES, RaceExample
from albert_tf.race.features import Tokenizer, choice_inputs

MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")
CHOICES_LENGTH = "choices_length"  # NUM_CHOICES * max_seq_length
SCHEMA = RecordSchema("race", 1, (
    ("input_ids", "int64", CHOICES_LENGTH),
    ("input_mask", "int64", CHOICES_LENGTH),
    ("segment_ids", "int64", CHOICES_LENGTH),
    ("label_ids", "int64", None),
    ("is_real_example", "int64", None),
))


@dataclasses.dataclass(frozen=True)
class CachedFeatures:
    """A TFRecord file of one split and what is needed to read it."""

    path: str
    num_examples: int
    max_seq_length: int


def cached_features(examples: Sequence[RaceExample], data_files: Sequence[str], record_file: str,
                    tokenizer: Tokenizer, tokenizer_id: str, max_seq_length: int,
                    max_qa_length: int) -> CachedFeatures:
    """The records of `examples` (read from `data_files`) at `record_file`, reused while the
    files' contents, the tokenizer and the lengths are those they were made from."""
    settings = {
        "data_sha256": [[os.path.abspath(path), file_sha256(path)] for path in data_files],
        "tokenizer": tokenizer_id,
        "max_seq_length": int(max_seq_length),
        "max_qa_length": int(max_qa_length),
    }

    def build(write) -> dict:
        for example in examples:
            input_ids, input_mask, segment_ids = choice_inputs(example, tokenizer, max_seq_length, max_qa_length)
            write(SCHEMA.serialize({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
                                    "label_ids": example.label, "is_real_example": int(example.is_real)},
                                   choices_length=NUM_CHOICES * max_seq_length))
        return {"num_examples": len(examples)}

    tf.io.gfile.makedirs(os.path.dirname(os.path.abspath(record_file)))
    cached = cached_records(record_file, SCHEMA, settings, build)
    return CachedFeatures(record_file, int(cached.side["num_examples"]), max_seq_length)


def decode_record(record: tf.Tensor, max_seq_length: int) -> dict[str, tf.Tensor]:
    """One serialized record -> inputs [4, S] (int32), `label_ids`, `is_real_example`."""
    parsed = SCHEMA.parse(record, choices_length=NUM_CHOICES * max_seq_length)
    for name in MODEL_INPUTS:
        parsed[name] = tf.reshape(parsed[name], [NUM_CHOICES, max_seq_length])
    return parsed


def padding_record(max_seq_length: int) -> dict[str, tf.Tensor]:
    padding = SCHEMA.padding(choices_length=NUM_CHOICES * max_seq_length)
    return {k: tf.reshape(v, [NUM_CHOICES, max_seq_length]) if k in MODEL_INPUTS else v for k, v in padding.items()}


def train_dataset_fn(features: CachedFeatures, train_batch_size: int, seed: int, shuffle_buffer: int = 10000):
    """`fn(input_context)` for the training loop: repeated, shuffled (seeded) per-replica batches."""
    from albert_tf.training import make_tfrecord_dataset

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_tfrecord_dataset(
            features.path, lambda r: decode_record(r, features.max_seq_length),
            input_context.get_per_replica_batch_size(train_batch_size), is_training=True,
            input_context=input_context, seed=seed,
            shuffle_buffer_size=max(1, min(shuffle_buffer, features.num_examples)), shard_mode="records")

    return dataset_fn


def make_eval_dataset(features: CachedFeatures, batch_size: int) -> tf.data.Dataset:
    """Batches in file order, every question once, the last batch filled with padding rows."""
    dataset = tf.data.TFRecordDataset(features.path).map(
        lambda r: decode_record(r, features.max_seq_length), num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True)
    pad = -features.num_examples % batch_size
    if pad:
        dataset = dataset.concatenate(tf.data.Dataset.from_tensors(padding_record(features.max_seq_length)).repeat(pad))
    return dataset.batch(batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
