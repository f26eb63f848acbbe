"""Two steps of the transformer block whose backward pass recomputes cheap results instead
of keeping them from the forward pass.

Why: a training step's peak memory is the activations its backward pass needs, held
from the forward pass (for ALBERT-base at batch 8 x 128, at the turn from forward to
backward).  Two of them are cheap to recompute from tensors that are kept anyway:

- ``attention_context``: the attention's scores ``q k^T``, scale, mask, softmax and cast to
  16 bits.  TensorFlow's derived gradients keep the float32 probabilities (softmax gradient)
  and their 16-bit cast (gradient of the values), and run about a dozen elementwise passes
  over [B, N, S, S] each way.  Kept here: nothing of [B, N, S, S] size; the backward pass
  recomputes the scores from the query and key (which the scores' gradient needs anyway: one
  batched matmul, about half a percent of the layer's matmul work) and then the probabilities with the
  softmax's gradient, one compiled loop each way (`albert_tf.fused`).  6 MB per layer less
  under bf16 (ALBERT-base, 8 x 128) than the plain ops; in float32, and for lengths known only
  at run time, the plain ops.
- ``gelu_dense``: GELU between the FFN's two matmuls.  Kept by the plain layers: the
  GELU input (for its gradient) and output (for the second matmul's kernel gradient), two
  [B, S, intermediate] tensors; kept here: only the GELU input, and the backward pass
  recomputes the output with the GELU's gradient, in one compiled loop
  (`albert_tf.fused`: about the cost of one GELU per layer).  6 MB per layer less.

Recomputations run after the incoming gradient (a control dependency, or an input that
depends on it): otherwise TensorFlow's executor runs every op whose inputs are ready at
once, computing them in the forward pass and holding the results, and grappler's
common-subexpression pass merges them with the forward ops.  The forward pass is the
plain layers' arithmetic; the gradients are TensorFlow's for MatMul, Cast and softmax, our
GELU's, and the bias's of `albert_tf.modeling.bias`.
"""
from __future__ import annotations

import tensorflow as tf

from albert_tf.fused import fused
from albert_tf.modeling.activations import gelu_value, gelu_value_and_grad
from albert_tf.modeling.bias import bias_gradient


def attention_softmax(scores: tf.Tensor, adder: tf.Tensor, scale: float) -> tf.Tensor:
    """The attention's probabilities in float32: softmax(float32(scores) * scale + adder)."""
    return tf.nn.softmax(tf.cast(scores, tf.float32) * scale + adder, axis=-1)


@fused
def _attention_probs(scores: tf.Tensor, adder: tf.Tensor, scale: float) -> tf.Tensor:
    """`attention_softmax` rounded to the scores' dtype, in one compiled loop."""
    return tf.cast(attention_softmax(scores, adder, scale), scores.dtype)


@fused
def _attention_probs_grad(scores: tf.Tensor, adder: tf.Tensor, d_probs: tf.Tensor,
                          scale: float) -> tuple[tf.Tensor, tf.Tensor]:
    """(d scores, the probabilities in the scores' dtype) for the gradient ``d_probs`` of the
    rounded probabilities, the probabilities recomputed in float32 from the kept scores:
    TensorFlow's derived gradient of cast, softmax, add and scale, in one compiled loop."""
    probs = attention_softmax(scores, adder, scale)
    d_probs = tf.cast(d_probs, tf.float32)
    d_logits = probs * (d_probs - tf.reduce_sum(d_probs * probs, axis=-1, keepdims=True))
    return tf.cast(d_logits * scale, scores.dtype), tf.cast(probs, scores.dtype)


def attention_context(query: tf.Tensor, key: tf.Tensor, adder: tf.Tensor, value: tf.Tensor,
                      scale: float) -> tf.Tensor:
    """``matmul(cast(softmax(float32(query key^T) * scale + adder), value.dtype), value)`` for a
    training step without attention dropout: query, key and value [..., S, D] (the compute dtype),
    the mask's additive term (float32, broadcast over heads and queries).

    The plain ops in float32 (kept scores would be as large as kept probabilities, and XLA's
    softmax is slower than TensorFlow's: `benchmarks/fused_steps.py`), and when the key length
    is known only at run time (batches cut to their longest row): XLA compiles per shape, and
    two more compilations for every new length cost fine-tuning through `run_classifier.py`
    more than the short batches' memory is worth (`benchmarks/driver_rate.py`).  Either way the
    gradients of query and key are TensorFlow's batched-matmul gradients, the same ops."""
    if query.dtype == tf.float32 or key.shape[-2] is None:
        scores = tf.matmul(query, key, transpose_b=True)
        return tf.matmul(tf.cast(attention_softmax(scores, adder, scale), value.dtype), value)

    @tf.custom_gradient
    def forward(query, key, value):
        scores = tf.matmul(query, key, transpose_b=True)
        context = tf.matmul(_attention_probs(scores, adder, scale), value)

        def backward(d_context):
            d_probs = tf.matmul(d_context, value, transpose_b=True)
            with tf.control_dependencies([d_probs]):  # recomputed once the gradient is there
                scores = tf.matmul(query, key, transpose_b=True)
            d_scores, probs = _attention_probs_grad(scores, adder, d_probs, scale)
            # TensorFlow's gradient of matmul(query, key, adjoint_b=True), op for op.
            d_query = tf.matmul(d_scores, key, grad_a=True)
            d_key = tf.matmul(d_scores, query, adjoint_a=True, grad_b=True)
            return d_query, d_key, tf.matmul(probs, d_context, transpose_a=True)

        return context, backward

    return forward(query, key, value)


def gelu_dense(pre: tf.Tensor, kernel: tf.Tensor, bias: tf.Tensor | None) -> tf.Tensor:
    """``gelu(pre) @ kernel + bias`` over the last axis of `pre` (rank 2 or 3): the
    original's GELU (tanh form) and then a dense layer, as `SharedDense` computes them."""
    args = [pre, kernel] + ([bias] if bias is not None else [])

    @tf.custom_gradient
    def forward(*args):
        pre, kernel = args[0], args[1]
        width, units = tf.shape(pre)[-1], tf.shape(kernel)[-1]
        outputs = tf.matmul(tf.reshape(gelu_value(pre), [-1, width]), kernel)
        if len(args) == 3:  # on the 2-D product: grappler fuses MatMul + BiasAdd
            outputs = tf.nn.bias_add(outputs, args[2])
        outputs = tf.reshape(outputs, tf.concat([tf.shape(pre)[:-1], [units]], 0))

        def backward(d_outputs):
            # The GELU output is recomputed with its gradient, in one pass over `pre`, once the
            # incoming gradient is there (it needs d_hidden, which needs d_outputs).
            d_flat = tf.reshape(d_outputs, [-1, units])
            d_hidden = tf.reshape(tf.matmul(d_flat, kernel, transpose_b=True), tf.shape(pre))
            hidden, d_pre = gelu_value_and_grad(pre, d_hidden)
            d_kernel = tf.matmul(tf.reshape(hidden, [-1, width]), d_flat, transpose_a=True)
            grads = [d_pre, d_kernel]
            if len(args) == 3:
                grads.append(bias_gradient(d_flat))
            return grads

        return outputs, backward

    return forward(*args)
