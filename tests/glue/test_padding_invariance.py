"""Trimming a batch's padding changes no number: with dropout on, a classifier step on a batch
padded to 128 and on the same batch trimmed to its longest row give the same loss and
gradients (dropout masks are keyed by coordinates, not flat index: albert_tf.modeling.dropout)."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.glue.heads import GlueClassifier
from albert_tf.modeling.dropout import dropout_seed_scope
from albert_tf.training.loop import step_seed

CONFIG = {"vocab_size": 300, "embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
          "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 128,
          "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}


def _padded_batch(lengths, seq_length=128):
    rng = np.random.default_rng(0)
    ids = np.zeros([len(lengths), seq_length], np.int32)
    segments = np.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(5, 300, length)
        segments[row, length // 2:length] = 1
    mask = (np.arange(seq_length)[None] < np.array(lengths)[:, None]).astype(np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


@pytest.mark.parametrize("xla", [False, True])
def test_padded_and_trimmed_batches_give_the_same_loss_and_gradients(xla):
    model = GlueClassifier(AlbertConfig.from_dict(CONFIG), num_labels=3)
    model(model.dummy_inputs())
    lengths = [7, 23, 3, 31, 12]
    batch = _padded_batch(lengths)
    labels = tf.constant([0, 2, 1, 1, 0])

    @tf.function(jit_compile=xla)
    def step(inputs):
        with tf.GradientTape() as tape, dropout_seed_scope(step_seed(7, tf.constant(3)), 2):
            logits = model(inputs, training=True)["logits"]
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
        return loss, tape.gradient(loss, model.trainable_variables)

    padded_loss, padded_grads = step({k: tf.constant(v) for k, v in batch.items()})
    trimmed_loss, trimmed_grads = step({k: tf.constant(v[:, :max(lengths)]) for k, v in batch.items()})
    np.testing.assert_allclose(trimmed_loss.numpy(), padded_loss.numpy(), atol=1e-5, rtol=0)
    for padded, trimmed, var in zip(padded_grads, trimmed_grads, model.trainable_variables):
        np.testing.assert_allclose(tf.convert_to_tensor(trimmed).numpy(), tf.convert_to_tensor(padded).numpy(),
                                   atol=1e-5, rtol=0, err_msg=var.name)
    # Dropout is really on: another step's masks give another loss.
    with dropout_seed_scope(step_seed(7, tf.constant(4)), 2):
        other = model({k: tf.constant(v) for k, v in batch.items()}, training=True)["logits"]
    with dropout_seed_scope(step_seed(7, tf.constant(3)), 2):
        same = model({k: tf.constant(v) for k, v in batch.items()}, training=True)["logits"]
    assert np.abs(other.numpy() - same.numpy()).max() > 1e-3
