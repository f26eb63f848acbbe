"""SQuAD fine-tuning and prediction on top of the shared training loop.

``run_squad.py`` parses flags and calls ``train`` and ``predict`` here:

- ``train``: cached training features (``training_features``) ->
  ``albert_tf.training.Trainer`` (resume, checkpoints, distribution, precision, XLA
  are the loop's); the driver sets the original's step count
  ``int(num_examples / train_batch_size * num_train_epochs)`` (``num_train_steps``)
  and the optimizer.
- ``predict``: cached prediction features -> one pass of the model over every
  feature (the one evaluation path, ``albert_tf.training.evaluation``) ->
  ``postprocess`` -> predictions.json, nbest_predictions.json, null_odds.json (2.0)
  and, when the file has gold answers, eval_results.txt. It runs once and returns:
  nothing waits for new checkpoints.
- ``predict_best``: when the file has gold answers and ``output_dir`` has checkpoints,
  the original's model selection: every checkpoint is scored once (the shared
  ``CheckpointEvaluator``; with training, as each is saved, so pruning never deletes
  an unscored one), the best by ``postprocess.key_metric`` is kept as model.ckpt-best,
  and the prediction files come from it; eval_results.txt gets one block per
  checkpoint and the original's closing block.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.config import AlbertConfig
from albert_tf.fileio import atomic_write_text, read_text
from albert_tf.keras import keras
from albert_tf.modeling.encoder import AlbertModel
from albert_tf.squad import data, heads, postprocess, records
from albert_tf.training.evaluation import BatchRunner
from albert_tf.training.loop import TrainConfig
from albert_tf.training.results import EVAL_RESULTS_FILE, write_eval_results
from albert_tf.weights import files


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
    use_one_hot_embeddings: bool = False  # on TPUs (training.one_hot_embeddings)


def new_model(config: AlbertConfig, s: SquadSettings) -> keras.Model:
    encoder = AlbertModel(config, s.use_one_hot_embeddings)
    if s.version_2:
        return heads.SquadV2Model(encoder, s.start_n_top, s.end_n_top, s.dropout_prob)
    return heads.SquadV1Model(encoder)


def loss_fn(version_2: bool) -> Callable:
    """The Task's loss: the original's batch mean (no extra metrics)."""
    def compute(model, features, training):
        outputs = model(features, training=training)
        return heads.squad_loss(outputs, features, version_2), {}
    return compute


def num_train_steps(num_examples: int, train_batch_size: int, num_train_epochs: float) -> int:
    """The original's count (examples, not windows), at least 1."""
    return max(1, int(num_examples / train_batch_size * num_train_epochs))


def training_features(s: SquadSettings, train_file: str, train_feature_file: str) -> records.CachedFeatures:
    """The cached training features (built on first use); their example count sets the steps."""
    return records.build_or_load(
        train_file, train_feature_file, s.spm_model_file, s.max_seq_length, s.doc_stride,
        s.max_query_length, is_training=True, do_lower_case=s.do_lower_case)


def train(config: AlbertConfig, s: SquadSettings, strategy: tf.distribute.Strategy,
          cached: records.CachedFeatures, train_config: TrainConfig, optimizer_fn: Callable,
          init_checkpoint: str | None = None, evaluator_for: Callable | None = None):
    """Fine-tunes on ``training_features``; returns the Trainer (its ``.model`` holds the final weights).

    evaluator_for: ``model -> CheckpointEvaluator`` scoring each checkpoint as it is saved."""
    from albert_tf.training import Task, Trainer, make_tfrecord_dataset
    from albert_tf.weights import fine_tuning_init

    batch = train_config.train_batch_size
    logging.info("SQuAD training: %d examples, %d features, batch %d, %d steps",
                 cached.num_examples, cached.num_features, batch, train_config.num_train_steps)

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        return make_tfrecord_dataset(
            cached.record_file,
            lambda r: records.decode_record(r, s.max_seq_length, True),
            ctx.get_per_replica_batch_size(batch), is_training=True,
            input_context=ctx, seed=train_config.seed, shuffle_buffer_size=100, shard_mode="records")

    task = Task(build_model=lambda: new_model(config, s), loss_fn=loss_fn(s.version_2),
                train_dataset_fn=dataset_fn, init_fn=fine_tuning_init(init_checkpoint))
    trainer = Trainer(task, strategy, optimizer_fn, train_config)
    if evaluator_for is not None and trainer.worker.is_chief:
        evaluator = evaluator_for(trainer.model)
        evaluator.evaluate_pending()  # left over by an interrupted run
        trainer.add_save_hook(evaluator.after_save)
    trainer.train()
    return trainer


def predict_weights_source(output_dir: str, init_checkpoint: str | None, prefer_best: bool = False) -> str:
    """Which checkpoint a predict-only run uses: the latest one in ``output_dir``
    (what fine-tuning wrote), else ``init_checkpoint``; with ``prefer_best`` (exports),
    model.ckpt-best first."""
    best = os.path.join(output_dir, files.BEST_BASENAME)
    if prefer_best and tf.io.gfile.exists(best + ".index"):
        return best
    latest = tf.train.latest_checkpoint(output_dir) if tf.io.gfile.isdir(output_dir) else None
    if latest:
        return latest
    if init_checkpoint:
        return init_checkpoint
    raise ValueError(f"--do_predict without --do_train needs a fine-tuned checkpoint: none in "
                     f"--output_dir={output_dir} and no --init_checkpoint given")


def load_for_prediction(config: AlbertConfig, s: SquadSettings, strategy: tf.distribute.Strategy,
                        checkpoint: str) -> keras.Model:
    from albert_tf.weights import load_checkpoint
    from albert_tf.weights.loading import CheckpointError

    with strategy.scope():
        model = new_model(config, s)
        model(model.dummy_inputs(seq_length=max(8, s.start_n_top, s.end_n_top)))
    try:
        report = load_checkpoint(model, checkpoint)
    except CheckpointError as e:
        raise CheckpointError(
            f"{e}\n(prediction needs the SQuAD head: give a checkpoint fine-tuned with "
            f"{'--version_2_with_negative' if s.version_2 else 'the 1.1 head'}, or --do_train)") from None
    logging.info("Predicting with %s", report.summary())
    return model


def run_model(model: keras.Model, cached: records.CachedFeatures, batch_size: int,
              version_2: bool) -> dict[int, object]:
    """The model's raw outputs for every prediction feature, by unique id."""

    def step(batch):
        features = {k: v for k, v in batch.items() if k != "unique_ids"}
        return {**model(features, training=False), "unique_ids": batch["unique_ids"]}

    out = BatchRunner(step).gather(records.make_dataset(cached, batch_size))
    results: dict[int, object] = {}
    for i, uid in enumerate(out.get("unique_ids", ())):
        uid = int(uid)
        if version_2:
            results[uid] = postprocess.RawResultV2(
                uid, out["start_top_log_probs"][i], out["start_top_index"][i],
                out["end_top_log_probs"][i], out["end_top_index"][i], float(out["cls_logits"][i]))
        else:
            results[uid] = postprocess.RawResultV1(
                uid, out["start_logits"][i].astype(np.float64), out["end_logits"][i].astype(np.float64))
    if len(results) != cached.num_features:
        raise RuntimeError(f"model produced {len(results)} outputs for {cached.num_features} features")
    return results


def has_gold_answers(dataset: dict) -> bool:
    """True when the file can be scored: every question has answers or is marked impossible."""
    return all(qa.get("answers") or qa.get("is_impossible")
               for _, _, qa in data.iter_questions(dataset, "<predict_file>"))


def predict(model: keras.Model, s: SquadSettings, predict_file: str, predict_feature_file: str,
            output_dir: str, predict_batch_size: int = 8, predict_feature_left_file: str | None = None,
            write_files: bool = True) -> tuple[postprocess.SquadPredictions, dict | None]:
    """Answers every question of ``predict_file``; returns (predictions, metrics or None)."""
    cached = records.build_or_load(
        predict_file, predict_feature_file, s.spm_model_file, s.max_seq_length, s.doc_stride,
        s.max_query_length, is_training=False, do_lower_case=s.do_lower_case,
        side_file=predict_feature_left_file)
    logging.info("SQuAD prediction: %d questions, %d features, batch %d",
                 cached.num_examples, cached.num_features, predict_batch_size)
    results = run_model(model, cached, predict_batch_size, s.version_2)
    examples = data.read_squad_examples(predict_file, is_training=False)
    if s.version_2:
        answers = postprocess.predict_v2(examples, cached.metas, results, s.n_best_size,
                                         s.max_answer_length, s.null_score_diff_threshold)
    else:
        answers = postprocess.predict_v1(examples, cached.metas, results, s.n_best_size,
                                         s.max_answer_length)
    dataset = data.load_squad(predict_file)
    metrics = None
    if has_gold_answers(dataset):
        metrics = postprocess.evaluate_predictions(dataset, answers, s.null_score_diff_threshold)
        for key, value in metrics.items():
            logging.info("  %s = %s", key, value)
    if write_files:
        for path in postprocess.write_prediction_files(output_dir, answers):
            logging.info("Wrote %s", path)
        if metrics is not None:
            write_eval_results(os.path.join(output_dir, EVAL_RESULTS_FILE), metrics, postprocess.RESULTS_LAYOUT)
    return answers, metrics


@dataclasses.dataclass
class PredictJob:
    """Where prediction reads and writes (the driver's flags)."""

    predict_file: str
    predict_feature_file: str
    output_dir: str
    predict_batch_size: int = 8
    predict_feature_left_file: str | None = None

    def run(self, model: keras.Model, s: SquadSettings, write_files: bool = True):
        return predict(model, s, self.predict_file, self.predict_feature_file, self.output_dir,
                       self.predict_batch_size, self.predict_feature_left_file, write_files)


def checkpoint_evaluator(model: keras.Model, s: SquadSettings, job: PredictJob):
    """Scores a checkpoint of ``job.output_dir`` on the predict file (its weights loaded into ``model``)."""
    from albert_tf.training.checkpoint_policy import CheckpointEvaluator
    from albert_tf.weights import load_checkpoint

    def evaluate(path: str) -> dict:
        _, metrics = job.run(model, s, write_files=False)
        logging.info("%s: %s = %s", path, postprocess.key_metric(s.version_2),
                     metrics[postprocess.key_metric(s.version_2)])
        return metrics

    return CheckpointEvaluator(job.output_dir, evaluate, postprocess.key_metric(s.version_2),
                               postprocess.checkpoint_layout(s.version_2),
                               load=lambda path: load_checkpoint(model, path))


def has_checkpoints(output_dir: str) -> bool:
    return bool(files.all_checkpoints(output_dir)) or tf.io.gfile.exists(
        os.path.join(output_dir, files.BEST_BASENAME) + ".index")


def predict_best(model: keras.Model, s: SquadSettings, job: PredictJob) -> tuple[str, dict]:
    """Scores the not-yet-scored checkpoints of ``job.output_dir``, then answers with
    model.ckpt-best; returns (its path, its metrics)."""
    from albert_tf.weights import load_checkpoint

    evaluator = checkpoint_evaluator(model, s, job)
    evaluator.evaluate_pending()
    best = os.path.join(job.output_dir, files.BEST_BASENAME)
    load_checkpoint(model, best)
    answers, metrics = job.run(model, s, write_files=False)
    for path in postprocess.write_prediction_files(job.output_dir, answers):
        logging.info("Wrote %s", path)
    _, best_step, _ = evaluator.keeper.read()
    results = os.path.join(job.output_dir, EVAL_RESULTS_FILE)
    atomic_write_text(results, (read_text(results) or "") + postprocess.final_block(metrics, best_step, s.version_2))
    return best, metrics
