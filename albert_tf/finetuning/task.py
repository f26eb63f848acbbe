"""The fine-tuning task interface: what a task is, apart from the loop that runs it.

In the spirit of Model Garden's ``Task``: a task says what its data, model, loss,
outputs, metrics and files are; ``finetuning.runner.run`` does the rest for every task
the same way (train, evaluate every checkpoint, keep the best, predict, export). GLUE,
RACE, SQuAD and the user-defined classification task are instances; a new task is a
subclass in its own package and touches no shared file (README "Adding a task").

Splits are named ``train``, ``dev`` (evaluated at every checkpoint) and ``test``
(predicted); a task maps them onto its files (SQuAD: ``dev`` and ``test`` are both
``--predict_file``).
"""
from __future__ import annotations

import abc
import dataclasses
import functools
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from albert_tf.data.feature_cache import CachedSplit
from albert_tf.data.records import MODEL_INPUTS
from albert_tf.keras import keras
from albert_tf.training.results import ResultsLayout, as_float32

SPLITS = ("train", "dev", "test")


def with_estimator_keys(results: dict[str, Any], step: int) -> dict[str, Any]:
    """``results`` plus the keys the original's Estimator added to every evaluation: ``global_step``
    and ``loss`` (the model's loss, here ``eval_loss``: its mean over every example evaluated,
    where the Estimator averaged batch means, which depends on how the set is cut into batches).
    Floats are float32, as the Estimator's: the result files print them as the original did."""
    return as_float32({**results, "loss": results["eval_loss"], "global_step": step})


@dataclasses.dataclass(frozen=True)
class Split:
    """One split of a task: its cached records and (read only when asked for) its examples."""

    name: str
    cached: CachedSplit
    read_examples: Callable[[], Sequence[Any]] = lambda: ()

    @functools.cached_property
    def examples(self) -> Sequence[Any]:
        """The split's examples in file order (what predictions are written for)."""
        return self.read_examples()


@dataclasses.dataclass(frozen=True)
class PredictContext:
    """What the predict step knows about the weights it used."""

    weights: str  # the checkpoint loaded
    step: int  # its training step (model.ckpt-best: the step it was copied from)
    selected: bool  # whether this run evaluated the checkpoints and chose the best


class FineTuningTask(abc.ABC):
    """One fine-tuning task. Subclasses set the class attributes and implement the methods.

    Class attributes:
      key_metric: the result that chooses ``model.ckpt-best``.
      results_layout: how ``eval_results.txt`` is written per evaluated checkpoint.
      shuffle_buffer: training records shuffled in a buffer of this many.
      eval_split: the split each checkpoint is evaluated on.
      padding_invariant: whether the model's numbers (loss, outputs of real rows) are the same on
        a batch padded to max_seq_length and on that batch cut to its longest row. True when the
        head leaves padding positions out (pooled [CLS], masked softmax); a task whose head scores
        padding positions (SQuAD 1.1, as the original) says False, and the runner keeps the
        original's padded batches for it whatever the length flags say.
    """

    key_metric: str
    results_layout: ResultsLayout
    shuffle_buffer: int = 10000
    higher_is_better: bool = True
    padding_invariant: bool = True

    @property
    def name(self) -> str:
        return type(self).__name__

    # ---- data ----
    def check_splits(self, splits: Sequence[str]) -> None:
        """Raises a clear error, before any work, when a needed split's files are missing."""

    def prepare(self, output_dir: str) -> None:
        """Called once, on the chief, after the checks and before any stage (e.g. to write what a later
        predict-only run needs)."""

    @abc.abstractmethod
    def load_split(self, split: str) -> Split:
        """The cached records of a split (built on first use) and a reader of its examples."""

    # ---- model ----
    @abc.abstractmethod
    def build_model(self, encoder: keras.Model) -> keras.Model:
        """The task's model around ``encoder`` (unbuilt; the runner builds it in its strategy's scope)."""

    def dummy_seq_length(self) -> int:
        """The sequence length of the dummy batch that creates the model's variables."""
        return 8

    @abc.abstractmethod
    def loss(self, model: keras.Model, batch: Mapping[str, tf.Tensor], training: bool):
        """The Trainer's ``loss_fn``: ``(loss, {metric: (sum, count)})`` for one batch."""

    # ---- evaluation and prediction ----
    @abc.abstractmethod
    def outputs(self, model: keras.Model, batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        """Per-step outputs gathered over a split (``is_real_example`` is added by the runner)."""

    @abc.abstractmethod
    def metrics(self, split: Split, outputs: Mapping[str, np.ndarray], step: int) -> dict[str, Any]:
        """The results of one evaluation (a block of ``eval_results.txt``), from the outputs of every
        real record of ``split`` in file order; must include ``key_metric``."""

    @abc.abstractmethod
    def write_predictions(self, output_dir: str, split: Split, outputs: Mapping[str, np.ndarray],
                          context: PredictContext) -> dict[str, Any]:
        """Writes the prediction files of ``split``; returns ``{name: path(s)}``."""

    def export(self, model: keras.Model, export_dir: str) -> dict[str, Any]:
        """Exports the model for serving; returns ``{name: path}``. Tasks without an export refuse."""
        raise ValueError(f"{self.name} has no export (--export_dir)")


def model_inputs(batch: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The encoder's inputs of a batch (``input_ids``, ``input_mask``, ``segment_ids``), without its labels."""
    return {name: batch[name] for name in MODEL_INPUTS}
