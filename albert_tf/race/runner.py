"""RACE fine-tuning jobs: train, evaluate every checkpoint, predict the test split.

`run_race.py` maps its flags onto a `RaceJob` and calls `run_job`. As GLUE's runner
(`albert_tf.glue.runner`): training on the shared Trainer; with `do_eval` each
checkpoint is evaluated as it is saved (`CheckpointEvaluator`), the best by
`eval_accuracy` kept as `model.ckpt-best`; predict uses model.ckpt-best, else the
latest checkpoint, else `--init_checkpoint`. Differences from the original: eval and
predict never drop a question (padding rows fill the last batch and are not
counted); the dev results add each level's accuracy; predict also writes one line per
question (`test_predictions.jsonl`).
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.config import AlbertConfig
from albert_tf.modeling.encoder import AlbertModel
from albert_tf.race import outputs, records
from albert_tf.race.data import RaceExample, race_files, read_race
from albert_tf.race.features import Tokenizer, check_lengths
from albert_tf.race.model import RaceModel, build_race_model, loss_fn
from albert_tf.training.checkpoint_policy import BestCheckpointKeeper, CheckpointEvaluator
from albert_tf.training.distribution import worker_info
from albert_tf.training.evaluation import BatchRunner, gather_real_examples
from albert_tf.training.loop import TrainConfig
from albert_tf.training.results import EVAL_RESULTS_FILE
from albert_tf.training.summaries import write_scalars
from albert_tf.weights import files, fine_tuning_init, load_checkpoint

# split -> the original's default record file in output_dir
RECORD_FILES = {"train": "train.tf_record", "dev": "eval.tf_record", "test": "predict.tf_record"}


@dataclasses.dataclass
class RaceJob:
    """Everything a RACE run needs (the driver's flags, checked). `record_files` maps a
    split to its cache path (--train_file / --eval_file / --predict_file; default the
    original's names in output_dir)."""

    data_dir: str
    output_dir: str
    albert_config: AlbertConfig
    tokenizer: Tokenizer
    tokenizer_id: str
    max_seq_length: int = 512
    max_qa_length: int = 128
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    dropout_prob: float = 0.1
    high_only: bool = False
    middle_only: bool = False
    use_one_hot_embeddings: bool = False
    record_files: dict[str, str | None] = dataclasses.field(default_factory=dict)
    init_checkpoint: str | None = None
    train: TrainConfig | None = None
    optimizer_fn: Callable | None = None


@dataclasses.dataclass(frozen=True)
class Split:
    examples: list[RaceExample]
    features: records.CachedFeatures


def load_split(job: RaceJob, split: str) -> Split:
    """The examples of a split and their cached records."""
    examples = read_race(job.data_dir, split, job.high_only, job.middle_only)
    data_files = [path for _, path in race_files(job.data_dir, split, job.high_only, job.middle_only)]
    record_file = job.record_files.get(split) or os.path.join(job.output_dir, RECORD_FILES[split])
    features = records.cached_features(examples, data_files, record_file, job.tokenizer, job.tokenizer_id,
                                       job.max_seq_length, job.max_qa_length)
    return Split(examples, features)


def new_model(job: RaceJob) -> RaceModel:
    """An unbuilt model (the Trainer builds it in its strategy's scope)."""
    return RaceModel(AlbertModel(job.albert_config, use_one_hot_embeddings=job.use_one_hot_embeddings),
                     job.dropout_prob)


def build_model(job: RaceJob) -> RaceModel:
    return build_race_model(job.albert_config, job.dropout_prob, job.use_one_hot_embeddings)


def _model_inputs(batch):
    return {k: batch[k] for k in records.MODEL_INPUTS}


def train_loss_fn(model, batch, training):
    """The Trainer's `loss_fn(model, features, training) -> (loss, metrics)`."""
    logits = model(_model_inputs(batch), training=training)["logits"]
    weight = tf.cast(batch["is_real_example"], tf.float32)
    correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), batch["label_ids"]), tf.float32)
    return loss_fn(logits, batch["label_ids"], weight), {"accuracy": (tf.reduce_sum(correct * weight),
                                                                      tf.reduce_sum(weight))}


def output_runner(model) -> BatchRunner:
    def step(batch):
        out = model(_model_inputs(batch), training=False)
        return {"logits": out["logits"], "probabilities": out["probabilities"],
                "is_real_example": batch["is_real_example"]}

    return BatchRunner(step)


def gather_split(runner: BatchRunner, split: Split, batch_size: int) -> dict[str, np.ndarray]:
    """`logits` and `probabilities` of every question of a split, in file order."""
    return gather_real_examples(runner, records.make_eval_dataset(split.features, batch_size), len(split.examples),
                                "RACE questions")


class DevEvaluation:
    """`evaluate(checkpoint_path)` for the CheckpointEvaluator: dev metrics of the model's weights."""

    def __init__(self, job: RaceJob, model):
        self.job = job
        self.runner = output_runner(model)
        self.dev = load_split(job, "dev")

    def __call__(self, checkpoint_path: str) -> dict[str, float]:
        global_step = files.step_of(checkpoint_path) or 0
        out = gather_split(self.runner, self.dev, self.job.eval_batch_size)
        results = outputs.compute_metrics(self.dev.examples, out["logits"])
        write_scalars(os.path.join(self.job.output_dir, "eval"), global_step, results)
        results["global_step"] = int(global_step)
        logging.info("Eval results at step %d: %s", global_step,
                     ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
        return results


def checkpoint_evaluator(job: RaceJob, model) -> CheckpointEvaluator:
    return CheckpointEvaluator(job.output_dir, DevEvaluation(job, model), outputs.KEY_METRIC,
                               outputs.RESULTS_LAYOUT, load=lambda path: load_checkpoint(model, path))


def train(job: RaceJob, strategy: tf.distribute.Strategy, evaluate: bool):
    """Trains to `train.num_train_steps`, evaluating each saved checkpoint with `evaluate`."""
    from albert_tf.training import Task, Trainer

    if job.train is None or job.optimizer_fn is None:
        raise ValueError("training needs the loop's settings and an optimizer (RaceJob.train, .optimizer_fn)")
    config = dataclasses.replace(job.train, output_dir=job.output_dir)
    data = load_split(job, "train")
    logging.info("Training on %d RACE questions, %d steps of %d.", len(data.examples), config.num_train_steps,
                 config.train_batch_size)

    task = Task(build_model=lambda: new_model(job),
                loss_fn=train_loss_fn,
                train_dataset_fn=records.train_dataset_fn(data.features, config.train_batch_size, config.seed),
                init_fn=fine_tuning_init(job.init_checkpoint))
    trainer = Trainer(task, strategy, job.optimizer_fn, config)
    if evaluate and trainer.worker.is_chief:
        evaluator = checkpoint_evaluator(job, trainer.model)
        evaluator.evaluate_pending()  # left over by an interrupted run
        trainer.add_save_hook(evaluator.after_save)
    trainer.train()
    return trainer.model


def resolve_weights(job: RaceJob) -> str:
    """model.ckpt-best in output_dir, else its latest checkpoint, else --init_checkpoint."""
    best = os.path.join(job.output_dir, files.BEST_BASENAME)
    if tf.io.gfile.exists(best + ".index"):
        return best
    latest = tf.train.latest_checkpoint(job.output_dir)
    if latest:
        return latest
    if job.init_checkpoint:
        return job.init_checkpoint
    raise ValueError(f"no weights to use: {job.output_dir} has no model.ckpt-best and no checkpoint, and "
                     f"--init_checkpoint is not set (train first with --do_train, or pass --init_checkpoint)")


def weights_step(job: RaceJob, weights: str) -> int:
    """The training step of the weights used (model.ckpt-best: the step it was copied from)."""
    if os.path.abspath(weights) == os.path.join(job.output_dir, files.BEST_BASENAME):
        _, best_step, _ = BestCheckpointKeeper(job.output_dir, outputs.KEY_METRIC).read()
        return max(best_step, 0)
    return int(files.step_of(weights) or 0)


def predict(job: RaceJob, model, weights: str) -> dict[str, str]:
    """Evaluates the test split: predict_results.txt and test_predictions.jsonl."""
    test = load_split(job, "test")
    out = gather_split(output_runner(model), test, job.predict_batch_size)
    results = outputs.compute_metrics(test.examples, out["logits"])
    results["global_step"] = weights_step(job, weights)
    paths = {"predict_results": outputs.write_predict_results(job.output_dir, results),
             "test_predictions": outputs.write_predictions(job.output_dir, test.examples, out["probabilities"])}
    logging.info("Predicted %d test questions with %s: %s", len(test.examples), weights,
                 ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
    return paths


def run_job(job: RaceJob, strategy: tf.distribute.Strategy, do_train: bool, do_eval: bool,
            do_predict: bool) -> dict[str, object]:
    """Runs the requested stages; returns what they produced (for callers and tests)."""
    if not (do_train or do_eval or do_predict):
        raise ValueError("at least one of --do_train, --do_eval or --do_predict is needed")
    check_lengths(job.max_seq_length, job.max_qa_length)
    job = dataclasses.replace(job, output_dir=os.path.abspath(job.output_dir))
    for split, wanted in (("train", do_train), ("dev", do_eval), ("test", do_predict)):
        if wanted:  # a missing folder is reported before any work
            race_files(job.data_dir, split, job.high_only, job.middle_only)
    tf.io.gfile.makedirs(job.output_dir)
    produced: dict[str, object] = {}
    model = None
    if do_train:
        model = train(job, strategy, evaluate=do_eval)
    if not worker_info(strategy).is_chief:
        return produced
    if do_eval and not do_train:
        model = build_model(job)
        evaluator = checkpoint_evaluator(job, model)
        if not evaluator.pending() and not files.all_checkpoints(job.output_dir):
            evaluator.evaluate_external(resolve_weights(job))
        else:
            evaluator.evaluate_pending()
    if do_eval:
        produced["eval_results"] = os.path.join(job.output_dir, EVAL_RESULTS_FILE)
    if do_predict:
        weights = resolve_weights(job)
        model = model or build_model(job)
        load_checkpoint(model, weights)
        produced["weights"] = weights
        produced.update(predict(job, model, weights))
    return produced
