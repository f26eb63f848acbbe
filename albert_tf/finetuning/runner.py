"""The one fine-tuning runner: train → evaluate every checkpoint → keep the best → predict → export,
for any ``FineTuningTask`` (GLUE, RACE, SQuAD, a user's classification data, a new task).

How it differs from the original's drivers (and why):
- Training goes through the shared ``albert_tf.training.Trainer`` (any tf.distribute
  strategy, mixed precision, exact resume).
- With evaluation, each checkpoint is evaluated right after it is saved (the Trainer's
  save hook), so every checkpoint is seen before ``keep_checkpoint_max`` pruning deletes
  it; the original kept every checkpoint on disk and evaluated them afterwards. The best
  by the task's key metric is copied to ``model.ckpt-best`` (``best_trial.txt``, the
  original's format). A rerun evaluates the checkpoints not evaluated yet, then goes on.
- Metrics are computed in numpy over the whole split, from outputs gathered by the one
  evaluation path (``albert_tf.training.evaluation``); nothing is dropped.
- Weights for evaluation without training, prediction and export (``resolve_weights``):
  ``model.ckpt-best`` in output_dir, else its latest checkpoint, else ``--init_checkpoint``
  (``own_weights_ahead_of_init``: when a run's own checkpoints leave ``--init_checkpoint`` unused).
- Only the chief worker evaluates and writes files; other workers only help train.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Callable

import numpy as np
import tensorflow as tf
from absl import logging

from albert_tf.config import AlbertConfig
from albert_tf.data import batching, datasets
from albert_tf.errors import RunError
from albert_tf.fileio import absolute
from albert_tf.finetuning.task import FineTuningTask, PredictContext, Split
from albert_tf.modeling.encoder import AlbertModel
from albert_tf.training.checkpoint_evaluation import BEST_TRIAL_FILENAME, BestCheckpointKeeper, CheckpointEvaluator
from albert_tf.training.checkpoint_policy import (checkpoint_candidates, newest_intact_weights,
                                                  refuse_resuming_the_original)
from albert_tf.training.distribution import JOB_MESSAGES, one_hot_embeddings, worker_info
from albert_tf.training.evaluation import BatchRunner, gather_real_examples
from albert_tf.training.loop import TrainConfig
from albert_tf.training.results import EVAL_RESULTS_FILE, format_inline
from albert_tf.run_lock import output_dir_lock
from albert_tf.training.summaries import write_scalars
from albert_tf.training.xla import parse_xla_setting
from albert_tf.weights import CheckpointError, check_fits, checkpoint_step, files, fine_tuning_init, hf, load_checkpoint
from albert_tf.weights.errors import first_lines


@dataclasses.dataclass
class FineTuningJob:
    """What a run does with a task (the driver's flags, checked).

    ``train`` holds the loop's settings (``train_config_from_flags``) and ``optimizer_fn``
    builds the optimizer; both are needed only to train.
    """

    output_dir: str
    albert_config: AlbertConfig
    do_train: bool = False
    do_eval: bool = False
    do_predict: bool = False
    export_dir: str | None = None
    init_checkpoint: str | None = None
    init_flag: str = "--init_checkpoint"  # the flag that gave init_checkpoint (drivers.finetuning.weights_flag)
    train: TrainConfig | None = None
    optimizer_fn: Callable | None = None
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    pad_to_max_length: bool = False  # the original's batches: every row at --max_seq_length
    seq_length_multiple: int = batching.DEFAULT_MULTIPLE  # a batch's length: its longest row rounded up to this
    seq_length_buckets: tuple[int, ...] | None = None  # TPU / XLA: the static lengths (default from max_seq_length)
    group_by_length: bool = False  # training batches of rows of similar length (seeded sampler)


def resolve_weights(output_dir: str, init_checkpoint: str | None) -> str:
    """The one rule for which weights evaluate-without-training, predict and export use:
    model.ckpt-best in output_dir, else its newest intact checkpoint, else ``init_checkpoint``.

    When best_trial.txt names a best step but model.ckpt-best is gone (a run killed while replacing
    it) or damaged (a disk fault), that step's own checkpoint is the same weights; without it the run
    stops rather than predict with other weights than the chosen ones."""
    best = os.path.join(output_dir, files.BEST_BASENAME)
    damage = files.checkpoint_damage(best) if tf.io.gfile.exists(best + ".index") else f"{best}.index is missing"
    if damage is None:
        return best
    _, best_step, _ = BestCheckpointKeeper(output_dir, "").read()
    if best_step >= 0:
        same = files.checkpoint_prefix(output_dir, best_step)
        if tf.io.gfile.exists(same + ".index") and files.checkpoint_damage(same) is None:
            logging.warning("%s; using %s, the step %s names as the best", damage, same, BEST_TRIAL_FILENAME)
            return same
    if tf.io.gfile.exists(best + ".index"):
        return best  # damaged, and no copy of it: loading it stops naming the damage
    if best_step >= 0:
        raise ValueError(f"{os.path.join(output_dir, BEST_TRIAL_FILENAME)} names step {best_step} as the best, but "
                         f"neither {best} nor that step's checkpoint is there intact (a run stopped while copying it?): "
                         f"move {BEST_TRIAL_FILENAME} away, then rerun: with --do_eval the checkpoints on disk are "
                         f"evaluated and the best chosen again, without it the newest checkpoint is used")
    latest = newest_intact_weights(output_dir)
    if latest:
        return latest
    if init_checkpoint:
        return init_checkpoint
    raise ValueError(f"no weights to use: evaluating, predicting or exporting without --do_train needs a "
                     f"fine-tuned checkpoint: none in --output_dir={output_dir} (no model.ckpt-best, no checkpoint) "
                     f"and --init_checkpoint is not set (train first with --do_train, or pass --init_checkpoint)")


def own_weights_ahead_of_init(output_dir: str, do_train: bool, predicts_or_exports: bool) -> str | None:
    """The run's own checkpoint in ``output_dir`` that this run uses instead of ``init_checkpoint``; None when
    ``init_checkpoint`` is the weights some stage starts from. Only reads. The rule (the Trainer's resume and
    ``resolve_weights``'s, which each stage follows):

    - training: any ``model.ckpt-<step>`` on disk or in the state file. The run resumes from the newest intact
      one, or stops when none is intact: never from ``init_checkpoint`` (its ``init_fn`` runs only without one).
    - without training (evaluate, predict, export): those, ``model.ckpt-best``, or a ``best_trial.txt`` naming a
      best step (``resolve_weights`` uses them or stops); an evaluation-only run also evaluates the checkpoints
      its state file lists from elsewhere (``predicts_or_exports`` False).

    Its answer names ``model.ckpt-best`` without training, else the newest such checkpoint with an index on disk
    (whether it reads back completely is for the stage to find: that reads every tensor)."""
    own = checkpoint_candidates(output_dir)
    own = [p for p in own if tf.io.gfile.exists(p + ".index")] or own  # the state file may name lost ones
    if do_train:
        return own[0] if own else None
    best = os.path.join(output_dir, files.BEST_BASENAME)
    try:
        best_step = BestCheckpointKeeper(output_dir, "").read()[1]
    except RunError:
        best_step = 0  # garbled: resolve_weights stops naming it
    if tf.io.gfile.exists(best + ".index") or best_step >= 0:
        return best
    if own:
        return own[0]
    listed = [] if predicts_or_exports else files.known_checkpoints(output_dir)
    return listed[-1] if listed else None


def _inline(value: Any) -> str:
    """An output as a log line names it: paths joined by commas, figures as ``key = value`` as the result
    files print them; never a Python list or dict repr (brackets, quotes)."""
    if isinstance(value, dict):
        return format_inline(value)
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value)
    return str(value)


class _Runner:
    """One run of ``task`` as ``job`` says, on ``strategy``."""

    def __init__(self, task: FineTuningTask, job: FineTuningJob, strategy: tf.distribute.Strategy):
        self.task = task
        self.job = dataclasses.replace(job, output_dir=absolute(job.output_dir))
        self.strategy = strategy
        self.one_hot = one_hot_embeddings(strategy)
        self.lengths = self.length_policy()

    def length_policy(self) -> datasets.LengthPolicy:
        """Batches at their own length; static lengths where each shape is compiled (TPU, XLA); the
        original's padded batches with --pad_to_max_length or for a task whose numbers depend on the
        padding (``task.padding_invariant`` False: cutting would change them)."""
        job = self.job
        xla = job.train is not None and parse_xla_setting(job.train.enable_xla) is not False
        static = isinstance(self.strategy, tf.distribute.TPUStrategy) or xla
        padded = job.pad_to_max_length or not self.task.padding_invariant
        if padded and not job.pad_to_max_length:
            changed = [flag for flag, given in (("--seq_length_buckets", job.seq_length_buckets is not None),
                                                ("--seq_length_multiple",
                                                 job.seq_length_multiple != batching.DEFAULT_MULTIPLE)) if given]
            if changed:  # a warning only for flags it cannot honour; else the "Batch lengths" line says why
                logging.warning("%s keeps every row padded to max_seq_length (its head scores padding positions, "
                                "as the original: cut batches would change its numbers); %s cannot cut them",
                                self.task.name, ", ".join(changed))
        reason = ("--pad_to_max_length" if job.pad_to_max_length else
                  f"{self.task.name}'s numbers depend on it: its head scores padding positions, as the original's")
        return datasets.LengthPolicy(padded, job.seq_length_multiple, static, job.seq_length_buckets, reason)

    # ---- models ----
    def new_model(self):
        return self.task.build_model(AlbertModel(self.job.albert_config, self.one_hot))

    def built_model(self, model=None):
        """``model`` (default: a new one) with its weights made, in the strategy's scope. A new model of a
        multi-worker job is the chief's alone (it evaluates, predicts and exports alone while the others wait
        for the job's end): made in the scope, its weights were a collective the others never joined, and an
        evaluation- or prediction-only job hung. It is made outside the scope, on the chief's own device."""
        alone = model is None and worker_info(self.strategy).num_workers > 1
        with contextlib.nullcontext() if alone else self.strategy.scope():
            model = model or self.new_model()
            model(model.dummy_inputs(seq_length=self.task.dummy_seq_length()))
        return model

    # ---- evaluation ----
    def output_runner(self, model) -> BatchRunner:
        """Runs the task's outputs step on a batch (traced once, kept for every evaluation)."""
        return BatchRunner(lambda batch: {**self.task.outputs(model, batch), datasets.IS_REAL: batch[datasets.IS_REAL]})

    def gather(self, runner: BatchRunner, split: Split, batch_size: int) -> dict[str, np.ndarray]:
        """The task's outputs for every real record of ``split``, in file order."""
        work = "predicting" if split.name == "test" else "evaluating"
        return gather_real_examples(runner, datasets.eval_dataset(split.cached, batch_size, self.lengths),
                                    split.cached.num_records, f"{self.task.name} records", batch_size,
                                    f"{work} {self.task.name} {split.name}")

    def evaluation(self, model) -> Callable[[str], dict[str, Any]]:
        """``evaluate(checkpoint_path)``: the task's metrics of the model's current weights on dev."""
        dev = self.task.load_split("dev")
        runner = self.output_runner(model)

        def evaluate(checkpoint_path: str) -> dict[str, Any]:
            step = checkpoint_step(checkpoint_path)  # model.ckpt-best, --init_checkpoint: its global_step
            results = self.task.metrics(dev, self.gather(runner, dev, self.job.eval_batch_size), step)
            write_scalars(os.path.join(self.job.output_dir, "eval"), step,
                          {k: v for k, v in results.items() if k not in ("global_step", "num_examples")
                           and isinstance(v, (int, float, np.number))})
            logging.info("Eval results at step %d: %s", step,
                         format_inline(dict(sorted(results.items()))))
            return results

        return evaluate

    def checkpoint_evaluator(self, model) -> CheckpointEvaluator:
        return CheckpointEvaluator(self.job.output_dir, self.evaluation(model), self.task.key_metric,
                                   self.task.results_layout, load=lambda path: load_checkpoint(model, path),
                                   higher_is_better=self.task.higher_is_better)

    # ---- stages ----
    def train(self):
        from albert_tf.training import Task, Trainer

        job = self.job
        if job.train is None or job.optimizer_fn is None:
            raise ValueError("training needs the loop's settings and an optimizer (FineTuningJob.train, .optimizer_fn)")
        config = dataclasses.replace(job.train, output_dir=job.output_dir)
        train = self.task.load_split("train")
        steps = config.num_train_steps
        logging.info("Training %s on %d records, %d step%s of %d.", self.task.name, train.cached.num_records,
                     steps, "" if steps == 1 else "s", config.train_batch_size)
        loop_task = Task(
            build_model=self.new_model,
            loss_fn=self.task.loss,
            train_dataset_fn=datasets.train_dataset_fn(train.cached, config.train_batch_size, config.seed,
                                                       self.task.shuffle_buffer, self.lengths, job.group_by_length),
            init_fn=fine_tuning_init(job.init_checkpoint, job.init_flag),
            init_flag=job.init_flag if job.init_checkpoint else None,
            train_data=f"the feature cache {train.cached.record_file} (move it away and it is built again)",
        )
        trainer = Trainer(loop_task, self.strategy, job.optimizer_fn, config)
        if job.do_eval:
            # The weights are made here, in the scope (on every worker: a collective under MultiWorkerMirrored):
            # evaluating a checkpoint an interrupted run left made them outside it, and training then failed
            # ("`colocate_vars_with` must only be passed a variable created in this tf.distribute.Strategy.scope()").
            self.built_model(trainer.model)
        if job.do_eval and trainer.worker.is_chief:
            evaluator = self.checkpoint_evaluator(trainer.model)
            evaluator.evaluate_pending(trainer.is_scheduled_save)  # left over by an interrupted run
            trainer.add_save_hook(evaluator.after_save)
        trainer.train()
        return trainer.model

    def evaluate_without_training(self, model) -> bool:
        """Whether anything was evaluated, with ``model`` (built): the checkpoints not evaluated yet, else
        the weights of ``resolve_weights`` when output_dir has no checkpoint of its own."""
        evaluator = self.checkpoint_evaluator(model)
        if not evaluator.pending() and not files.known_checkpoints(self.job.output_dir):
            evaluator.evaluate_external(resolve_weights(self.job.output_dir, self.job.init_checkpoint))
            return True
        if evaluator.evaluate_pending(eval_only=True):
            return True
        self.warn_nothing_evaluated(evaluator.keeper.read()[0])
        return False

    def warn_nothing_evaluated(self, last_step: int) -> None:
        """An eval-only run must not end as if it had scored something: eval_results.txt holds only
        earlier runs' blocks (e.g. MNLI's dev-matched ones when MisMNLI reuses MNLI's --output_dir)."""
        out = self.job.output_dir
        why = (f"every checkpoint in --output_dir={out} was evaluated already ({BEST_TRIAL_FILENAME}: up to step "
               f"{last_step})" if last_step >= 0 else f"no checkpoint in --output_dir={out} has a step number")
        logging.warning("Nothing evaluated: %s. To evaluate again (another task, dev file or --max_seq_length), "
                        "give --init_checkpoint=%s and a new --output_dir.", why,
                        os.path.join(out, files.BEST_BASENAME))

    def predict(self, model, weights: str) -> dict[str, Any]:
        test = self.task.load_split("test")
        outputs = self.gather(self.output_runner(model), test, self.job.predict_batch_size)
        context = PredictContext(weights, checkpoint_step(weights), selected=self.job.do_eval)
        written = self.task.write_predictions(self.job.output_dir, test, outputs, context)
        logging.info("Predicted %d %s records with %s: %s", test.cached.num_records, self.task.name, weights,
                     "; ".join(f"{k}: {_inline(v)}" for k, v in written.items()))
        return written

    def run(self) -> dict[str, Any]:
        job, task = self.job, self.task
        if not (job.do_train or job.do_eval or job.do_predict or job.export_dir):
            stages = ["--do_train", "--do_eval", "--do_predict"]
            if type(task).export is not FineTuningTask.export:
                stages.append("--export_dir")
            raise ValueError(f"at least one of {', '.join(stages[:-1])} or {stages[-1]} is needed")
        task.check_splits([s for s, wanted in zip(("train", "dev", "test"), (job.do_train, job.do_eval,
                                                                            job.do_predict)) if wanted])
        if job.do_eval:  # a model.ckpt-best of the user's (a release's) in output_dir: refused before any write
            BestCheckpointKeeper(job.output_dir, task.key_metric).check_ours()
        if job.do_train:  # the original's run folder: refused before the cache, the evaluation, the state file (the
            # drivers refuse it earlier still, before making the task: SQuAD's builds its cache then)
            refuse_resuming_the_original(job.output_dir)
        worker = worker_info(self.strategy)
        take_over = job.train is not None and job.train.take_over_run_lock
        # The lock before the first write (labels.txt, cached features): a refused run writes nothing.
        with output_dir_lock(job.output_dir, worker.num_workers, worker.worker_index, take_over, JOB_MESSAGES):
            return self._run_stages()

    def check_scoring_weights(self, model) -> None:
        """A run without training that scores with ``init_checkpoint`` (``own_weights_ahead_of_init``): its
        task head must be this task's, as it is, before any work (it was found after the features were
        cached, a line per variable). Another task's head starts fresh only when training (``fine_tuning_init``)."""
        job = self.job
        if job.do_train or not job.init_checkpoint or hf.is_hf_checkpoint(job.init_checkpoint):
            return  # a Hugging Face folder has no index to check: loading it names what does not fit
        if own_weights_ahead_of_init(job.output_dir, False, bool(job.do_predict or job.export_dir)):
            return
        path, flag = job.init_checkpoint, job.init_flag
        try:
            other = check_fits(model, path, other_heads_allowed=True)
        except CheckpointError as e:
            line = first_lines(e)
            raise CheckpointError(f"{flag}: {line}" if path in line else f"{flag}={path}: {line}") from None
        if other:
            _, ours, theirs = other[0]  # a projection's first dimension: its outputs
            shapes = ", ".join(f"{name} {list(t)} for {list(o)}" for name, o, t in other)
            raise CheckpointError(
                f"{flag}={path}: its task head has {theirs[0]} labels, this task ({self.task.name}) "
                f"{ours[0]} ({shapes}): without --do_train it scores as it is, and nothing was trained here; "
                f"give a checkpoint fine-tuned on this task, or train with --do_train (the head then starts fresh)")

    def _run_stages(self) -> dict[str, Any]:
        job, task = self.job, self.task
        model = None
        if worker_info(self.strategy).is_chief:
            if not job.do_train:  # the model that scores, and its weights checked before any work
                model = self.built_model()
                self.check_scoring_weights(model)
            task.prepare(job.output_dir)
            logging.info("Batch lengths: %s", self.lengths.describe())
        produced: dict[str, Any] = {}
        if job.do_train:
            model = self.train()
        if not worker_info(self.strategy).is_chief:
            return produced  # other workers only help train; the chief writes every file
        if job.do_train:  # a train-only run (run_glue.sh's first) says where its checkpoints went too
            produced["checkpoint"] = files.latest_checkpoint(job.output_dir)
        evaluated = job.do_eval  # with do_train, each checkpoint was evaluated as it was saved
        if job.do_eval and not job.do_train:
            evaluated = self.evaluate_without_training(model)
        if evaluated:  # not an old file's numbers for this run's
            produced["eval_results"] = os.path.join(job.output_dir, EVAL_RESULTS_FILE)
            keeper = BestCheckpointKeeper(job.output_dir, task.key_metric)
            if keeper.read()[1] >= 0 and tf.io.gfile.exists(keeper.best_prefix + ".index"):
                produced["best_checkpoint"] = keeper.best_prefix  # as run_pretraining.py names it
        if job.do_predict or job.export_dir:
            weights = resolve_weights(job.output_dir, job.init_checkpoint)
            model = model or self.built_model()
            report = load_checkpoint(model, weights)
            logging.info("%s with %s", "Predicting" if job.do_predict else "Exporting", report.summary())
            produced["weights"] = weights
            if job.do_predict:
                produced.update(self.predict(model, weights))
            if job.export_dir:
                produced.update(task.export(model, job.export_dir))
        return produced


def run(task: FineTuningTask, job: FineTuningJob, strategy: tf.distribute.Strategy) -> dict[str, Any]:
    """Runs the stages ``job`` asks for; returns what they produced ({name: path(s)}) for callers and tests."""
    return _Runner(task, job, strategy).run()
