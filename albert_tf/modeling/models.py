"""AlbertPretrainer: the encoder + masked-LM head (tied to the word table) + sentence-order head."""
from __future__ import annotations

from typing import Any, Mapping

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.keras import keras
from albert_tf.modeling.encoder import ENCODER_INPUTS, AlbertModel, TaskModel, check_inputs, serializable
from albert_tf.modeling.heads import MaskedLMHead, OutputProjection


@serializable
class AlbertPretrainer(TaskModel):
    """Encoder + masked-LM head (tied to the word table) + sentence-order head.

    Inputs add int32 `masked_lm_positions` [B,P] (without it: every position, P = S);
    outputs add `mlm_logits` [B,P,V] and `sop_logits` [B,2] (float32). The encoder is `.encoder`.
    """

    def __init__(self, encoder: AlbertModel | AlbertConfig, use_one_hot_embeddings: bool = False, **kwargs):
        kwargs.setdefault("name", "albert_pretrainer")
        if isinstance(encoder, AlbertConfig):
            encoder = AlbertModel(encoder, use_one_hot_embeddings)
        super().__init__(encoder, **kwargs)
        config = self.config
        build(self.encoder)
        self.masked_lm = MaskedLMHead(config.vocab_size, config.embedding_size, config.hidden_act,
                                      config.initializer_range, name="predictions")
        self.sentence_order = OutputProjection(2, config.initializer_range, name="seq_relationship")

    def call(self, inputs: Mapping[str, tf.Tensor], training=None) -> dict[str, Any]:
        # A tuple or a bare tensor must reach check_inputs' message, not fail in `in` first.
        with_positions = isinstance(inputs, Mapping) and "masked_lm_positions" in inputs
        check_inputs(inputs, ENCODER_INPUTS + (("masked_lm_positions",) if with_positions else ()),
                     self.config.max_position_embeddings)
        outputs = dict(self.encoder(inputs, training=training))
        if with_positions:
            positions = tf.cast(inputs["masked_lm_positions"], tf.int32)
        else:  # every position, as transformers' AlbertForMaskedLM
            shape = tf.shape(inputs["input_ids"])
            positions = tf.broadcast_to(tf.range(shape[1], dtype=tf.int32)[None], shape)
        outputs["mlm_logits"] = self.masked_lm(outputs["sequence_output"], positions,
                                               self.encoder.embeddings.word_embeddings)
        outputs["sop_logits"] = self.sentence_order(outputs["pooled_output"])
        return outputs

    def dummy_inputs(self, batch_size: int = 1, seq_length: int = 8) -> dict[str, tf.Tensor]:
        inputs = self.encoder.dummy_inputs(batch_size, seq_length)
        inputs["masked_lm_positions"] = tf.zeros([batch_size, 2], tf.int32)
        return inputs


def build(model: keras.Model) -> keras.Model:
    """Creates the model's variables by calling it once on dummy inputs."""
    model(model.dummy_inputs())
    return model
