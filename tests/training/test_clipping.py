"""The loop clips the gradient to global norm 1.0 (the original's ``clip_by_global_norm``
around ``apply_gradients``), checked against one plain-SGD step computed in NumPy."""
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.keras import keras
from albert_tf.training import Task, TrainConfig, Trainer

RNG = np.random.default_rng(7)
X = RNG.standard_normal((4, 5)).astype(np.float32)
Y = (RNG.standard_normal((4, 3)) + 30.0).astype(np.float32)  # far from the start: a large gradient
KERNEL = (RNG.standard_normal((5, 3)) * 0.1).astype(np.float32)
BIAS = np.array([0.5, -0.5, 0.0], np.float32)
LEARNING_RATE = 0.1


def numpy_gradients() -> dict[str, np.ndarray]:
    """d/dW and d/db of mean_over_batch(sum_j (XW + b - Y)^2), by hand."""
    residual = X @ KERNEL + BIAS - Y
    return {"kernel": 2.0 * X.T @ residual / len(X), "bias": 2.0 * residual.sum(0) / len(X)}


def make_trainer(output_dir, **config) -> Trainer:
    def build_model():
        dense = keras.layers.Dense(3, kernel_initializer=keras.initializers.Constant(KERNEL),
                                   bias_initializer=keras.initializers.Constant(BIAS), name="dense")
        return keras.Sequential([keras.Input((5,)), dense])

    def loss_fn(model, features, training):
        prediction = model(features["x"], training=training)
        return tf.reduce_mean(tf.reduce_sum(tf.square(prediction - features["y"]), -1))

    task = Task(build_model=build_model, loss_fn=loss_fn,
                train_dataset_fn=lambda ctx: tf.data.Dataset.from_tensors({"x": X, "y": Y}).repeat())
    # Plain SGD: the update is exactly lr * (clipped) gradient, so any change in clipping shows.
    return Trainer(task, tf.distribute.OneDeviceStrategy("/cpu:0"),
                   lambda: keras.optimizers.SGD(LEARNING_RATE),
                   TrainConfig(output_dir=str(output_dir), num_train_steps=1, train_batch_size=len(X),
                               handle_signals=False, **config))


def test_default_config_clips_to_global_norm_one(tmp_path):
    grads = numpy_gradients()
    norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
    # Both tensors exceed 1 on their own: per-tensor clipping would give another update.
    assert min(np.linalg.norm(g) for g in grads.values()) > 10.0
    trainer = make_trainer(tmp_path)  # clip_norm left at its default
    result = trainer.train()
    kernel, bias = (v.numpy() for v in trainer.model.layers[-1].weights)
    np.testing.assert_allclose(kernel, KERNEL - LEARNING_RATE * grads["kernel"] / norm, rtol=0, atol=1e-6)
    np.testing.assert_allclose(bias, BIAS - LEARNING_RATE * grads["bias"] / norm, rtol=0, atol=1e-6)
    # The logged norm is the one before clipping.
    assert result.logs["gradient_norm"] == pytest.approx(norm, rel=1e-5)


def test_no_clipping_when_disabled(tmp_path):
    grads = numpy_gradients()
    trainer = make_trainer(tmp_path, clip_norm=None)
    trainer.train()
    kernel, bias = (v.numpy() for v in trainer.model.layers[-1].weights)
    np.testing.assert_allclose(kernel, KERNEL - LEARNING_RATE * grads["kernel"], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(bias, BIAS - LEARNING_RATE * grads["bias"], rtol=1e-5, atol=1e-4)
