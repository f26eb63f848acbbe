"""SQuAD heads and losses, as ALBERT's ``squad_utils.create_v1_model`` / ``create_v2_model``.

- SQuAD 1.1: start/end logits = sequence_output · ``output_weights``ᵀ +
  ``output_bias``, the shared ``modeling.heads.OutputProjection`` with 2 units on every
  position. Loss: mean over the batch of (CE(start) + CE(end)) / 2.
- ``SquadV2Head`` (XLNet style): start logits = dense(1), masked by ``p_mask``
  (``x·(1-p) - 1e30·p``); end logits from concat(h, h_start) → dense H tanh →
  LayerNorm → dense 1, masked, with the ground-truth start in training and a
  beam of ``start_n_top`` starts × ``end_n_top`` ends at inference; answer
  verifier on concat(Σ softmax(start)·h, h_[CLS]) → dense H tanh → dropout →
  dense 1 without bias = ``cls_logits``. Loss: (CE(start) + CE(end)) / 2 +
  0.5 · sigmoid-CE(is_impossible, cls_logits).

Heads compute in float32 under mixed precision (logits, masks at -1e30 and
log-softmaxes need it). Models: ``SquadV1Model`` / ``SquadV2Model`` are handed an
``AlbertModel`` (``.encoder``); their TF1 names and converter facts are their model
kinds at the end of this module.
"""
from __future__ import annotations

from typing import Any, Mapping

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.keras import keras
from albert_tf.modeling.dropout import StatelessDropout
from albert_tf.modeling.encoder import ENCODER_INPUTS, AlbertModel, TaskModel, require_keys, serializable
from albert_tf.modeling.heads import TASK_HEAD_STDDEV, OutputProjection
from albert_tf.modeling.layers import LayerNorm, dense
from albert_tf.weights.kinds import ModelKind, register
from albert_tf.weights.names import dense_names, layer_norm_names, projection_names

NEG_INF = 1e30  # the original's mask value


def _dense(units: int, initializer_range: float, name: str, activation=None, use_bias: bool = True):
    return dense(units, initializer_range, name, activation, use_bias, dtype="float32")


def mask_logits(logits: tf.Tensor, p_mask: tf.Tensor) -> tf.Tensor:
    """The original's masking: ``logits`` where ``p_mask`` is 0, -1e30 where it is 1."""
    return logits * (1.0 - p_mask) - NEG_INF * p_mask


class SquadV2Head(keras.layers.Layer):
    """XLNet-style span head with answer verifier (see module docstring).

    ``call(sequence_output, p_mask, start_positions=None, training=None)``:
    with ``start_positions`` (training) returns ``start_log_probs``,
    ``end_log_probs`` [B,S] and ``cls_logits`` [B]; without, the beam:
    ``start_top_log_probs``, ``start_top_index`` [B,start_n_top],
    ``end_top_log_probs``, ``end_top_index`` [B,start_n_top*end_n_top] (start i,
    end j at column i*end_n_top + j) and ``cls_logits``.
    """

    def __init__(self, hidden_size: int, initializer_range: float = 0.02, start_n_top: int = 5,
                 end_n_top: int = 5, dropout_prob: float = 0.1, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        if start_n_top < 1 or end_n_top < 1:
            raise ValueError(f"start_n_top and end_n_top must be >= 1, got {start_n_top}, {end_n_top}")
        self.hidden_size, self.initializer_range = hidden_size, initializer_range
        self.start_n_top, self.end_n_top, self.dropout_prob = start_n_top, end_n_top, dropout_prob
        self.start_dense = _dense(1, initializer_range, "start_logits_dense")
        self.end_dense_0 = _dense(hidden_size, initializer_range, "end_logits_dense_0", activation="tanh")
        self.end_layer_norm = LayerNorm(name="end_logits_LayerNorm")
        self.end_dense_1 = _dense(1, initializer_range, "end_logits_dense_1")
        self.answer_dense_0 = _dense(hidden_size, initializer_range, "answer_class_dense_0", activation="tanh")
        # Stateless like the encoder's dropout (exact resume), and float32 like the head.
        self.answer_dropout = StatelessDropout(dropout_prob, name="answer_class_dropout", dtype="float32")
        self.answer_dense_1 = _dense(1, initializer_range, "answer_class_dense_1", use_bias=False)

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "initializer_range": self.initializer_range, "start_n_top": self.start_n_top,
                "end_n_top": self.end_n_top, "dropout_prob": self.dropout_prob}

    def _end_logits(self, hidden: tf.Tensor, start_features: tf.Tensor) -> tf.Tensor:
        """hidden [..., S, H], start_features broadcastable to it -> end logits [..., S]."""
        start_features = tf.broadcast_to(start_features, tf.shape(hidden))
        x = self.end_dense_0(tf.concat([hidden, start_features], axis=-1))
        return tf.squeeze(self.end_dense_1(self.end_layer_norm(x)), -1)

    def call(self, sequence_output, p_mask, start_positions=None, training=None):
        hidden = tf.cast(sequence_output, tf.float32)                    # [B,S,H]
        p_mask = tf.cast(p_mask, tf.float32)                             # [B,S]
        start_logits = mask_logits(tf.squeeze(self.start_dense(hidden), -1), p_mask)
        start_log_probs = tf.nn.log_softmax(start_logits, -1)
        outputs = {}
        if start_positions is not None:
            start_positions = tf.reshape(tf.cast(start_positions, tf.int32), [-1])
            start_features = tf.gather(hidden, start_positions, batch_dims=1)   # [B,H]
            end_logits = mask_logits(self._end_logits(hidden, start_features[:, None, :]), p_mask)
            outputs["start_log_probs"] = start_log_probs
            outputs["end_log_probs"] = tf.nn.log_softmax(end_logits, -1)
        else:
            k1, k2 = self.start_n_top, self.end_n_top
            start_top_log_probs, start_top_index = tf.math.top_k(start_log_probs, k=k1)
            start_features = tf.gather(hidden, start_top_index, batch_dims=1)   # [B,k1,H]
            tiled = tf.repeat(hidden[:, None], k1, axis=1)                      # [B,k1,S,H]
            end_logits = mask_logits(self._end_logits(tiled, start_features[:, :, None, :]),
                               p_mask[:, None, :])                              # [B,k1,S]
            end_top_log_probs, end_top_index = tf.math.top_k(tf.nn.log_softmax(end_logits, -1), k=k2)
            outputs.update(
                start_top_log_probs=start_top_log_probs,
                start_top_index=start_top_index,
                end_top_log_probs=tf.reshape(end_top_log_probs, [-1, k1 * k2]),
                end_top_index=tf.reshape(end_top_index, [-1, k1 * k2]))
        # Answer verifier: expected start representation and [CLS]; it does not
        # depend on the end, so each feature has one cls_logits.
        start_p = tf.nn.softmax(start_logits, -1)
        start_feature = tf.einsum("bsh,bs->bh", hidden, start_p)
        x = self.answer_dense_0(tf.concat([start_feature, hidden[:, 0]], -1))
        x = self.answer_dropout(x, training=training)
        outputs["cls_logits"] = tf.squeeze(self.answer_dense_1(x), -1)
        return outputs


# --- losses -------------------------------------------------------------------

def _position_nll(log_probs: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    positions = tf.reshape(tf.cast(positions, tf.int32), [-1])
    return -tf.gather(log_probs, positions, batch_dims=1)


def v1_per_example_loss(outputs: Mapping[str, tf.Tensor], features: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """[B]: (CE(start) + CE(end)) / 2 on the v1 logits."""
    start = _position_nll(tf.nn.log_softmax(outputs["start_logits"], -1), features["start_positions"])
    end = _position_nll(tf.nn.log_softmax(outputs["end_logits"], -1), features["end_positions"])
    return (start + end) / 2.0


def v2_per_example_loss(outputs: Mapping[str, tf.Tensor], features: Mapping[str, tf.Tensor]) -> tf.Tensor:
    """[B]: (CE(start) + CE(end)) / 2 + 0.5 · sigmoid-CE(is_impossible, cls_logits)."""
    start = _position_nll(outputs["start_log_probs"], features["start_positions"])
    end = _position_nll(outputs["end_log_probs"], features["end_positions"])
    labels = tf.cast(tf.reshape(features["is_impossible"], [-1]), tf.float32)
    verifier = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=outputs["cls_logits"])
    return (start + end) / 2.0 + 0.5 * verifier


def squad_loss(outputs: Mapping[str, tf.Tensor], features: Mapping[str, tf.Tensor],
               version_2: bool) -> tf.Tensor:
    """The original's batch loss (mean of the per-example losses)."""
    fn = v2_per_example_loss if version_2 else v1_per_example_loss
    return tf.reduce_mean(fn(outputs, features))


# --- models -------------------------------------------------------------------

@serializable
class SquadV1Model(TaskModel):
    """An encoder + linear span head. Inputs: int32 ``input_ids``, ``input_mask``,
    ``segment_ids`` [B,S]. Outputs: float32 ``start_logits``, ``end_logits`` [B,S]."""

    version_2 = False

    def __init__(self, encoder: AlbertModel | AlbertConfig, **kwargs):
        kwargs.setdefault("name", "squad_v1")
        super().__init__(encoder, **kwargs)
        self.head = OutputProjection(2, TASK_HEAD_STDDEV, name="squad")

    def call(self, inputs: Mapping[str, tf.Tensor], training=None) -> dict[str, tf.Tensor]:
        sequence = self.encoder(inputs, training=training)["sequence_output"]
        logits = self.head(sequence)
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}


@serializable
class SquadV2Model(TaskModel):
    """An encoder + XLNet-style head. Inputs add int32 ``p_mask`` [B,S]. With a
    ``start_positions`` input (training features) the end logits are conditioned
    on it and the outputs are log-probs, so the loss is defined in training and
    evaluation alike; without it (prediction features) the outputs are the beam
    (see ``SquadV2Head``)."""

    version_2 = True

    def __init__(self, encoder: AlbertModel | AlbertConfig, start_n_top: int = 5, end_n_top: int = 5,
                 dropout_prob: float = 0.1, **kwargs):
        kwargs.setdefault("name", "squad_v2")
        super().__init__(encoder, **kwargs)
        self.start_n_top, self.end_n_top, self.dropout_prob = start_n_top, end_n_top, dropout_prob
        self.head = SquadV2Head(self.config.hidden_size, self.config.initializer_range, start_n_top, end_n_top,
                                dropout_prob, name="squad_v2_head")

    def call(self, inputs: Mapping[str, tf.Tensor], training=None) -> dict[str, tf.Tensor]:
        require_keys(inputs, ENCODER_INPUTS + ("p_mask",))  # p_mask: [batch, seq_length], 1 = not an answer
        sequence = self.encoder(inputs, training=training)["sequence_output"]
        return self.head(sequence, inputs["p_mask"], inputs.get("start_positions"), training=training)

    def dummy_inputs(self, batch_size: int = 1, seq_length: int = 8) -> dict[str, tf.Tensor]:
        inputs = self.encoder.dummy_inputs(batch_size, seq_length)
        inputs["p_mask"] = tf.zeros([batch_size, seq_length], tf.int32)
        return inputs

    def head_config(self) -> dict[str, Any]:
        return {"start_n_top": self.start_n_top, "end_n_top": self.end_n_top, "dropout_prob": self.dropout_prob}


def build_squad_model(config: AlbertConfig, version_2: bool, start_n_top: int = 5,
                      end_n_top: int = 5, dropout_prob: float = 0.1) -> keras.Model:
    """A built (variables created) SQuAD model for 1.1 or 2.0."""
    if version_2:
        model = SquadV2Model(AlbertModel(config), start_n_top, end_n_top, dropout_prob)
        seq = max(8, start_n_top, end_n_top)  # the beam needs at least k positions
        model(model.dummy_inputs(seq_length=seq))
    else:
        model = SquadV1Model(AlbertModel(config))
        model(model.dummy_inputs())
    return model


def _v2_head_names(model: SquadV2Model) -> dict[str, tf.Variable]:
    """The original create_v2_model's variable names."""
    head = model.head
    return {
        **dense_names("start_logits/dense", head.start_dense),
        **dense_names("end_logits/dense_0", head.end_dense_0),
        **layer_norm_names("end_logits/LayerNorm", head.end_layer_norm),
        **dense_names("end_logits/dense_1", head.end_dense_1),
        **dense_names("answer_class/dense_0", head.answer_dense_0),
        **dense_names("answer_class/dense_1", head.answer_dense_1),
    }


SQUAD_KIND = register(ModelKind(
    "squad", SquadV1Model, build=lambda config: build_squad_model(config, version_2=False),
    tf1_head_names=lambda model: projection_names("cls/squad", model.head),
    hf_architecture="AlbertForQuestionAnswering", tf1_marker="cls/squad/output_weights",
    tf2_marker="/head/output_weights/", description="SQuAD 1.1 span head"))
SQUAD_V2_KIND = register(ModelKind(
    "squad_v2", SquadV2Model, build=lambda config: build_squad_model(config, version_2=True),
    tf1_head_names=_v2_head_names, tf1_marker="answer_class/dense_0/kernel", tf2_marker="/head/start_dense/",
    description="SQuAD 2.0 head (XLNet-style, with answer verifier)"))
