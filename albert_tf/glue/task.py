"""GLUE as a fine-tuning task (``finetuning.FineTuningTask``): sentence(-pair) classification
or regression over a processor's TSV files; the runner does train/evaluate/predict/export.

Data: ``processor`` reads the split's examples (``glue.processors``), ``glue.features``
turns them into the original's records, cached. Model: ``GlueClassifier``. Metrics: the
task's (``glue.metrics``), computed over the whole dev set. Files: ``eval_results.txt``
as the original writes it, ``test_results.tsv`` and ``submit_results.tsv``
(``glue.outputs``); the export: a SavedModel with serialized-example and raw-text
signatures (``glue.export``).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.finetuning.task import FineTuningTask, PredictContext, Split, model_inputs, with_estimator_keys
from albert_tf.glue import export, features, heads, metrics, outputs
from albert_tf.glue.processors import GlueProcessor


@dataclasses.dataclass
class GlueTask(FineTuningTask):
    """One GLUE task's data and settings (the driver's flags)."""

    processor: GlueProcessor
    data_dir: str
    features_dir: str  # where the cached records go (--cached_dir, else <output_dir>/cached_features)
    tokenizer: features.Tokenizer
    tokenizer_id: str
    max_seq_length: int
    spm_model_file: str | None = None
    do_lower_case: bool = True
    threshold_to_export: float | None = None
    serving_precision: str = "float32"  # --serving_precision: what the export's graph computes in
    text_signature: bool = True  # --text_signature: the export's raw-text signature (tensorflow-text ops)

    results_layout = outputs.RESULTS_LAYOUT

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def spec(self):
        return self.processor.spec

    @property
    def key_metric(self) -> str:
        return self.spec.key_metric

    def check_splits(self, splits) -> None:
        self.processor.check_files(self.data_dir, splits)  # a clear error before any work

    def prepare(self, output_dir: str) -> None:
        self.processor.save_alongside(output_dir)

    def load_split(self, split: str) -> Split:
        cached = features.cached_features(self.processor, self.data_dir, split, self.features_dir,
                                          self.tokenizer, self.tokenizer_id, self.max_seq_length)
        return Split(split, cached, lambda: self.processor.get_examples(self.data_dir, split))

    def build_model(self, encoder) -> heads.GlueClassifier:
        return heads.GlueClassifier(encoder, self.spec.num_labels, self.spec.is_regression)

    def loss(self, model, batch: Mapping[str, tf.Tensor], training: bool):
        out = model(model_inputs(batch), training=training)
        weight = tf.cast(batch["is_real_example"], tf.float32)
        loss = heads.loss_fn(out, batch["label_ids"], self.spec.is_regression, sample_weight=weight)
        if self.spec.is_regression:
            return loss, {}
        predicted = tf.argmax(out["logits"], axis=-1, output_type=tf.int32)
        correct = tf.cast(tf.equal(predicted, tf.cast(batch["label_ids"], tf.int32)), tf.float32)
        return loss, {"accuracy": (tf.reduce_sum(correct * weight), tf.reduce_sum(weight))}

    def outputs(self, model, batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        out = model(model_inputs(batch), training=False)
        return {"logits": out["logits"], "probabilities": out["probabilities"], "label_ids": batch["label_ids"]}

    def metrics(self, split: Split, gathered: Mapping[str, np.ndarray], step: int) -> dict[str, Any]:
        results = metrics.compute_metrics(self.spec, gathered["label_ids"], gathered["logits"])
        return with_estimator_keys(results, step)

    def write_predictions(self, output_dir: str, split: Split, gathered: Mapping[str, np.ndarray],
                          context: PredictContext) -> dict[str, Any]:
        paths = outputs.write_predictions(output_dir, self.spec, split.examples, gathered["probabilities"])
        logging.info("Wrote predictions for %d test examples: %s", len(split.examples), ", ".join(paths))
        return {"predictions": paths}

    def export(self, model, export_dir: str) -> dict[str, Any]:
        path = export.export_classifier(model, self.spec, export_dir, self.max_seq_length, self.spm_model_file,
                                        self.do_lower_case, self.threshold_to_export, self.serving_precision,
                                        self.text_signature)
        logging.info("Exported the SavedModel (%s) to %s", self.serving_precision, path)
        return {"export": path}


def features_dir(output_dir: str, cached_dir: str | None) -> str:
    """--cached_dir, else ``<output_dir>/cached_features``."""
    return cached_dir or os.path.join(output_dir, "cached_features")
