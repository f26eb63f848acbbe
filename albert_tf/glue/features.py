"""GLUE examples → `[CLS] A [SEP] B [SEP]` features → cached TFRecords → tf.data.

The TFRecord format is the original's (`file_based_convert_examples_to_features`):
int64 `input_ids`, `input_mask`, `segment_ids` of length max_seq_length, `label_ids`
(int64; float for STS-B) and `is_real_example`; `SCHEMA` below is the one place
those names and types are written (parse spec, writer and padding are built from it).

What changes from the original:
- The cache file name carries a hash of everything the records depend on (task,
  split, data file contents, tokenizer model file, lower-casing, sequence length,
  format version), so a changed input rebuilds instead of silently reusing stale
  records (the original reused `<task>_train.tf_record` whatever changed).
- Files are written by the one feature cache (`albert_tf.data.feature_cache`): under a
  temporary name and renamed, with a JSON side file (written last) holding the example
  count; a crash leaves no half cache.
- The records are a `data.feature_cache.CachedSplit`, read through `data.datasets` like
  every task's: eval and predict never drop examples (the last batch is filled with
  `is_real_example = 0` rows, as the original did on TPU), training has a seeded
  shuffle and a checkpointable iterator for exact resume.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Protocol, Sequence

import tensorflow as tf

from albert_tf.data.feature_cache import CachedSplit, cache_key, cached_records
from albert_tf.data.records import SEQUENCE, RecordSchema, example_bytes, model_input_features
from albert_tf.fileio import absolute, file_sha256, is_file
from albert_tf.glue.processors import GlueProcessor, InputExample, TaskSpec
from albert_tf.glue.tables import joins_at_cr

CLS, SEP = "[CLS]", "[SEP]"
SEQ = SEQUENCE
# The original's record; bump the version when the records change for the same inputs.
SCHEMA = RecordSchema("glue", 1, (
    *model_input_features(),
    ("label_ids", "int64", None),
    ("is_real_example", "int64", None),
))
REGRESSION_SCHEMA = SCHEMA.replace("label_ids", "float32")  # STS-B's scores


class Tokenizer(Protocol):
    def tokenize(self, text: str) -> list[str]: ...

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]: ...


def schema(regression: bool) -> RecordSchema:
    return REGRESSION_SCHEMA if regression else SCHEMA


def feature_spec(max_seq_length: int, regression: bool) -> dict[str, tf.io.FixedLenFeature]:
    """Parsing spec of one record: the original's names, types and shapes."""
    return schema(regression).parse_spec(max_seq_length=max_seq_length)


@dataclasses.dataclass
class InputFeatures:
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    label_id: int | float
    is_real_example: bool = True


def check_max_seq_length(spec: TaskSpec, max_seq_length: int) -> None:
    """Room for [CLS] a [SEP] (b [SEP]) with at least one token of each text: shorter, a pair's
    truncation failed and a single text trained on inputs without text."""
    if spec.is_pair:
        kind, layout, need = "a pair task", "[CLS] a [SEP] b [SEP] with a token of each text", 5
    else:
        kind, layout, need = "a single-sentence task", "[CLS] text [SEP] with a token of text", 3
    if max_seq_length < need:
        raise ValueError(f"--max_seq_length={max_seq_length} is too small for {spec.name}, {kind}: "
                         f"{layout} needs at least {need}")


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
    values = {"input_ids": features.input_ids, "input_mask": features.input_mask,
              "segment_ids": features.segment_ids, "label_ids": features.label_id,
              "is_real_example": int(features.is_real_example)}
    return schema(regression).example(values, max_seq_length=len(features.input_ids))


def cached_features(
    processor: GlueProcessor,
    data_dir: str | os.PathLike,
    split: str,
    cached_dir: str | os.PathLike,
    tokenizer: Tokenizer,
    tokenizer_id: str,
    max_seq_length: int,
) -> CachedSplit:
    """The features of a split, built once and reused while their inputs are unchanged.

    `tokenizer_id` identifies the tokenizer (`tokenization.tokenizer_fingerprint`); it is part
    of the cache key together with task, split, data file contents and length.
    """
    spec = processor.spec
    data_file = processor.data_file(data_dir, split)
    if not is_file(data_file):
        # Let the processor raise its message naming the file and the flag.
        next(iter(processor.iter_examples(data_dir, split)), None)
    record_schema = schema(spec.is_regression)
    settings = {
        "task": spec.name,
        "split": split,
        "data_sha256": file_sha256(data_file),
        "tokenizer": tokenizer_id,
        "max_seq_length": int(max_seq_length),
        **processor.cache_settings(),
    }
    if joins_at_cr(data_file):  # read as a space before (now dropped, as the original): not the old records
        settings["lone_cr"] = "dropped"
    key = cache_key(record_schema, settings)[:16]
    path = os.path.join(os.fspath(cached_dir), f"{spec.name}_{split}_{max_seq_length}_{key}.tf_record")

    def build(write) -> dict:
        count = 0
        for example in processor.iter_examples(data_dir, split):
            write(example_bytes(to_tf_example(convert_example(example, spec, max_seq_length, tokenizer),
                                              spec.is_regression)))
            count += 1
        return {"num_examples": count, "data_file": absolute(data_file)}

    return cached_records(path, record_schema, settings, build, source=f"{data_file} ({spec.name} {split})",
                          expected=lambda: _count_examples(processor, data_dir, split), keyed_name=True)


def _count_examples(processor: GlueProcessor, data_dir: str | os.PathLike, split: str) -> int:
    """The split's examples, for the conversion's ETA: reading the rows again is quick next to tokenizing."""
    return sum(1 for _ in processor.iter_examples(data_dir, split))
