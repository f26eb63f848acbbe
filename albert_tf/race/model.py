"""The RACE model: each choice through the encoder, one score per choice.

As the original's `run_race.create_model`: inputs [B, 4, S] run as [B*4, S], the
pooled output of each row, dropout `--dropout_prob`, then one `output_weights` [1, H]
/ `output_bias` [1] projection (`modeling.heads.OutputProjection`; its TF1 names are
assigned by the `race` model kind below) gives a score per choice; the scores [B, 4] go
through a softmax cross-entropy over the choices. Dropout is keyed by example and
choice (`dropout.rows_per_example`), so the masks do not depend on the device count.
The number of choices is the inputs' second axis: RACE has 4, a transformers
`AlbertForMultipleChoice` folder any number.
"""
from __future__ import annotations

from typing import Any, Mapping

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.modeling.dropout import StatelessDropout, rows_per_example
from albert_tf.modeling.encoder import ENCODER_INPUTS, AlbertModel, TaskModel, require_keys, serializable
from albert_tf.modeling.heads import TASK_HEAD_STDDEV, OutputProjection
from albert_tf.race.data import NUM_CHOICES
from albert_tf.weights.kinds import ModelKind, register
from albert_tf.weights.names import projection_names

DEFAULT_DROPOUT = 0.1  # the original's --dropout_prob default


@serializable
class RaceModel(TaskModel):
    """Encoder + one score per choice.

    Call on a dict of int32 `input_ids`, `input_mask`, `segment_ids` [B, C, S] (RACE: C = 4).
    Returns float32 `logits` [B, C] and `probabilities` (softmax over the choices).
    """

    def __init__(self, encoder: AlbertModel | AlbertConfig, dropout_rate: float = DEFAULT_DROPOUT, **kwargs):
        kwargs.setdefault("name", "race_model")
        super().__init__(encoder, **kwargs)
        self.dropout_rate = dropout_rate
        self.output_dropout = StatelessDropout(dropout_rate, name="output_dropout", dtype="float32")
        # Not named `classifier`: the converter tells a RACE checkpoint of ours from a GLUE one by this path.
        self.choice_scorer = OutputProjection(1, TASK_HEAD_STDDEV, name="output")

    def call(self, inputs: Mapping[str, tf.Tensor], training=None) -> dict[str, tf.Tensor]:
        require_keys(inputs, ENCODER_INPUTS)
        for name in ENCODER_INPUTS:
            shape = inputs[name].shape
            if shape.rank is not None and shape.rank != 3:
                raise ValueError(f"multiple-choice input '{name}' must have shape [batch, choices, seq_length] "
                                 f"(RACE has {NUM_CHOICES} choices), got {shape}")
        ids = inputs["input_ids"]
        # Any number of choices (RACE's 4, or a transformers AlbertForMultipleChoice's).
        choices = ids.shape[1] if ids.shape[1] is not None else tf.shape(ids)[1]
        seq_length = ids.shape[-1] or tf.shape(ids)[-1]
        rows = {name: tf.reshape(inputs[name], [-1, seq_length]) for name in ENCODER_INPUTS}
        with rows_per_example(choices):  # row b*choices+j is choice j of example b
            pooled = self.encoder(rows, training=training)["pooled_output"]
            scores = self.choice_scorer(self.output_dropout(pooled, training=training))
        logits = tf.reshape(scores, [-1, choices])
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}

    def dummy_inputs(self, batch_size: int = 1, seq_length: int = 8) -> dict[str, tf.Tensor]:
        flat = self.encoder.dummy_inputs(batch_size * NUM_CHOICES, seq_length)
        return {k: tf.reshape(v, [batch_size, NUM_CHOICES, seq_length]) for k, v in flat.items()}

    def head_config(self) -> dict[str, Any]:
        return {"dropout_rate": self.dropout_rate}


def build_race_model(config: AlbertConfig, dropout_rate: float = DEFAULT_DROPOUT,
                     use_one_hot_embeddings: bool = False) -> RaceModel:
    """A built (variables created) RACE model."""
    model = RaceModel(AlbertModel(config, use_one_hot_embeddings=use_one_hot_embeddings), dropout_rate)
    model(model.dummy_inputs())
    return model


# A TF1 RACE checkpoint looks like a one-label GLUE one (top-level output_weights), so
# it has no TF1 marker: --converted_model=race names it.
RACE_KIND = register(ModelKind(
    "race", RaceModel, build=build_race_model,
    tf1_head_names=lambda model: projection_names("", model.choice_scorer),  # top-level [1, H], as run_race's
    hf_architecture="AlbertForMultipleChoice", tf2_marker="/choice_scorer/output_weights/",
    description="run_race.py's model"))


def per_example_loss(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
    """[B] softmax cross-entropies over the four choices."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(tf.reshape(labels, [-1]), tf.int32), logits=tf.cast(logits, tf.float32))


def loss_fn(logits: tf.Tensor, labels: tf.Tensor, weight: tf.Tensor) -> tf.Tensor:
    """Mean cross-entropy over the real examples of a batch (`weight` = is_real; 0 for a
    batch of padding only)."""
    weight = tf.cast(tf.reshape(weight, [-1]), tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(per_example_loss(logits, labels) * weight), tf.reduce_sum(weight))
