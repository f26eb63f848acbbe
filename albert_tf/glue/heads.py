"""The GLUE classifier: ALBERT encoder → dropout 0.1 on the pooled output → output projection.

As the original's `create_model`: the projection's weights are the top-level TF1
variables `output_weights` [num_labels, H] (stored [out, in]) and `output_bias`,
initialised truncated-normal 0.02 (whatever the config says) / zeros (`OutputProjection`; the
names are assigned by the `classifier` model kind below); classification takes the softmax
cross-entropy, STS-B (one output) the squared error. The head runs in float32 under
mixed precision so logits and losses keep full precision.
"""
from __future__ import annotations

from typing import Any, Mapping

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.modeling.dropout import StatelessDropout
from albert_tf.modeling.encoder import AlbertModel, TaskModel, serializable
from albert_tf.modeling.heads import TASK_HEAD_STDDEV, OutputProjection
from albert_tf.modeling.models import build
from albert_tf.weights.errors import CheckpointError
from albert_tf.weights.kinds import CheckpointHeads, ModelKind, register
from albert_tf.weights.names import projection_names

HEAD_DROPOUT = 0.1  # the original hard-codes keep_prob=0.9 on the pooled output


@serializable
class GlueClassifier(TaskModel):
    """An encoder + classification (or regression) head for one GLUE task.

    Call on a dict of int32 `input_ids`, `input_mask`, `segment_ids` [B, S].
    Returns float32 `logits` ([B, num_labels], or [B] scores for regression) and
    `probabilities` (softmax, or the score itself for regression).
    `encoder` is the AlbertModel to fine-tune (or an AlbertConfig to build one).
    """

    def __init__(self, encoder: AlbertModel | AlbertConfig, num_labels: int, regression: bool = False,
                 dropout_rate: float = HEAD_DROPOUT, **kwargs):
        kwargs.setdefault("name", "glue_classifier")
        if regression and num_labels != 1:
            raise ValueError(f"a regression head has 1 output, got num_labels={num_labels}")
        super().__init__(encoder, **kwargs)
        self.num_labels = num_labels
        self.regression = regression
        self.dropout_rate = dropout_rate
        # Stateless like the encoder's (exact resume); float32 so that under mixed
        # precision the pooled output is not rounded to 16 bits before the head.
        self.output_dropout = StatelessDropout(dropout_rate, name="output_dropout", dtype="float32")
        self.classifier = OutputProjection(num_labels, TASK_HEAD_STDDEV, name="output")

    def call(self, inputs: Mapping[str, tf.Tensor], training=None) -> dict[str, tf.Tensor]:
        pooled = self.encoder(inputs, training=training)["pooled_output"]
        logits = self.classifier(self.output_dropout(pooled, training=training))
        if self.regression:
            logits = tf.squeeze(logits, axis=-1)
            return {"logits": logits, "probabilities": logits}
        return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1)}

    def head_config(self) -> dict[str, Any]:
        return {"num_labels": self.num_labels, "regression": self.regression, "dropout_rate": self.dropout_rate}

    @property
    def id2label(self) -> dict[int, str] | None:
        """Label names by class id, from the config's `id2label` (a Hugging Face config.json
        names them; `*_to_hf` writes them back); None when it names none or another count."""
        names = self.config.extra.get("id2label") or {}
        if len(names) != self.num_labels:
            return None
        return {int(k): str(v) for k, v in names.items()}


_TF2_HEAD = "/classifier/output_weights"  # the head's attribute path in our checkpoints


def _num_labels(heads: CheckpointHeads) -> dict[str, int]:
    shape = heads.head_shape("output_weights", _TF2_HEAD)
    if shape is None:
        raise CheckpointError(f"--converted_model=classifier, but {heads.path} has no classifier head "
                              f"(output_weights)")
    return {"num_labels": int(shape[0])}


CLASSIFIER_KIND = register(ModelKind(
    "classifier", GlueClassifier,
    build=lambda config, num_labels=2: build(GlueClassifier(AlbertModel(config), num_labels,
                                                             regression=num_labels == 1)),
    tf1_head_names=lambda model: projection_names("", model.classifier),  # top-level, as run_classifier's
    hf_architecture="AlbertForSequenceClassification", tf1_marker="output_weights",
    tf2_marker=_TF2_HEAD + "/", build_options=_num_labels, description="GLUE classifier"))


def build_classifier(config: AlbertConfig, task_name: str, use_one_hot_embeddings: bool = False) -> GlueClassifier:
    """A built (variables created) classifier sized for a GLUE task."""
    from albert_tf.glue.processors import get_task_spec

    spec = get_task_spec(task_name)
    model = GlueClassifier(AlbertModel(config, use_one_hot_embeddings), spec.num_labels, spec.is_regression)
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
