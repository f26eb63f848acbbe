"""The pretraining loss against the original's formulas (log_softmax times one-hot labels,
argmax of the log-probabilities) and against NumPy in float64."""
import numpy as np
import tensorflow as tf

from albert_tf.pretraining import pretraining_loss

VOCAB, BATCH, PREDICTIONS = 3000, 4, 20


def _batch(seed: int):
    rng = np.random.default_rng(seed)
    logits = tf.constant(rng.normal(0.0, 3.0, [BATCH, PREDICTIONS, VOCAB]), tf.float32)
    features = {
        "masked_lm_ids": tf.constant(rng.integers(0, VOCAB, [BATCH, PREDICTIONS]), tf.int32),
        "masked_lm_weights": tf.constant((rng.random([BATCH, PREDICTIONS]) < 0.8), tf.float32),
        "next_sentence_labels": tf.constant(rng.integers(0, 2, [BATCH, 1]), tf.int32),
    }
    sop_logits = tf.constant(rng.normal(0.0, 1.0, [BATCH, 2]), tf.float32)
    return logits, sop_logits, features


def _original_mlm_loss(logits, features):
    """The original's masked-LM loss, op for op."""
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(features["masked_lm_ids"], VOCAB, dtype=tf.float32)
    per_example = -tf.reduce_sum(log_probs * one_hot, axis=-1)
    weights = features["masked_lm_weights"]
    return tf.reduce_sum(weights * per_example) / (tf.reduce_sum(weights) + 1e-5), per_example, log_probs


def test_masked_lm_loss_is_the_originals_bit_for_bit_with_the_same_gradient():
    logits, sop_logits, features = _batch(0)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(logits)
        # The loss the loop differentiates: MLM + SOP; SOP does not depend on the MLM logits.
        loss, metrics = pretraining_loss({"mlm_logits": logits, "sop_logits": sop_logits}, features)
        original, per_example, _ = _original_mlm_loss(logits, features)
    weights = features["masked_lm_weights"]
    original_sum = tf.reduce_sum(weights * per_example)
    assert metrics["masked_lm_loss"][0].numpy() == original_sum.numpy()
    got, want = tape.gradient(loss, logits).numpy(), tape.gradient(original, logits).numpy()
    # Softmax - one_hot from a fused kernel: the same up to float32 rounding of the softmax.
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-7)


def test_masked_lm_loss_and_accuracy_against_numpy():
    logits, sop_logits, features = _batch(1)
    _, metrics = pretraining_loss({"mlm_logits": logits, "sop_logits": sop_logits}, features)
    x = logits.numpy().astype(np.float64)
    log_probs = x - x.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    ids, w = features["masked_lm_ids"].numpy(), features["masked_lm_weights"].numpy()
    nll = -np.take_along_axis(log_probs, ids[..., None], -1)[..., 0]
    np.testing.assert_allclose(metrics["masked_lm_loss"][0].numpy(), (w * nll).sum(), rtol=1e-6)
    correct = (log_probs.argmax(-1) == ids).astype(np.float64)
    assert metrics["masked_lm_accuracy"][0].numpy() == (w * correct).sum()
    assert metrics["masked_lm_accuracy"][1].numpy() == w.sum()


def test_accuracy_counts_hits_where_the_label_is_the_argmax():
    logits, sop_logits, features = _batch(2)
    # Put the label on top for the first half of the predictions.
    ids = features["masked_lm_ids"].numpy()
    boosted = logits.numpy()
    rows, cols = np.meshgrid(np.arange(BATCH), np.arange(PREDICTIONS // 2), indexing="ij")
    boosted[rows, cols, ids[:, :PREDICTIONS // 2]] = 100.0
    features["masked_lm_weights"] = tf.ones([BATCH, PREDICTIONS])
    _, metrics = pretraining_loss({"mlm_logits": tf.constant(boosted), "sop_logits": sop_logits}, features)
    _, _, log_probs = _original_mlm_loss(tf.constant(boosted), features)
    want = np.sum(np.argmax(log_probs.numpy(), -1) == ids)
    assert metrics["masked_lm_accuracy"][0].numpy() == want
    assert want >= BATCH * PREDICTIONS // 2
