"""GLUE fine-tuning jobs: train, evaluate every checkpoint, predict, export.

`run_classifier.py` maps its flags onto a `GlueJob` and calls `run_job`; the work is
here so the driver stays flags-then-calls.

How it differs from the original's `run_classifier.py` (and why):
- Training goes through the shared `albert_tf.training.Trainer` (any tf.distribute
  strategy, mixed precision, exact resume).
- With `do_eval`, each checkpoint is evaluated right after it is saved (training
  runs from one save to the next), so every checkpoint is seen before the
  `keep_checkpoint_max` pruning deletes it; the original kept all checkpoints on
  disk (hundreds of GB for large models) and evaluated them afterwards. The best by
  the task's key metric is copied to `model.ckpt-best` and recorded in
  `best_trial.txt` (the original's format). A rerun evaluates the checkpoints it has
  not evaluated yet, then continues training.
- Metrics are computed in numpy over the whole dev set (F1, Spearman added); eval
  and predict never drop examples.
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

from albert_tf.checkpoints import load_checkpoint
from albert_tf.config import AlbertConfig
from albert_tf.glue import export, features, heads, metrics, outputs
from albert_tf.glue.processors import GlueProcessor, get_processor
from albert_tf.training import checkpointing
from albert_tf.training.distribution import worker_info
from albert_tf.training.loop import write_scalar_summary


@dataclasses.dataclass
class GlueJob:
    """Everything a GLUE run needs (the driver's flags, checked)."""

    task_name: str
    data_dir: str
    output_dir: str
    albert_config: AlbertConfig
    tokenizer: features.Tokenizer
    tokenizer_id: str
    spm_model_file: str | None = None
    do_lower_case: bool = True
    cached_dir: str | None = None
    init_checkpoint: str | None = None
    max_seq_length: int = 512
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    learning_rate: float = 5e-5
    train_step: int = 1000
    warmup_step: int = 0
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    iterations_per_loop: int = 1000
    optimizer: str = "adamw"
    seed: int = 12345
    log_steps: int = 100
    gradient_accumulation_steps: int = 1
    enable_xla: bool | str = False  # True, False or "force" (albert_tf.training.xla)
    export_dir: str | None = None
    threshold_to_export: float | None = None

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


class Predictor:
    """Runs a model over eval/predict batches and gathers its outputs (on this host)."""

    def __init__(self, model):
        self.model = model
        self._forward = tf.function(lambda batch: model(_model_inputs(batch), training=False))

    def run(self, cached: features.CachedFeatures, batch_size: int) -> dict[str, np.ndarray]:
        """`logits`, `probabilities`, `label_ids` of the real examples, in file order."""
        gathered: dict[str, list[np.ndarray]] = {"logits": [], "probabilities": [], "label_ids": [],
                                                 "is_real_example": []}
        for batch in features.make_eval_dataset(cached, batch_size):
            out = self._forward(batch)
            for key in ("logits", "probabilities"):
                gathered[key].append(out[key].numpy())
            gathered["label_ids"].append(batch["label_ids"].numpy())
            gathered["is_real_example"].append(batch["is_real_example"].numpy())
        result = {k: np.concatenate(v) for k, v in gathered.items()}
        real = result.pop("is_real_example") > 0
        result = {k: v[real] for k, v in result.items()}
        if len(result["label_ids"]) != cached.num_examples:
            raise RuntimeError(f"predicted {len(result['label_ids'])} of {cached.num_examples} examples")
        return result


class CheckpointEvaluator:
    """Evaluates checkpoints of output_dir once each, keeps the best, writes the files."""

    def __init__(self, job: GlueJob, model):
        self.job = job
        self.model = model
        self.predictor = Predictor(model)
        self.dev = split_features(job, "dev")
        self.key = metrics.key_metric(job.task_name)
        self.keeper = checkpointing.BestCheckpointKeeper(job.output_dir, self.key)
        self.results_path = os.path.join(job.output_dir, outputs.EVAL_RESULTS_FILE)

    def evaluate_weights(self, global_step: int) -> dict[str, float]:
        """Metrics of the model's current weights on the dev set (+ TensorBoard, log)."""
        out = self.predictor.run(self.dev, self.job.eval_batch_size)
        results = metrics.compute_glue_metrics(self.job.task_name, out["label_ids"], out["logits"])
        results["global_step"] = int(global_step)
        writer = tf.summary.create_file_writer(os.path.join(self.job.output_dir, "eval"))
        with writer.as_default(step=int(global_step)):
            for name, value in results.items():
                if name not in ("global_step", "num_examples"):
                    write_scalar_summary(name, float(value))
        writer.flush()
        logging.info("Eval results at step %d: %s", global_step,
                     ", ".join(f"{k} = {v}" for k, v in sorted(results.items())))
        return results

    def pending(self) -> list[str]:
        last, _, _ = self.keeper.read()
        found = [p for p in checkpointing.all_checkpoints(self.job.output_dir)
                 if checkpointing.step_of(p) is not None and tf.io.gfile.exists(p + ".index")]
        return sorted((p for p in found if checkpointing.step_of(p) > last), key=checkpointing.step_of)

    def evaluate_pending(self) -> int:
        """Evaluates each not-yet-evaluated checkpoint in step order; returns how many."""
        paths = self.pending()
        for path in paths:
            load_checkpoint(self.model, path)
            results = self.evaluate_weights(checkpointing.step_of(path))
            self.keeper.update(path, results)
            _, _, best = self.keeper.read()
            outputs.append_eval_block(self.results_path, outputs.format_eval_block(results, best))
        return len(paths)

    def evaluate_external(self, path: str) -> dict[str, float]:
        """Evaluates a checkpoint from outside output_dir (e.g. --init_checkpoint)."""
        load_checkpoint(self.model, path)
        results = self.evaluate_weights(checkpointing.step_of(path) or 0)
        outputs.append_eval_block(self.results_path, outputs.format_eval_block(results))
        return results


def make_trainer(job: GlueJob, strategy: tf.distribute.Strategy):
    from albert_tf.training import Task, TrainConfig, Trainer, create_optimizer

    spec = job.processor.spec
    train = split_features(job, "train")
    logging.info("Training on %d %s examples, %d steps of %d.", train.num_examples, spec.name,
                 job.train_step, job.train_batch_size)

    def init_fn(model):
        if job.init_checkpoint:
            report = load_checkpoint(model, job.init_checkpoint, allow_missing_heads=True)
            logging.info("init_checkpoint: %s", report.summary())
        else:
            logging.warning("No --init_checkpoint: fine-tuning from random weights.")

    task = Task(
        build_model=lambda: heads.GlueClassifier(job.albert_config, spec.num_labels, spec.is_regression),
        loss_fn=make_loss_fn(spec.is_regression),
        train_dataset_fn=features.train_dataset_fn(train, job.train_batch_size, job.seed),
        init_fn=init_fn,
    )
    config = TrainConfig(
        output_dir=job.output_dir, num_train_steps=job.train_step, train_batch_size=job.train_batch_size,
        steps_per_loop=job.iterations_per_loop, save_checkpoints_steps=job.save_checkpoints_steps,
        keep_checkpoint_max=job.keep_checkpoint_max, log_steps=job.log_steps,
        gradient_accumulation_steps=job.gradient_accumulation_steps, enable_xla=job.enable_xla,
        seed=job.seed)
    optimizer_fn = lambda: create_optimizer(job.learning_rate, job.train_step,  # noqa: E731
                                            job.warmup_step, job.optimizer)
    return Trainer(task, strategy, optimizer_fn, config)


def train(job: GlueJob, strategy: tf.distribute.Strategy, evaluate: bool):
    """Trains to `train_step`; with `evaluate`, evaluates each checkpoint as it is saved
    (on the chief worker only). Returns the trained model."""
    trainer = make_trainer(job, strategy)
    if not evaluate:
        trainer.train()
        return trainer.model
    evaluator = CheckpointEvaluator(job, trainer.model) if trainer.worker.is_chief else None
    if evaluator:
        evaluator.evaluate_pending()  # left over by an interrupted run
    latest = tf.train.latest_checkpoint(job.output_dir)
    done = (checkpointing.step_of(latest) or 0) if latest else 0
    boundaries = list(range(job.save_checkpoints_steps, job.train_step, job.save_checkpoints_steps))
    for boundary in boundaries + [job.train_step]:
        if boundary <= done:
            continue
        # Train up to the next save, then evaluate it before the next chunk (and before
        # keep_checkpoint_max could delete it). The LR schedule spans all train_step.
        trainer.config.num_train_steps = boundary
        trainer.train()
        if evaluator:
            evaluator.evaluate_pending()
    return trainer.model


def resolve_weights(job: GlueJob) -> tuple[str, bool]:
    """(checkpoint for eval-without-training/predict/export, whether it is in output_dir)."""
    best = os.path.join(job.output_dir, checkpointing.BEST_BASENAME)
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
    return heads.build_classifier(job.albert_config, job.task_name)


def predict(job: GlueJob, model) -> tuple[str, str]:
    """Writes test_results.tsv and submit_results.tsv for the test split."""
    processor = job.processor
    cached = split_features(job, "test")
    out = Predictor(model).run(cached, job.predict_batch_size)
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
        evaluator = CheckpointEvaluator(job, model)
        if not evaluator.pending() and not checkpointing.all_checkpoints(job.output_dir):
            path, _ = resolve_weights(job)
            evaluator.evaluate_external(path)
        else:
            evaluator.evaluate_pending()
    if do_eval:
        produced["eval_results"] = os.path.join(job.output_dir, outputs.EVAL_RESULTS_FILE)
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
