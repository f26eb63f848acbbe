"""Pretraining heads: masked LM (tied to the word table) and sentence order."""
from __future__ import annotations

from typing import Callable

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.keras import keras
from albert_tf.modeling.layers import LayerNorm, dense, initializer


def gather_positions(sequence: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """[B,S,H] at int positions [B,P] -> [B,P,H]."""
    return tf.gather(sequence, positions, batch_dims=1)


class MaskedLMHead(keras.layers.Layer):
    """`cls/predictions`: dense H->E with the activation, LayerNorm, then logits
    against the (tied) word-embedding table plus `output_bias`. Logits are float32."""

    def __init__(self, config: AlbertConfig, embedding_table: Callable[[], tf.Variable], **kwargs):
        kwargs["dtype"] = "float32"  # small (P positions, not S): keep the logits' inputs exact
        super().__init__(**kwargs)
        self.config = config
        # A getter, not the variable: the table belongs to the encoder, and tracking
        # it here too would give it a second path in object-based checkpoints.
        self._embedding_table = embedding_table
        self.transform = dense(config.embedding_size, config, "dense", config.hidden_act)
        self.layer_norm = LayerNorm(name="LayerNorm")

    def build(self, input_shape):
        self.output_bias = self.add_weight("output_bias", shape=[self.config.vocab_size],
                                           initializer="zeros", dtype=tf.float32)
        super().build(input_shape)

    def call(self, sequence_output, positions):
        x = gather_positions(sequence_output, positions)
        x = self.layer_norm(self.transform(x))
        table = tf.cast(self._embedding_table(), tf.float32)
        return tf.einsum("bpe,ve->bpv", tf.cast(x, tf.float32), table) + self.output_bias


class SentenceOrderHead(keras.layers.Layer):
    """`cls/seq_relationship`: 2-way logits on the pooled output; weights stored [2,H]
    ([out, in]) as in the original."""

    def __init__(self, config: AlbertConfig, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.config = config

    def build(self, input_shape):
        self.output_weights = self.add_weight(
            "output_weights", shape=[2, self.config.hidden_size],
            initializer=initializer(self.config), dtype=tf.float32)
        self.output_bias = self.add_weight("output_bias", shape=[2], initializer="zeros",
                                           dtype=tf.float32)
        super().build(input_shape)

    def call(self, pooled_output):
        pooled = tf.cast(pooled_output, tf.float32)
        return tf.matmul(pooled, self.output_weights, transpose_b=True) + self.output_bias
