"""The GLUE classifier: ALBERT encoder → dropout 0.1 on the pooled output → dense.

As the original's `create_model`: the dense layer's weights are the top-level TF1
variables `output_weights` [num_labels, H] (stored [out, in]) and `output_bias`,
initialised truncated-normal 0.02 / zeros; classification takes the softmax
cross-entropy, STS-B (one output) the squared error. The head runs in float32
under mixed precision so logits and losses keep full precision.
"""
from __future__ import annotations

from typing import Any, Mapping

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.keras import keras
from albert_tf.modeling.layers import initializer
from albert_tf.modeling.models import AlbertModel
from albert_tf.modeling.dropout import StatelessDropout

HEAD_DROPOUT = 0.1  # the original hard-codes keep_prob=0.9 on the pooled output


class ClassificationHead(keras.layers.Layer):
    """Logits = pooled · output_weightsᵀ + output_bias (float32)."""

    def __init__(self, num_labels: int, config: AlbertConfig, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.num_labels = num_labels
        self.config = config

    def build(self, input_shape):
        hidden = int(input_shape[-1])
        self.output_weights = self.add_weight(
            "output_weights", shape=[self.num_labels, hidden],
            initializer=initializer(self.config), dtype=tf.float32)
        self.output_bias = self.add_weight(
            "output_bias", shape=[self.num_labels], initializer="zeros", dtype=tf.float32)
        super().build(input_shape)

    def call(self, pooled_output):
        pooled = tf.cast(pooled_output, tf.float32)
        return tf.matmul(pooled, self.output_weights, transpose_b=True) + self.output_bias


class GlueClassifier(keras.Model):
    """ALBERT + classification (or regression) head for one GLUE task.

    Call on a dict of int32 `input_ids`, `input_mask`, `segment_ids` [B, S].
    Returns float32 `logits` ([B, num_labels], or [B] scores for regression) and
    `probabilities` (softmax, or the score itself for regression).
    `.encoder` is the AlbertModel; `tf1_head_variables()` gives the head's TF1
    names to the checkpoint name table.
    """

    def __init__(self, config: AlbertConfig, num_labels: int, regression: bool = False, **kwargs):
        kwargs.setdefault("name", "glue_classifier")
        super().__init__(**kwargs)
        if regression and num_labels != 1:
            raise ValueError(f"a regression head has 1 output, got num_labels={num_labels}")
        self.config = config
        self.num_labels = num_labels
        self.regression = regression
        self.encoder = AlbertModel(config)
        # Stateless like the encoder's (exact resume); float32 so that under mixed
        # precision the pooled output is not rounded to 16 bits before the head.
        self.output_dropout = StatelessDropout(HEAD_DROPOUT, name="output_dropout", dtype="float32")
        self.classifier = ClassificationHead(num_labels, config, name="output")

    def call(self, inputs: Mapping[str, tf.Tensor], training=None) -> dict[str, tf.Tensor]:
        pooled = self.encoder(inputs, training=training)["pooled_output"]
        logits = self.classifier(self.output_dropout(pooled, training=training))
        if self.regression:
            logits = tf.squeeze(logits, axis=-1)
            return {"logits": logits, "probabilities": logits}
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}

    def tf1_head_variables(self) -> dict[str, tf.Variable]:
        return {"output_weights": self.classifier.output_weights,
                "output_bias": self.classifier.output_bias}

    def dummy_inputs(self, batch_size: int = 1, seq_length: int = 8) -> dict[str, tf.Tensor]:
        return self.encoder.dummy_inputs(batch_size, seq_length)

    def get_config(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "num_labels": self.num_labels,
                "regression": self.regression}


def build_classifier(config: AlbertConfig, task_name: str) -> GlueClassifier:
    """A built (variables created) classifier sized for a GLUE task."""
    from albert_tf.glue.processors import get_task_spec

    spec = get_task_spec(task_name)
    model = GlueClassifier(config, spec.num_labels, spec.is_regression)
    model(model.dummy_inputs())
    return model


def per_example_loss(logits: tf.Tensor, labels: tf.Tensor, regression: bool) -> tf.Tensor:
    """[B] losses: softmax cross-entropy on class ids, or squared error on scores."""
    logits = tf.cast(logits, tf.float32)
    if regression:
        return tf.square(tf.reshape(logits, [-1]) - tf.cast(tf.reshape(labels, [-1]), tf.float32))
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(tf.reshape(labels, [-1]), tf.int32), logits=logits)


def loss_fn(outputs: Mapping[str, tf.Tensor], labels: tf.Tensor, regression: bool,
            sample_weight: tf.Tensor | None = None) -> tf.Tensor:
    """Mean loss over the (weighted) examples of a batch, as the original's reduce_mean.

    `sample_weight` (e.g. `is_real_example`) excludes padding rows; a batch of only
    padding gives 0. The training loop averages these per-replica means.
    """
    losses = per_example_loss(outputs["logits"], labels, regression)
    if sample_weight is None:
        return tf.reduce_mean(losses)
    weight = tf.cast(tf.reshape(sample_weight, [-1]), tf.float32)
    return tf.math.divide_no_nan(tf.reduce_sum(losses * weight), tf.reduce_sum(weight))
