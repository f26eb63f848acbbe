"""Building blocks of the ALBERT encoder as Keras 2 layers.

Each layer's weights carry the last part of the original's TF1 variable names
(`gamma`, `beta`, `kernel`, `bias`, ...); the full names are assembled by
`albert_tf.weights.names` (the encoder's) and each model's kind (its heads').

Layers take plain arguments (sizes, rates, names of activations), not an
AlbertConfig, so that `get_config()` is their constructor's arguments and
`from_config` rebuilds them (Keras' own contract); the encoder reads its config
once and hands each layer what it needs.

Mixed precision: under a `mixed_bfloat16` / `mixed_float16` policy the dense
layers compute in 16 bits, while LayerNorm, the attention softmax and the
embedding sum run in float32 (the original's numerics; bf16 softmax and
normalisation statistics lose too much precision).
"""
from __future__ import annotations

import math
from typing import Optional

import tensorflow as tf

from albert_tf.fused import fused
from albert_tf.keras import keras
from albert_tf.modeling.activations import gelu, gelu_forward_only, get_activation
from albert_tf.modeling.bias import bias_add
from albert_tf.modeling.dropout import StatelessDropout
from albert_tf.modeling.recompute import attention_context, attention_softmax, gelu_dense


def initializer(initializer_range: float) -> keras.initializers.Initializer:
    """The original's weight initializer: truncated normal, stddev initializer_range."""
    return keras.initializers.TruncatedNormal(stddev=initializer_range)


def dropout(rate: float, name: str) -> keras.layers.Layer:
    """Dropout, active only when called with training=True.

    Stateless: inside the training loop its masks are a function of (seed, step,
    example position, call site), so a resumed run draws the same masks as an
    uninterrupted one (see `albert_tf.modeling.dropout`).
    """
    return StatelessDropout(rate, name=name)


def dense(units: int, initializer_range: float, name: str, activation: Optional[str] = None,
          use_bias: bool = True, layer_class: type = keras.layers.Dense, **kwargs) -> keras.layers.Dense:
    """The original's dense layer: truncated-normal kernel, an activation by config name
    (``layer_class=SharedDense`` for the dense layers of a transformer block)."""
    return layer_class(units, activation=get_activation(activation) if activation else None,
                       use_bias=use_bias, kernel_initializer=initializer(initializer_range), name=name, **kwargs)


# One weight for a forward pass: (float32 value, the same in the compute dtype) — see SharedDense.
CastWeight = tuple[tf.Tensor, tf.Tensor]


@tf.custom_gradient
def _last_use(master: tf.Tensor, cast: tf.Tensor) -> tf.Tensor:
    """`cast` (`master` cast once per forward pass) as one call's weight, the weight's last
    use in the pass.  Its gradient goes to `master` as a float32 cast of this call's
    gradient, exactly what a per-call cast gives."""

    def backward(d_cast):
        return tf.cast(d_cast, master.dtype), None

    return tf.identity(cast), backward


@tf.custom_gradient
def _use_and_pass_on(master: tf.Tensor, cast: tf.Tensor):
    """(`cast` as one call's weight, `master` for the weight's next use).  The gradient of
    `master` is the next uses' gradient plus this call's, cast to float32: the backward pass
    keeps a running float32 sum per weight instead of every layer's gradient of it until one
    sum at the end (for ALBERT-base 28 MB per layer, at the end of the backward pass)."""

    def backward(d_cast, d_next):
        # Snapshot (no copy: its input has no other use) stops grappler from folding the chain
        # of additions back into one AddN of all layers' gradients.  Not compiled: a compiled
        # cast-and-add (tried) was no faster and its new output buffers raised the peak RSS by
        # 55 MB (TensorFlow's AddV2 can write into its input).
        return tf.raw_ops.Snapshot(input=d_next) + tf.cast(d_cast, master.dtype), None

    return (tf.identity(cast), tf.identity(master)), backward


def use_weights(pairs: Optional[dict], last: bool) -> tuple[Optional[dict], Optional[dict]]:
    """One call's weights from a block's ``{layer name: (CastWeight, ...)}`` (what
    `TransformerBlock.cast_weights()` returns), and the pairs for the next call; ``last``:
    no call follows in this forward pass."""
    if pairs is None:
        return None, None
    weights, following = {}, {}
    for name, layer_pairs in pairs.items():
        if last:
            weights[name] = tuple(_last_use(master, cast) for master, cast in layer_pairs)
        else:
            uses = [_use_and_pass_on(master, cast) for master, cast in layer_pairs]
            weights[name] = tuple(weight for weight, _ in uses)
            following[name] = tuple((master, cast) for (_, master), (_, cast) in zip(uses, layer_pairs))
    return weights, (None if last else following)


class SharedDense(keras.layers.Dense):
    """The dense layers of a transformer block, which every layer of its ALBERT group runs
    (and the embedding projection: one 2-D matmul with its bias, which TensorFlow fuses).

    Under a mixed policy, Keras casts a kernel to 16 bits at every call: 12 casts per
    weight and 12 live 16-bit copies (170 MB for ALBERT-base) per step.  `cast_weights()`
    reads and casts kernel and bias once per forward pass; `use_weights` hands each call
    its weights, and `call(x, weights=...)` uses them.  Without them it reads its own.
    """

    def add_weight(self, *args, **kwargs):
        kwargs["autocast"] = False  # read as float32; call() does the casting
        return super().add_weight(*args, **kwargs)

    def cast_weights(self) -> Optional[tuple[CastWeight, ...]]:
        """(kernel[, bias]) as (float32, compute dtype) pairs (the same tensor twice under
        float32); None before build."""
        if not self.built:
            return None
        weights = [self.kernel] + ([self.bias] if self.use_bias else [])
        return tuple((master, tf.cast(master, self.compute_dtype))
                     for master in (tf.convert_to_tensor(w) for w in weights))

    def call(self, inputs, weights: Optional[tuple[tf.Tensor, ...]] = None, linear: bool = False,
             gelu_inputs: bool = False, training=None):
        """``activation(inputs @ kernel + bias)`` with this call's (kernel[, bias]) in the compute
        dtype; ``linear=True`` leaves the activation out; ``gelu_inputs=True`` computes
        ``gelu(inputs) @ kernel + bias`` (the FFN's second half, with less kept for the
        backward pass: `albert_tf.modeling.recompute.gelu_dense`).  Outside training the GELU
        takes the form TensorFlow fuses into the matmul (`gelu_forward_only`)."""
        inputs = tf.cast(inputs, self.compute_dtype)
        if weights is None:
            weights = tuple(_last_use(master, cast) for master, cast in self.cast_weights())
        kernel, bias = weights[0], weights[1] if self.use_bias else None
        if gelu_inputs:
            return gelu_dense(inputs, kernel, bias)
        # One 2-D matmul with the bias and activation applied before reshaping back: grappler
        # fuses MatMul + BiasAdd (+ activation) only when each consumes the one before directly.
        flatten = inputs.shape.rank != 2
        outputs = tf.matmul(tf.reshape(inputs, [-1, kernel.shape[0]]) if flatten else inputs, kernel)
        if bias is not None:
            # Training: the bias gradient summed in float32 (`bias.bias_add`); outside it the plain
            # op, which grappler fuses with the activation as well (no custom gradient between).
            outputs = bias_add(outputs, bias) if training else tf.nn.bias_add(outputs, bias)
        activation = None if linear else self.activation
        if activation is gelu and not training:
            activation = gelu_forward_only
        if activation is not None:
            outputs = activation(outputs)
        if flatten:
            outputs = tf.reshape(outputs, tf.concat([tf.shape(inputs)[:-1], [self.units]], 0))
        return outputs


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


def _statistics(total: tf.Tensor, epsilon: float) -> tuple[tf.Tensor, tf.Tensor]:
    """(mean, 1/std) over the last axis, as `layer_norm` computes them."""
    mean, variance = tf.nn.moments(total, axes=[-1], keepdims=True)
    return mean, tf.math.rsqrt(variance + epsilon)


@fused
def _residual_norm_value(x: tf.Tensor, branch: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor,
                         epsilon: float) -> tuple[tf.Tensor, tf.Tensor]:
    """(LayerNorm of x + branch in float32, that sum) in one compiled pass."""
    total = x + tf.cast(branch, x.dtype)
    mean, rstd = _statistics(total, epsilon)
    inv = rstd * gamma
    return total * inv + (beta - mean * inv), total


@fused
def _residual_norm_grad(dy: tf.Tensor, total: tf.Tensor, gamma: tf.Tensor, epsilon: float,
                        branch_dtype: tf.DType) -> tuple[tf.Tensor, ...]:
    """(d total, the same in the branch's dtype, d gamma, d beta) of `_residual_norm_value`,
    the statistics recomputed from the kept sum: `layer_norm`'s written-out gradient."""
    mean, rstd = _statistics(total, epsilon)
    normalized = (total - mean) * rstd
    d_normalized = dy * gamma
    d_total = rstd * (d_normalized - tf.reduce_mean(d_normalized, axis=-1, keepdims=True)
                      - normalized * tf.reduce_mean(d_normalized * normalized, axis=-1, keepdims=True))
    # Summed over every axis but the last (traced with shapes of unknown rank: reshaped to rows).
    rows = lambda t: tf.reshape(t, [-1, tf.shape(t)[-1]])  # noqa: E731
    return (d_total, tf.cast(d_total, branch_dtype), tf.reduce_sum(rows(dy * normalized), axis=0),
            tf.reduce_sum(rows(dy), axis=0))


def residual_layer_norm(x: tf.Tensor, branch: tf.Tensor, gamma: tf.Tensor, beta: tf.Tensor,
                        epsilon: float) -> tf.Tensor:
    """``layer_norm(x + cast(branch, float32))`` for training steps: the residual add, its cast
    and the normalisation as one compiled loop forward and one backward (`albert_tf.fused`),
    keeping only the float32 sum for the backward pass.  Run as separate ops they were about a
    dozen passes over [tokens, hidden] each way, a tenth of a bf16 step's op time."""

    @tf.custom_gradient
    def forward(x, branch, gamma, beta):
        y, total = _residual_norm_value(x, branch, gamma, beta, epsilon)

        def backward(dy):  # (d x, d branch, d gamma, d beta)
            return _residual_norm_grad(dy, total, gamma, epsilon, branch.dtype)

        return y, backward

    return forward(x, branch, gamma, beta)


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

    def call(self, x, branch: Optional[tf.Tensor] = None, training=None):
        """LayerNorm of ``x`` (float32), or of ``x + branch`` (a residual connection; ``branch`` in
        any float dtype, added in float32).  In training the residual form runs compiled."""
        # The weights are read here, outside the custom gradient: it then needs no variables.
        gamma, beta = tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta)
        if branch is not None and training:
            return residual_layer_norm(tf.cast(x, tf.float32), branch, gamma, beta, self.epsilon)
        if branch is not None:
            x = tf.cast(x, tf.float32) + tf.cast(branch, tf.float32)
        return layer_norm(x, gamma, beta, self.epsilon)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


class AlbertEmbeddings(keras.layers.Layer):
    """Word + token-type + position embeddings (width E), LayerNorm, dropout.

    Computed in float32 whatever the policy: it is a gather and a sum feeding a
    LayerNorm, cheap, and the tied MLM output reads the same table.
    """

    def __init__(self, vocab_size: int, embedding_size: int, type_vocab_size: int = 2,
                 max_position_embeddings: int = 512, initializer_range: float = 0.02, dropout_rate: float = 0.0,
                 use_one_hot_embeddings: bool = False, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.vocab_size, self.embedding_size = vocab_size, embedding_size
        self.type_vocab_size, self.max_position_embeddings = type_vocab_size, max_position_embeddings
        self.initializer_range, self.dropout_rate = initializer_range, dropout_rate
        self.use_one_hot_embeddings = use_one_hot_embeddings
        self.layer_norm = LayerNorm(name="LayerNorm")
        self.dropout = dropout(dropout_rate, name="dropout")

    def build(self, input_shape):
        init = lambda: initializer(self.initializer_range)  # noqa: E731 - one instance per weight: own values
        self.word_embeddings = self.add_weight(
            "word_embeddings", shape=[self.vocab_size, self.embedding_size], initializer=init())
        self.token_type_embeddings = self.add_weight(
            "token_type_embeddings", shape=[self.type_vocab_size, self.embedding_size], initializer=init())
        self.position_embeddings = self.add_weight(
            "position_embeddings", shape=[self.max_position_embeddings, self.embedding_size], initializer=init())
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

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "embedding_size": self.embedding_size,
                "type_vocab_size": self.type_vocab_size, "max_position_embeddings": self.max_position_embeddings,
                "initializer_range": self.initializer_range, "dropout_rate": self.dropout_rate,
                "use_one_hot_embeddings": self.use_one_hot_embeddings}


class SelfAttention(keras.layers.Layer):
    """Multi-head self-attention; the original's `attention_1/self` + `attention_1/output`."""

    def __init__(self, hidden_size: int, num_attention_heads: int, initializer_range: float = 0.02,
                 dropout_rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        if hidden_size % num_attention_heads:
            raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_attention_heads "
                             f"{num_attention_heads}")
        self.hidden_size, self.num_heads = hidden_size, num_attention_heads
        self.head_size = hidden_size // num_attention_heads
        self.initializer_range, self.dropout_rate = initializer_range, dropout_rate
        self.query = dense(hidden_size, initializer_range, "query", layer_class=SharedDense)
        self.key = dense(hidden_size, initializer_range, "key", layer_class=SharedDense)
        self.value = dense(hidden_size, initializer_range, "value", layer_class=SharedDense)
        self.output_dense = dense(hidden_size, initializer_range, "dense", layer_class=SharedDense)
        self.probs_dropout = dropout(dropout_rate, name="attention_dropout")

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size, "num_attention_heads": self.num_heads,
                "initializer_range": self.initializer_range, "dropout_rate": self.dropout_rate}

    def _split_heads(self, x):
        """[B,S,H] -> [B,N,S,D]: heads first, the layout batched matmuls take as it is."""
        batch, seq = tf.shape(x)[0], tf.shape(x)[1]
        return tf.transpose(tf.reshape(x, [batch, seq, self.num_heads, self.head_size]), [0, 2, 1, 3])

    def dense_layers(self) -> dict[str, SharedDense]:
        return {"query": self.query, "key": self.key, "value": self.value, "dense": self.output_dense}

    def call(self, x, attention_adder, training=None, weights: Optional[dict] = None):
        w = weights or {}
        q = self._split_heads(self.query(x, weights=w.get("query")))
        k = self._split_heads(self.key(x, weights=w.get("key")))
        v = self._split_heads(self.value(x, weights=w.get("value")))
        # Batched matmuls on [B,N,S,D] rather than einsum: same products, and TensorFlow's
        # einsum transposes internally anyway (benchmarks/attention_layout.py: 1.01-1.09x in
        # float32, 2.8x in emulated bf16 on an AVX2 CPU).
        # Softmax in float32; scale after the matmul, as the original does.
        scale = 1.0 / math.sqrt(float(self.head_size))
        if training and self.probs_dropout.rate == 0.0:  # under bf16: compiled, less kept for the backward pass
            context = attention_context(q, k, attention_adder, v, scale)
        else:
            scores = tf.matmul(q, k, transpose_b=True)  # [B,N,S,S]
            probs = attention_softmax(scores, attention_adder, scale)
            context = tf.matmul(self.probs_dropout(tf.cast(probs, self.compute_dtype), training=training), v)
        context = tf.transpose(context, [0, 2, 1, 3])  # [B,S,N,D]
        batch, seq = tf.shape(x)[0], tf.shape(x)[1]
        context = tf.reshape(context, [batch, seq, self.num_heads * self.head_size])
        return self.output_dense(context, weights=w.get("dense"))


class TransformerBlock(keras.layers.Layer):
    """One inner-group block of the original (post-LayerNorm):

    a = LayerNorm(x + dropout(attention(x)));  y = LayerNorm_1(a + dropout(ffn(a))).
    """

    def __init__(self, hidden_size: int, num_attention_heads: int, intermediate_size: int,
                 hidden_act: str = "gelu", hidden_dropout_prob: float = 0.0,
                 attention_probs_dropout_prob: float = 0.0, initializer_range: float = 0.02, **kwargs):
        # The residual stream stays float32 under mixed precision: no autocast of x.
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.hidden_size, self.num_attention_heads = hidden_size, num_attention_heads
        self.intermediate_size, self.hidden_act = intermediate_size, hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        self.attention = SelfAttention(hidden_size, num_attention_heads, initializer_range,
                                       attention_probs_dropout_prob, name="attention_1")
        self.attention_dropout = dropout(hidden_dropout_prob, name="attention_output_dropout")
        self.attention_layer_norm = LayerNorm(name="LayerNorm")
        self.intermediate = dense(intermediate_size, initializer_range, "intermediate", hidden_act,
                                  layer_class=SharedDense)
        self.ffn_output = dense(hidden_size, initializer_range, "ffn_output", layer_class=SharedDense)
        self.ffn_dropout = dropout(hidden_dropout_prob, name="ffn_output_dropout")
        self.output_layer_norm = LayerNorm(name="LayerNorm_1")

    def get_config(self):
        return {**super().get_config(), "hidden_size": self.hidden_size,
                "num_attention_heads": self.num_attention_heads, "intermediate_size": self.intermediate_size,
                "hidden_act": self.hidden_act, "hidden_dropout_prob": self.hidden_dropout_prob,
                "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
                "initializer_range": self.initializer_range}

    def cast_weights(self) -> Optional[dict]:
        """The block's dense weights as `SharedDense.cast_weights()` pairs, read once per forward
        pass, for `use_weights` to hand to each call; None before build."""
        layers = {**self.attention.dense_layers(), "intermediate": self.intermediate, "ffn_output": self.ffn_output}
        casts = {name: layer.cast_weights() for name, layer in layers.items()}
        return None if any(c is None for c in casts.values()) else casts

    def call(self, x, attention_adder, training=None, weights: Optional[dict] = None):
        """``weights``: this call's, from `use_weights` (else every dense layer reads its own)."""
        w = weights or {}
        attention = self.attention(x, attention_adder, training=training, weights=weights)
        attention = self.attention_dropout(attention, training=training)
        attention = self.attention_layer_norm(x, attention, training=training)
        if self.intermediate.activation is gelu and training:  # the same ops, less kept for the backward pass
            pre_activation = self.intermediate(attention, weights=w.get("intermediate"), linear=True)
            ffn = self.ffn_output(pre_activation, weights=w.get("ffn_output"), gelu_inputs=True)
        else:
            hidden = self.intermediate(attention, weights=w.get("intermediate"), training=training)
            ffn = self.ffn_output(hidden, weights=w.get("ffn_output"))
        ffn = self.ffn_dropout(ffn, training=training)
        return self.output_layer_norm(attention, ffn, training=training)


def group_of_layer(layer_index: int, num_layers: int, num_groups: int) -> int:
    """Which weight group layer `layer_index` uses: int(l / L * G), as the original."""
    return int(layer_index / num_layers * num_groups)
