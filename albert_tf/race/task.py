"""RACE as a fine-tuning task (``finetuning.FineTuningTask``): four-way multiple choice.

Data: ``race.data`` reads a split's questions, ``race.records`` caches their records at
the original's paths. Model: ``RaceModel``. Metrics: ``eval_accuracy`` (key), ``eval_loss``
and each level's accuracy (``race.outputs``). Differences from the original: eval and
predict never drop a question (padding rows fill the last batch and are not counted);
the dev results add each level's accuracy; predict also writes one line per question
(``test_predictions.jsonl``).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from albert_tf.data.feature_cache import check_distinct_caches
from albert_tf.finetuning.task import FineTuningTask, PredictContext, Split, model_inputs, with_estimator_keys
from albert_tf.race import outputs, records
from albert_tf.race.data import RaceExample, race_files, read_race
from albert_tf.race.features import Tokenizer
from albert_tf.race.model import DEFAULT_DROPOUT, RaceModel, loss_fn

# split -> the original's default record file in output_dir
RECORD_FILES = {"train": "train.tf_record", "dev": "eval.tf_record", "test": "predict.tf_record"}
RECORD_FLAGS = {"train": "--train_file", "dev": "--eval_file", "test": "--predict_file"}  # each overrides its default


@dataclasses.dataclass
class RaceTask(FineTuningTask):
    """RACE's data and settings (the driver's flags). ``record_files`` maps a split to its cache
    path (--train_file / --eval_file / --predict_file; default the original's names in output_dir)."""

    data_dir: str
    output_dir: str
    tokenizer: Tokenizer
    tokenizer_id: str
    max_seq_length: int = 512
    max_qa_length: int = 128
    dropout_prob: float = DEFAULT_DROPOUT
    high_only: bool = False
    middle_only: bool = False
    record_files: dict[str, str | None] = dataclasses.field(default_factory=dict)
    # each split's examples, read once (by check_splits, before any work)
    _examples: dict[str, list[RaceExample]] = dataclasses.field(default_factory=dict, init=False, repr=False)

    key_metric = outputs.KEY_METRIC
    results_layout = outputs.RESULTS_LAYOUT

    @property
    def name(self) -> str:
        return "RACE"

    def check_splits(self, splits) -> None:
        # Every line of every split the run needs is read now: a missing folder, a malformed line or an empty
        # split stops the run before any work (the test split was otherwise first read after the whole training).
        for split in splits:
            self._read(split)
        check_distinct_caches({RECORD_FLAGS[split] if self.record_files.get(split) else f"the {split} cache":
                               self._record_file(split) for split in RECORD_FILES})

    def _record_file(self, split: str) -> str:
        return self.record_files.get(split) or os.path.join(self.output_dir, RECORD_FILES[split])

    def _read(self, split: str) -> list[RaceExample]:
        if split not in self._examples:
            self._examples[split] = read_race(self.data_dir, split, self.high_only, self.middle_only)
        return self._examples[split]

    def load_split(self, split: str) -> Split:
        examples = self._read(split)
        data_files = [path for _, path in race_files(self.data_dir, split, self.high_only, self.middle_only,
                                                     announce=False)]  # _read said what it reads
        record_file = self._record_file(split)
        cached = records.cached_features(examples, data_files, record_file, self.tokenizer, self.tokenizer_id,
                                         self.max_seq_length, self.max_qa_length)
        return Split(split, cached, lambda: examples)

    def build_model(self, encoder) -> RaceModel:
        return RaceModel(encoder, self.dropout_prob)

    def loss(self, model, batch: Mapping[str, tf.Tensor], training: bool):
        logits = model(model_inputs(batch), training=training)["logits"]
        weight = tf.cast(batch["is_real_example"], tf.float32)
        correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), batch["label_ids"]), tf.float32)
        return loss_fn(logits, batch["label_ids"], weight), {"accuracy": (tf.reduce_sum(correct * weight),
                                                                          tf.reduce_sum(weight))}

    def outputs(self, model, batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        out = model(model_inputs(batch), training=False)
        return {"logits": out["logits"], "probabilities": out["probabilities"]}

    def metrics(self, split: Split, gathered: Mapping[str, np.ndarray], step: int) -> dict[str, Any]:
        results = outputs.compute_metrics(split.examples, gathered["logits"])
        return with_estimator_keys(results, step)

    def write_predictions(self, output_dir: str, split: Split, gathered: Mapping[str, np.ndarray],
                          context: PredictContext) -> dict[str, Any]:
        """The test split's metrics (predict_results.txt) and one line per question."""
        results = with_estimator_keys(outputs.compute_metrics(split.examples, gathered["logits"]), context.step)
        return {"predict_results": outputs.write_predict_results(output_dir, results),
                "test_predictions": outputs.write_predictions(output_dir, split.examples,
                                                              gathered["probabilities"])}
