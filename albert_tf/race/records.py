"""RACE's TFRecord format and its cache: one record per question, its four choices
flattened ([4 * max_seq_length] per input), the answer index and `is_real_example`.

The records of a split are built once (`data.feature_cache`) at the original's paths
(`--train_file`/`--eval_file`/`--predict_file`, default `<output_dir>/{train,eval,
predict}.tf_record`) and rebuilt when a data file, the tokenizer, a length or the
selected levels change. They are read like every task's (`data.datasets`): eval and
predict batches in file order, the last filled with `is_real_example = 0` rows, so no
question is dropped.
"""
from __future__ import annotations

import os
from typing import Sequence

from albert_tf.data.feature_cache import CachedSplit, cached_records
from albert_tf.data.records import SEQUENCE, RecordSchema, model_input_features
from albert_tf.fileio import absolute, file_sha256
from albert_tf.race.data import NUM_CHOICES, RaceExample
from albert_tf.race.features import Tokenizer, choice_inputs

CHOICES = (NUM_CHOICES, SEQUENCE)  # stored flat ([4 * max_seq_length]), parsed as [4, max_seq_length]
SCHEMA = RecordSchema("race", 1, (
    *model_input_features(CHOICES),
    ("label_ids", "int64", None),
    ("is_real_example", "int64", None),
))


def cached_features(examples: Sequence[RaceExample], data_files: Sequence[str], record_file: str,
                    tokenizer: Tokenizer, tokenizer_id: str, max_seq_length: int,
                    max_qa_length: int) -> CachedSplit:
    """The records of `examples` (read from `data_files`) at `record_file`, reused while the
    files' contents, the tokenizer and the lengths are those they were made from."""
    settings = {
        "data_sha256": [[absolute(path), file_sha256(path)] for path in data_files],
        "tokenizer": tokenizer_id,
        "max_seq_length": int(max_seq_length),
        "max_qa_length": int(max_qa_length),
    }

    def build(write) -> dict:
        for example in examples:
            input_ids, input_mask, segment_ids = choice_inputs(example, tokenizer, max_seq_length, max_qa_length)
            write(SCHEMA.serialize({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
                                    "label_ids": example.label, "is_real_example": int(example.is_real)},
                                   max_seq_length=max_seq_length))
        return {"num_examples": len(examples)}

    folders = ", ".join(sorted({os.path.dirname(absolute(path)) for path in data_files}))
    return cached_records(record_file, SCHEMA, settings, build,
                          source=f"{len(examples)} RACE questions of {len(data_files)} files under {folders}")
