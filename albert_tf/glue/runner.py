"""GLUE fine-tuning jobs: train, evaluate every checkpoint, predict, export.

`run_classifier.py` maps its flags onto a `GlueJob` and calls `run_job`; the work is
here so the driver stays flags-then-calls.

How it differs from the original's `run_classifier.py` (and why):
- Training goes through the shared `albert_tf.training.Trainer` (any tf.distribute
  strategy, mixed precision, exact resume).
- With `do_eval`, each checkpoint is evaluated right after it is saved (the
  Trainer's save hook, as for pretraining), so every checkpoint is seen before the
  `keep_checkpoint_max` pruning deletes it; the original kept all checkpoints on
  disk (hundreds of GB for large models) and evaluated them afterwards. The best by
  the task's key metric is copied to `model.ckpt-best` and recorded in
  `best_trial.txt` (the original's format). A rerun evaluates the checkpoints it has
  not evaluated yet, then continues training.
- Metrics are computed in numpy over the whole dev set (F1, Spearman added), on the
  outputs the one evaluation path (`albert_tf.training.evaluation`) gathers; eval and
  predict never drop examples.
- Weights for eval without training, predict and export: `model.ckpt-best` in
  output_dir, else its latest checkpoint, else `--init_checkpoint` (which then must
  hold the classifier head), so `--init_checkpoint=<MNLI run>/model.ckpt-best
  --task_name=ax --do_predict` predicts the diagnostic set with an MNLI model.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.config import AlbertConfig
from albert_tf.glue import export, features, heads, metrics, outputs
from albert_tf.glue.processors import GlueProcessor, get_processor
from albert_tf.modeling.encoder import AlbertModel
from albert_tf.training.checkpoint_policy import CheckpointEvaluator
from albert_tf.training.distribution import worker_info
from albert_tf.training.evaluation import BatchRunner, gather_real_examples
from albert_tf.training.loop import TrainConfig
from albert_tf.training.results import EVAL_RESULTS_FILE
from albert_tf.training.summaries import write_scalars
from albert_tf.weights import files, fine_tuning_init, load_checkpoint

@dataclasses.dataclass
class GlueJob:
    """Everything a GLUE run needs (the driver's flags, checked).

    `train` holds the loop's settings (from `train_config_from_flags`; its output_dir is
    this job's) and `optimizer_fn` builds the optimizer; both are needed only to train.
    """

    task_name: str
    data_dir: str
    output_dir: str
    albert_config: AlbertConfig
    tokenizer: features.Tokenizer
    tokenizer_id: str
    max_seq_length: int
    eval_batch_size: int
    predict_batch_size: int
    spm_model_file: str | None = None
    do_lower_case: bool = True
    cached_dir: str | None = None
    init_checkpoint: str | None = None
    train: TrainConfig | None = None
    optimizer_fn: Callable | None = None
    export_dir: str | None = None
    threshold_to_export: float | None = None
    use_one_hot_embeddings: bool = False  # on TPUs (training.one_hot_embeddings)

    @property
    def processor(self) -> GlueProcessor:
        return get_processor(self.task_name)

    @property
    def features_dir(self) -> str:
        return self.cached_dir or os.path.join(self.output_dir, "cached_features")


def split_features(job: GlueJob, split: str) -> features.CachedFeatures:
    return features.cached_features(job.processor, job.data_dir, split, job.features_dir,
                                    job.tokenizer, job.tokenizer_id, job.max_seq_length)


def _model_inputs(batch: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    return {k: batch[k] for k in features.MODEL_INPUTS}


def make_loss_fn(regression: bool) -> Callable:
    """The Trainer's `loss_fn(model, features, training) -> (loss, metrics)`."""

    def loss_fn(model, batch, training):
        outputs_ = model(_model_inputs(batch), training=training)
        weight = tf.cast(batch["is_real_example"], tf.float32)
        loss = heads.loss_fn(outputs_, batch["label_ids"], regression, sample_weight=weight)
        if regression:
            return loss, {}
        predicted = tf.argmax(outputs_["logits"], axis=-1, output_type=tf.int32)
        correct = tf.cast(tf.equal(predicted, tf.cast(batch["label_ids"], tf.int32)), tf.float32)
        return loss, {"accuracy": (tf.reduce_sum(correct * weight), tf.reduce_sum(weight))}

    return loss_fn


def output_runner(model) -> BatchRunner:
    """What evaluation and prediction gather from each batch (on this host)."""

    def step(batch):
        out = model(_model_inputs(batch), training=False)
        return {"logits": out["logits"], "probabilities": out["probabilities"],
                "label_ids": batch["label_ids"], "is_real_example": batch["is_real_example"]}

    return BatchRunner(step)


def gather_split(runner: BatchRunner, cached: features.CachedFeatures, batch_size: int) -> dict[str, np.ndarray]:
    """`logits`, `probabilities`, `label_ids` of the real examples of a split, in file order."""
    return gather_real_examples(runner, features.make_eval_dataset(cached, batch_size), cached.num_examples)


class DevEvaluation:
    """`evaluate(checkpoint_path)` for the CheckpointEvaluator: the task's metrics of the
    model's current weights on the dev set (+ TensorBoard, log)."""

    def __init__(self, job: GlueJob, model):
        self.job = job
        self.model = model
        self.runner = output_runner(model)
        self.dev = split_features(job, "dev")

    def __call__(self, checkpoint_path: str) -> dict[str, float]:
        global_step = files.step_of(checkpoint_path) or 0
        out = gather_split(self.runner, self.dev, self.job.eval_batch_size)
        results = metrics.compute_glue_metrics(self.job.task_name, out["label_ids"], out["logits"])
        results["global_step"] = int(global_step)
        write_scalars(os.path.join(self.job.output_dir, "eval"), global_step,
                      {k: v for k, v in results.items() if k not in ("global_step", "num_examples")})
        logging.info("Eval results at step %d: %s", global_step,
                     ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
        return results


def checkpoint_evaluator(job: GlueJob, model) -> CheckpointEvaluator:
    """Evaluates each checkpoint of output_dir once, keeps the best by the task's key metric."""
    return CheckpointEvaluator(job.output_dir, DevEvaluation(job, model), metrics.key_metric(job.task_name),
                               outputs.RESULTS_LAYOUT, load=lambda path: load_checkpoint(model, path))


def make_trainer(job: GlueJob, strategy: tf.distribute.Strategy):
    from albert_tf.training import Task, Trainer

    if job.train is None or job.optimizer_fn is None:
        raise ValueError("training needs the loop's settings and an optimizer (GlueJob.train, .optimizer_fn)")
    config = dataclasses.replace(job.train, output_dir=job.output_dir)
    spec = job.processor.spec
    train = split_features(job, "train")
    logging.info("Training on %d %s examples, %d steps of %d.", train.num_examples, spec.name,
                 config.num_train_steps, config.train_batch_size)

    task = Task(
        build_model=lambda: heads.GlueClassifier(AlbertModel(job.albert_config, job.use_one_hot_embeddings),
                                                 spec.num_labels, spec.is_regression),
        loss_fn=make_loss_fn(spec.is_regression),
        train_dataset_fn=features.train_dataset_fn(train, config.train_batch_size, config.seed),
        init_fn=fine_tuning_init(job.init_checkpoint),
    )
    return Trainer(task, strategy, job.optimizer_fn, config)


def train(job: GlueJob, strategy: tf.distribute.Strategy, evaluate: bool):
    """Trains to `train.num_train_steps`; with `evaluate`, evaluates each checkpoint as it is
    saved (on the chief worker only). Returns the trained model."""
    trainer = make_trainer(job, strategy)
    if evaluate and trainer.worker.is_chief:
        evaluator = checkpoint_evaluator(job, trainer.model)
        evaluator.evaluate_pending()  # left over by an interrupted run
        trainer.add_save_hook(evaluator.after_save)
    trainer.train()
    return trainer.model


def resolve_weights(job: GlueJob) -> tuple[str, bool]:
    """(checkpoint for eval-without-training/predict/export, whether it is in output_dir)."""
    best = os.path.join(job.output_dir, files.BEST_BASENAME)
    if tf.io.gfile.exists(best + ".index"):
        return best, True
    latest = tf.train.latest_checkpoint(job.output_dir)
    if latest:
        return latest, True
    if job.init_checkpoint:
        return job.init_checkpoint, False
    raise ValueError(
        f"no weights to use: {job.output_dir} has no model.ckpt-best and no checkpoint, and "
        f"--init_checkpoint is not set (train first with --do_train, or pass --init_checkpoint)")


def build_model(job: GlueJob) -> heads.GlueClassifier:
    return heads.build_classifier(job.albert_config, job.task_name, job.use_one_hot_embeddings)


def predict(job: GlueJob, model) -> tuple[str, str]:
    """Writes test_results.tsv and submit_results.tsv for the test split."""
    processor = job.processor
    out = gather_split(output_runner(model), split_features(job, "test"), job.predict_batch_size)
    examples = processor.get_test_examples(job.data_dir)
    paths = outputs.write_predictions(job.output_dir, processor.spec, examples, out["probabilities"])
    logging.info("Wrote predictions for %d test examples: %s", len(examples), ", ".join(paths))
    return paths


def run_job(job: GlueJob, strategy: tf.distribute.Strategy, do_train: bool, do_eval: bool,
            do_predict: bool) -> dict[str, object]:
    """Runs the requested stages; returns what they produced (for callers and tests)."""
    if not (do_train or do_eval or do_predict or job.export_dir):
        raise ValueError("at least one of --do_train, --do_eval, --do_predict or --export_dir is needed")
    # Absolute paths: checkpoint state files list paths relative to their directory.
    job = dataclasses.replace(job, output_dir=os.path.abspath(job.output_dir))
    processor = job.processor
    for split, wanted in (("train", do_train), ("dev", do_eval), ("test", do_predict)):
        if wanted:
            processor.data_file(job.data_dir, split)  # unknown split: a clear error before any work
    tf.io.gfile.makedirs(job.output_dir)
    produced: dict[str, object] = {}
    model = None
    if do_train:
        model = train(job, strategy, evaluate=do_eval)
    if not worker_info(strategy).is_chief:
        return produced  # other workers only help train; the chief writes every file
    if do_eval and not do_train:  # with do_train, train() evaluated each checkpoint as it was saved
        model = build_model(job)
        evaluator = checkpoint_evaluator(job, model)
        if not evaluator.pending() and not files.all_checkpoints(job.output_dir):
            path, _ = resolve_weights(job)
            evaluator.evaluate_external(path)
        else:
            evaluator.evaluate_pending()
    if do_eval:
        produced["eval_results"] = os.path.join(job.output_dir, EVAL_RESULTS_FILE)
    if do_predict or job.export_dir:
        path, _ = resolve_weights(job)
        if model is None:
            model = build_model(job)
        load_checkpoint(model, path)
        produced["weights"] = path
        if do_predict:
            produced["predictions"] = predict(job, model)
        if job.export_dir:
            produced["export"] = export.export_classifier(
                model, processor.spec, job.export_dir, job.max_seq_length, job.spm_model_file,
                job.do_lower_case, job.threshold_to_export)
            logging.info("Exported the SavedModel to %s", produced["export"])
    return produced
