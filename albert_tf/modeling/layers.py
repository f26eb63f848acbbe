"""Building blocks of the ALBERT encoder as Keras 2 layers.

Each layer's weights carry the last part of the original's TF1 variable names
(`gamma`, `beta`, `kernel`, `bias`, ...); the full names are assembled in one
place, `albert_tf.checkpoints.names`.

Mixed precision: under a `mixed_bfloat16` / `mixed_float16` policy the dense
layers compute in 16 bits, while LayerNorm, the attention softmax and the
embedding sum run in float32 (the original's numerics; bf16 softmax and
normalisation statistics lose too much precision).
"""
from __future__ import annotations

import math
from typing import Optional

import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.keras import keras
from albert_tf.modeling.activations import get_activation
from albert_tf.training.randomness import StatelessDropout


def initializer(config: AlbertConfig) -> keras.initializers.Initializer:
    """The original's weight initializer: truncated normal, stddev initializer_range."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def dropout(rate: float, name: str) -> keras.layers.Layer:
    """Dropout, active only when called with training=True.

    Stateless: inside the training loop its masks are a function of (seed, step,
    replica, call site), so a resumed run draws the same masks as an
    uninterrupted one (see `albert_tf.training.randomness`).
    """
    return StatelessDropout(rate, name=name)


def dense(units: int, config: AlbertConfig, name: str, activation: Optional[str] = None,
          use_bias: bool = True) -> keras.layers.Dense:
    return keras.layers.Dense(units, activation=get_activation(activation) if activation else None,
                              use_bias=use_bias, kernel_initializer=initializer(config), name=name)


# One weight for a call: (float32 value, the same cast to the compute dtype) — see SharedDense.
CastWeight = tuple[tf.Tensor, tf.Tensor]


@tf.custom_gradient
def _reuse_cast(master: tf.Tensor, cast: tf.Tensor) -> tf.Tensor:
    """`cast` (`master` cast once per forward pass) as one call's weight.  Its gradient goes
    to `master` as a float32 cast of this call's gradient, exactly what a per-call cast
    gives: the calls' gradients still add up in float32, not in 16 bits."""

    def backward(d_cast):
        return tf.cast(d_cast, master.dtype), None

    return tf.identity(cast), backward


class SharedDense(keras.layers.Dense):
    """The dense layers of a transformer block, which every layer of its ALBERT group runs.

    Under a mixed policy, Keras casts a kernel to 16 bits at every call: 12 casts per
    weight and 12 live 16-bit copies (170 MB for ALBERT-base) per step.  `cast_weights()`
    casts kernel and bias once per forward pass, and `call(x, cast_weights=...)` uses
    that copy.  Under float32 it is a plain Dense.
    """

    def add_weight(self, *args, **kwargs):
        kwargs["autocast"] = False  # read as float32; call() does the casting
        return super().add_weight(*args, **kwargs)

    def cast_weights(self) -> Optional[tuple[CastWeight, ...]]:
        """(kernel[, bias]) as (float32, compute dtype) pairs; None under float32 or before build."""
        if not self.built or self.compute_dtype == self.variable_dtype:
            return None
        weights = [self.kernel] + ([self.bias] if self.use_bias else [])
        return tuple((master, tf.cast(master, self.compute_dtype))
                     for master in (tf.convert_to_tensor(w) for w in weights))

    def call(self, inputs, cast_weights: Optional[tuple[CastWeight, ...]] = None):
        inputs = tf.cast(inputs, self.compute_dtype)
        if cast_weights is None:
            cast_weights = self.cast_weights()
        if cast_weights is None:  # float32: the weights as they are
            kernel, bias = self.kernel, self.bias if self.use_bias else None
        else:
            kernel = _reuse_cast(*cast_weights[0])
            bias = _reuse_cast(*cast_weights[1]) if self.use_bias else None
        rank = inputs.shape.rank
        outputs = tf.matmul(inputs, kernel) if rank == 2 else tf.tensordot(inputs, kernel, [[rank - 1], [0]])
        if bias is not None:
            outputs = tf.nn.bias_add(outputs, bias)
        return self.activation(outputs) if self.activation is not None else outputs


def shared_dense(units: int, config: AlbertConfig, name: str, activation: Optional[str] = None) -> SharedDense:
    return SharedDense(units, activation=get_activation(activation) if activation else None,
                       kernel_initializer=initializer(config), name=name)


def layer_norm(x: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor, epsilon: float) -> tf.Tensor:
    """LayerNorm over the last axis, computed as the original's `tf.contrib.layers.layer_norm`
    (moments, rsqrt, x * inv + (beta - mean * inv)), with its gradient written out.

    Why the written-out gradient: TensorFlow's derived gradient of those ops keeps several
    [tokens, width] float32 tensors per LayerNorm alive until the backward pass and runs about
    twenty elementwise ops over them (a quarter of all bytes a bf16 ALBERT step moves); this
    one keeps only the input (plus the per-token mean and 1/std) and takes about a dozen.
    """

    @tf.custom_gradient
    def forward(x, gamma, beta):
        mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
        rstd = tf.math.rsqrt(variance + epsilon)
        inv = rstd * gamma
        y = x * inv + (beta - mean * inv)

        def backward(dy):
            normalized = (x - mean) * rstd
            outer_axes = list(range(len(dy.shape) - 1))
            d_gamma = tf.reduce_sum(dy * normalized, axis=outer_axes)
            d_beta = tf.reduce_sum(dy, axis=outer_axes)
            d_normalized = dy * gamma
            d_x = rstd * (d_normalized - tf.reduce_mean(d_normalized, axis=-1, keepdims=True)
                          - normalized * tf.reduce_mean(d_normalized * normalized, axis=-1, keepdims=True))
            return d_x, d_gamma, d_beta

        return y, backward

    return forward(x, gamma, beta)


class LayerNorm(keras.layers.Layer):
    """Layer normalisation over the last axis, epsilon 1e-12, always in float32.

    Written out (not keras.layers.LayerNormalization) so the arithmetic is the
    original's `tf.contrib.layers.layer_norm` step by step and the weights are
    named `gamma`/`beta` as in Google's checkpoints.
    """

    def __init__(self, epsilon: float = 1e-12, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        width = input_shape[-1]
        self.gamma = self.add_weight("gamma", shape=[width], initializer="ones")
        self.beta = self.add_weight("beta", shape=[width], initializer="zeros")
        super().build(input_shape)

    def call(self, x):
        # The weights are read here, outside the custom gradient: it then needs no variables.
        return layer_norm(x, tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta), self.epsilon)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


class AlbertEmbeddings(keras.layers.Layer):
    """Word + token-type + position embeddings (width E), LayerNorm, dropout.

    Computed in float32 whatever the policy: it is a gather and a sum feeding a
    LayerNorm, cheap, and the tied MLM output reads the same table.
    """

    def __init__(self, config: AlbertConfig, use_one_hot_embeddings: bool = False, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.config = config
        self.use_one_hot_embeddings = use_one_hot_embeddings
        self.layer_norm = LayerNorm(name="LayerNorm")
        self.dropout = dropout(config.hidden_dropout_prob, name="dropout")

    def build(self, input_shape):
        c = self.config
        self.word_embeddings = self.add_weight(
            "word_embeddings", shape=[c.vocab_size, c.embedding_size], initializer=initializer(c))
        self.token_type_embeddings = self.add_weight(
            "token_type_embeddings", shape=[c.type_vocab_size, c.embedding_size], initializer=initializer(c))
        self.position_embeddings = self.add_weight(
            "position_embeddings", shape=[c.max_position_embeddings, c.embedding_size], initializer=initializer(c))
        super().build(input_shape)

    def _lookup(self, table: tf.Variable, ids: tf.Tensor) -> tf.Tensor:
        if self.use_one_hot_embeddings:  # TPUs prefer a matmul to a gather
            return tf.einsum("bsv,ve->bse", tf.one_hot(ids, tf.shape(table)[0], dtype=table.dtype), table)
        return tf.gather(table, ids)

    def call(self, input_ids, segment_ids, training=None):
        seq_length = tf.shape(input_ids)[1]
        x = self._lookup(self.word_embeddings, input_ids)
        x += self._lookup(self.token_type_embeddings, segment_ids)
        x += tf.expand_dims(self.position_embeddings[:seq_length], 0)
        return self.dropout(self.layer_norm(x), training=training)


class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention; the original's `attention_1/self` + `attention_1/output`."""

    def __init__(self, config: AlbertConfig, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = config.num_attention_heads
        self.head_size = config.attention_head_size
        hidden = config.hidden_size
        self.query = shared_dense(hidden, config, "query")
        self.key = shared_dense(hidden, config, "key")
        self.value = shared_dense(hidden, config, "value")
        self.output_dense = shared_dense(hidden, config, "dense")
        self.probs_dropout = dropout(config.attention_probs_dropout_prob, name="attention_dropout")

    def _split_heads(self, x):
        """[B,S,H] -> [B,N,S,D]: heads first, the layout batched matmuls take as it is."""
        batch, seq = tf.shape(x)[0], tf.shape(x)[1]
        return tf.transpose(tf.reshape(x, [batch, seq, self.num_heads, self.head_size]), [0, 2, 1, 3])

    def dense_layers(self) -> dict[str, SharedDense]:
        return {"query": self.query, "key": self.key, "value": self.value, "dense": self.output_dense}

    def call(self, x, attention_adder, training=None, cast_weights: Optional[dict] = None):
        w = cast_weights or {}
        q = self._split_heads(self.query(x, cast_weights=w.get("query")))
        k = self._split_heads(self.key(x, cast_weights=w.get("key")))
        v = self._split_heads(self.value(x, cast_weights=w.get("value")))
        # Batched matmuls on [B,N,S,D] rather than einsum: same products, and TensorFlow's
        # einsum transposes internally anyway (benchmarks/attention_layout.py: 1.01-1.09x in
        # float32, 2.8x in emulated bf16 on an AVX2 CPU).
        scores = tf.matmul(q, k, transpose_b=True)  # [B,N,S,S]
        # Softmax in float32; scale after the matmul, as the original does.
        scores = tf.cast(scores, tf.float32) * (1.0 / math.sqrt(float(self.head_size)))
        probs = tf.nn.softmax(scores + attention_adder, axis=-1)
        probs = self.probs_dropout(tf.cast(probs, self.compute_dtype), training=training)
        context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])  # [B,S,N,D]
        batch, seq = tf.shape(x)[0], tf.shape(x)[1]
        context = tf.reshape(context, [batch, seq, self.num_heads * self.head_size])
        return self.output_dense(context, cast_weights=w.get("dense"))


class TransformerBlock(keras.layers.Layer):
    """One inner-group block of the original (post-LayerNorm):

    a = LayerNorm(x + dropout(attention(x)));  y = LayerNorm_1(a + dropout(ffn(a))).
    """

    def __init__(self, config: AlbertConfig, **kwargs):
        # The residual stream stays float32 under mixed precision: no autocast of x.
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.attention = SelfAttention(config, name="attention_1")
        self.attention_dropout = dropout(config.hidden_dropout_prob, name="attention_output_dropout")
        self.attention_layer_norm = LayerNorm(name="LayerNorm")
        self.intermediate = shared_dense(config.intermediate_size, config, "intermediate", config.hidden_act)
        self.ffn_output = shared_dense(config.hidden_size, config, "ffn_output")
        self.ffn_dropout = dropout(config.hidden_dropout_prob, name="ffn_output_dropout")
        self.output_layer_norm = LayerNorm(name="LayerNorm_1")

    def cast_weights(self) -> Optional[dict]:
        """The block's dense weights cast to the compute dtype, to hand to every call of one
        forward pass (`call(..., cast_weights=...)`); None under float32 or before build."""
        layers = {**self.attention.dense_layers(), "intermediate": self.intermediate, "ffn_output": self.ffn_output}
        casts = {name: layer.cast_weights() for name, layer in layers.items()}
        return None if any(c is None for c in casts.values()) else casts

    def call(self, x, attention_adder, training=None, cast_weights: Optional[dict] = None):
        w = cast_weights or {}
        attention = self.attention(x, attention_adder, training=training, cast_weights=cast_weights)
        attention = self.attention_dropout(attention, training=training)
        attention = self.attention_layer_norm(tf.cast(x, tf.float32) + tf.cast(attention, tf.float32))
        ffn = self.ffn_output(self.intermediate(attention, cast_weights=w.get("intermediate")),
                              cast_weights=w.get("ffn_output"))
        ffn = self.ffn_dropout(ffn, training=training)
        return self.output_layer_norm(tf.cast(ffn, tf.float32) + attention)


def group_of_layer(layer_index: int, num_layers: int, num_groups: int) -> int:
    """Which weight group layer `layer_index` uses: int(l / L * G), as the original."""
    return int(layer_index / num_layers * num_groups)
