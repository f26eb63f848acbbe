"""Heads shared by the models: the output projection and the masked-LM head.

`OutputProjection` is the original's one head shape, written four times there:
`logits = x · output_weightsᵀ + output_bias` with `output_weights` stored [units, in]
([out, in]), in float32. It serves sentence order (`cls/seq_relationship`, on the
pooled output), the GLUE and RACE classifiers (top-level `output_weights`), and the
SQuAD 1.1 span head (`cls/squad`, on every position). The TF1 prefix is not the
layer's business: each model's kind assigns it (`albert_tf.weights.kinds`).
"""
from __future__ import annotations

import tensorflow as tf

from albert_tf.keras import keras
from albert_tf.modeling.layers import LayerNorm, dense, initializer


# The original's GLUE, RACE and SQuAD 1.1 heads start truncated-normal with this stddev whatever the
# config's initializer_range (sentence order and the SQuAD 2.0 head follow the config).
TASK_HEAD_STDDEV = 0.02


def gather_positions(sequence: tf.Tensor, positions: tf.Tensor) -> tf.Tensor:
    """[B,S,H] at int positions [B,P] -> [B,P,H]."""
    return tf.gather(sequence, positions, batch_dims=1)


class OutputProjection(keras.layers.Layer):
    """[..., H] -> [..., units] float32 logits through `output_weights` [units, H] and `output_bias`."""

    def __init__(self, units: int, initializer_range: float = 0.02, **kwargs):
        kwargs["dtype"] = "float32"  # logits and the losses on them keep full precision
        super().__init__(**kwargs)
        self.units = units
        self.initializer_range = initializer_range

    def build(self, input_shape):
        hidden = int(input_shape[-1])
        self.output_weights = self.add_weight(
            "output_weights", shape=[self.units, hidden], initializer=initializer(self.initializer_range),
            dtype=tf.float32)
        self.output_bias = self.add_weight("output_bias", shape=[self.units], initializer="zeros", dtype=tf.float32)
        super().build(input_shape)

    def call(self, x):
        x = tf.cast(x, tf.float32)
        if x.shape.rank == 2:
            return tf.matmul(x, self.output_weights, transpose_b=True) + self.output_bias
        return tf.einsum("...h,nh->...n", x, self.output_weights) + self.output_bias

    def get_config(self):
        return {**super().get_config(), "units": self.units, "initializer_range": self.initializer_range}


class MaskedLMHead(keras.layers.Layer):
    """`cls/predictions`: dense H->E with the activation, LayerNorm, then logits against the
    word-embedding table plus `output_bias`. Logits are float32.

    The table is an argument of `call`, not a weight of this layer: it belongs to the
    encoder (tied), and tracking it here too would give it a second path in
    object-based checkpoints.
    """

    def __init__(self, vocab_size: int, embedding_size: int, hidden_act: str = "gelu",
                 initializer_range: float = 0.02, **kwargs):
        kwargs["dtype"] = "float32"  # small (P positions, not S): keep the logits' inputs exact
        super().__init__(**kwargs)
        self.vocab_size, self.embedding_size = vocab_size, embedding_size
        self.hidden_act, self.initializer_range = hidden_act, initializer_range
        self.transform = dense(embedding_size, initializer_range, "dense", hidden_act)
        self.layer_norm = LayerNorm(name="LayerNorm")

    def build(self, input_shape):
        self.output_bias = self.add_weight("output_bias", shape=[self.vocab_size],
                                           initializer="zeros", dtype=tf.float32)
        super().build(input_shape)

    def call(self, sequence_output, positions, embedding_table):
        x = gather_positions(sequence_output, positions)
        x = self.layer_norm(self.transform(x))
        table = tf.cast(embedding_table, tf.float32)
        return tf.einsum("bpe,ve->bpv", tf.cast(x, tf.float32), table) + self.output_bias

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "embedding_size": self.embedding_size,
                "hidden_act": self.hidden_act, "initializer_range": self.initializer_range}
