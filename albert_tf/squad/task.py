"""SQuAD 1.1 / 2.0 as a fine-tuning task (``finetuning.FineTuningTask``).

- Data: ``train`` is ``--train_file``; ``dev`` and ``test`` are both ``--predict_file``
  (scored at each checkpoint when it has answers, and answered). Features are cached by
  ``squad.records`` (TFRecords + a JSON side file, no pickle).
- Model: ``SquadV1Model`` (linear span head) or ``SquadV2Model`` (XLNet-style head with an
  answer verifier); the loss is the original's batch mean.
- Outputs: the head's raw outputs per feature; the outputs step is the n-best
  post-processing (``squad.postprocess``), which turns them into answers per question.
- Metrics: the official scripts' exact match and F1 (``original_f1``, the original's 2.0 F1, selects for 2.0).
- Files: predictions.json, nbest_predictions.json, null_odds.json (2.0); with answers,
  eval_results.txt: one block per scored checkpoint and the original's closing block
  ("best perf happened at step: N") when the checkpoints were scored, else the one
  prediction's results. Export (1.1): SavedModel + TFLite (``squad.export``).
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Any, Mapping

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.data.feature_cache import check_distinct_caches
from albert_tf.fileio import atomic_write_text, read_text
from albert_tf.finetuning.task import FineTuningTask, PredictContext, Split
from albert_tf.squad import data, heads, postprocess, records
from albert_tf.training.results import EVAL_RESULTS_FILE, write_eval_results


@dataclasses.dataclass
class SquadSettings:
    """Everything besides the model config that shapes features, model and answers."""

    spm_model_file: str
    version_2: bool = False
    do_lower_case: bool = True
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    start_n_top: int = 5
    end_n_top: int = 5
    dropout_prob: float = 0.1
    null_score_diff_threshold: float = 0.0
    # 1.1, opt-in departure: padding positions left out of the span softmax (as 2.0's p_mask does),
    # so batches may be cut to their longest row. The original (the default) scores them.
    mask_padding_positions: bool = False


def num_train_steps(num_examples: int, train_batch_size: int, num_train_epochs: float) -> int:
    """The original's count (examples, not windows), at least 1."""
    return max(1, int(num_examples / train_batch_size * num_train_epochs))


def has_gold_answers(predict_file: str, dataset: dict | None = None) -> bool:
    """True when the file can be scored: every question has answers or is marked impossible
    (``dataset``: the file already loaded)."""
    dataset = dataset if dataset is not None else data.load_squad(predict_file)
    return all(qa.get("answers") or qa.get("is_impossible")
               for _, _, qa in data.iter_questions(dataset, "<predict_file>"))


@dataclasses.dataclass
class SquadTask(FineTuningTask):
    """SQuAD's files and settings (the driver's flags)."""

    settings: SquadSettings
    output_dir: str
    train_file: str | None = None
    predict_file: str | None = None
    train_feature_file: str | None = None  # default <output_dir>/train.tf_record
    predict_feature_file: str | None = None  # default <output_dir>/predict.tf_record
    predict_feature_left_file: str | None = None  # default <predict_feature_file>.json
    serving_precision: str = "float32"  # --serving_precision: what the exported SavedModel computes in
    _prediction_counted: bool = dataclasses.field(default=False, init=False, repr=False, compare=False)

    shuffle_buffer = 100  # on pre-shuffled examples, as the original

    @property
    def name(self) -> str:
        return "SQuAD 2.0" if self.settings.version_2 else "SQuAD 1.1"

    @property
    def padding_invariant(self) -> bool:
        """2.0 masks padding (p_mask); 1.1's head scores every position of the window, padding
        included (log-softmax over max_seq_length, as the original), so a cut batch would change
        its loss and n-best lists: it keeps padded batches unless ``mask_padding_positions``."""
        return self.settings.version_2 or self.settings.mask_padding_positions

    @property
    def key_metric(self) -> str:
        return postprocess.key_metric(self.settings.version_2)

    @property
    def results_layout(self):
        return postprocess.checkpoint_layout(self.settings.version_2)

    def check_splits(self, splits) -> None:
        train = "--train_feature_file" if self.train_feature_file else "the train cache"
        predict = "--predict_feature_file" if self.predict_feature_file else "the predict cache"
        check_distinct_caches({train: self._record_file(True), predict: self._record_file(False)},
                              {predict: self.predict_feature_left_file})

    def _record_file(self, is_training: bool) -> str:
        if is_training:
            return self.train_feature_file or os.path.join(self.output_dir, "train.tf_record")
        return self.predict_feature_file or os.path.join(self.output_dir, "predict.tf_record")

    def _features(self, is_training: bool):
        s = self.settings
        source, record = (self.train_file if is_training else self.predict_file), self._record_file(is_training)
        return records.build_or_load(source, record, s.spm_model_file, s.max_seq_length, s.doc_stride,
                                     s.max_query_length, is_training=is_training, do_lower_case=s.do_lower_case,
                                     side_file=None if is_training else self.predict_feature_left_file)

    def load_split(self, split: str) -> Split:
        if split == "train":
            return Split(split, self._features(True))
        cached = self._features(False)
        if not self._prediction_counted:  # evaluation and prediction both load it: said once
            logging.info("SQuAD prediction: %d questions, %d features", cached.side["num_examples"],
                         cached.num_records)
            self._prediction_counted = True
        return Split(split, cached, lambda: data.read_squad_examples(self.predict_file, is_training=False))

    def num_train_examples(self) -> int:
        """The questions of the training file (the original's step count is in questions)."""
        return int(self._features(True).side["num_examples"])

    def build_model(self, encoder):
        s = self.settings
        if s.version_2:
            return heads.SquadV2Model(encoder, s.start_n_top, s.end_n_top, s.dropout_prob)
        return heads.SquadV1Model(encoder)

    def dummy_seq_length(self) -> int:
        return max(8, self.settings.start_n_top, self.settings.end_n_top)  # the beam needs k positions

    def _span_outputs(self, model, inputs: Mapping[str, tf.Tensor], training: bool) -> dict[str, tf.Tensor]:
        out = model(inputs, training=training)
        if not self.settings.version_2 and self.settings.mask_padding_positions:
            padding = 1.0 - tf.cast(inputs["input_mask"], tf.float32)
            out = {**out, **{name: heads.mask_logits(out[name], padding) for name in ("start_logits", "end_logits")}}
        return out

    def loss(self, model, batch: Mapping[str, tf.Tensor], training: bool):
        return heads.squad_loss(self._span_outputs(model, batch, training), batch, self.settings.version_2), {}

    def outputs(self, model, batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        inputs = {k: v for k, v in batch.items() if k not in ("unique_ids", "is_real_example")}
        out = {**self._span_outputs(model, inputs, False), "unique_ids": batch["unique_ids"]}
        if not self.settings.version_2:  # a batch cut to its length: logits back at max_seq_length, as masked
            pad = [[0, 0], [0, self.settings.max_seq_length - tf.shape(batch["input_ids"])[1]]]
            for name in ("start_logits", "end_logits"):
                out[name] = tf.pad(out[name], pad, constant_values=-heads.NEG_INF)
        return out

    # ---- the outputs step: n-best post-processing ----
    def answers(self, split: Split, gathered: Mapping[str, np.ndarray]) -> postprocess.SquadPredictions:
        s = self.settings
        results: dict[int, object] = {}
        for i, uid in enumerate(gathered["unique_ids"]):
            uid = int(uid)
            if s.version_2:
                results[uid] = postprocess.RawResultV2(
                    uid, gathered["start_top_log_probs"][i], gathered["start_top_index"][i],
                    gathered["end_top_log_probs"][i], gathered["end_top_index"][i], float(gathered["cls_logits"][i]))
            else:
                results[uid] = postprocess.RawResultV1(uid, gathered["start_logits"][i].astype(np.float64),
                                                       gathered["end_logits"][i].astype(np.float64))
        metas = records.feature_metas(split.cached)
        if s.version_2:
            return postprocess.predict_v2(split.examples, metas, results, s.n_best_size, s.max_answer_length,
                                          s.null_score_diff_threshold)
        return postprocess.predict_v1(split.examples, metas, results, s.n_best_size, s.max_answer_length)

    @functools.cached_property
    def _predict_dataset(self) -> dict:
        return data.load_squad(self.predict_file)

    def _score(self, answers: postprocess.SquadPredictions) -> dict[str, Any]:
        return postprocess.evaluate_predictions(self._predict_dataset, answers, self.settings.null_score_diff_threshold)

    def metrics(self, split: Split, gathered: Mapping[str, np.ndarray], step: int) -> dict[str, Any]:
        return self._score(self.answers(split, gathered))

    def write_predictions(self, output_dir: str, split: Split, gathered: Mapping[str, np.ndarray],
                          context: PredictContext) -> dict[str, Any]:
        answers = self.answers(split, gathered)
        paths = postprocess.write_prediction_files(output_dir, answers)
        for path in paths:
            logging.info("Wrote %s", path)
        written: dict[str, Any] = {"predictions": paths}
        if has_gold_answers(self.predict_file, self._predict_dataset):
            metrics = self._score(answers)
            for key, value in metrics.items():
                logging.info("  %s = %s", key, value)
            results = os.path.join(output_dir, EVAL_RESULTS_FILE)
            if context.selected:  # the original's closing block after every checkpoint's
                block = postprocess.final_block(metrics, context.step, self.settings.version_2)
                atomic_write_text(results, (read_text(results) or "") + block)
            else:
                write_eval_results(results, metrics, postprocess.RESULTS_LAYOUT)
            written["eval_results"] = results  # the summary names it in either mode
            written["metrics"] = metrics
        return written

    def export(self, model, export_dir: str) -> dict[str, Any]:
        from albert_tf.squad.export import export_span_model

        if self.settings.version_2:
            raise ValueError("--export_dir exports the SQuAD 1.1 span model (run_squad_v1.py's); "
                             "not available with --version_2_with_negative")
        return {"export": list(export_span_model(model, export_dir, self.settings.max_seq_length,
                                                     self.serving_precision))}
