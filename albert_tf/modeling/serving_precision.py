"""The precision an export computes in (``--serving_precision``), whatever the training's.

``float32`` (the default): every op in float32, the outputs those of the float32 model.
``bfloat16``: for CPUs with bf16 hardware (AVX512_BF16, AMX). The exported graph itself casts
the dense and attention matmuls' weights and activations to bfloat16 (the model's
``mixed_bfloat16`` arithmetic: LayerNorm, softmax, the embedding sum, the residual stream and
the task heads stay float32, outputs are float32), so TensorFlow Serving runs it as exported:
no session options, no grappler rewrite at load time. The variables stay float32.

The precision is a property of the traced graph, and Keras layers read their compute dtype
when called, so an export traces a copy of the model built under the wanted policy, holding
the trained model's weights.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when used: the drivers read the choices below before TensorFlow loads
    from albert_tf.keras import keras

# --serving_precision value -> the Keras policy the exported graph is traced under.
SERVING_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}
DEFAULT_SERVING_PRECISION = "float32"


def check_serving_precision(precision: str) -> str:
    if precision not in SERVING_POLICIES:
        raise ValueError(f"--serving_precision={precision!r}: expected one of {', '.join(SERVING_POLICIES)}")
    return precision


def model_for_serving(model: "keras.Model", precision: str = DEFAULT_SERVING_PRECISION) -> "keras.Model":
    """``model`` itself if it already computes in ``precision``, else a copy of it (same class,
    config and weights) built under that precision's Keras policy."""
    import tensorflow as tf

    from albert_tf import cpu_bf16
    from albert_tf.keras import keras

    policy = keras.mixed_precision.Policy(SERVING_POLICIES[check_serving_precision(precision)])
    if precision == "bfloat16":  # served where it is exported, it runs on a GPU if there is one
        cpu_bf16.warn_if_emulated("--serving_precision=bfloat16",
                                  "GPU" if tf.config.list_physical_devices("GPU") else "CPU")
    if model.compute_dtype == policy.compute_dtype and model.variable_dtype == policy.variable_dtype:
        return model
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(policy)
    try:  # get_config holds no dtype: the copy's layers take the global policy
        copy = type(model).from_config(model.get_config())
        copy(copy.dummy_inputs())
    finally:
        keras.mixed_precision.set_global_policy(previous)
    source, target = model.weights, copy.weights
    mismatched = [(a.name, b.name) for a, b in zip(source, target) if a.shape != b.shape]
    if len(source) != len(target) or mismatched:
        raise ValueError(f"the {precision} copy of {model.name} has other weights than the model "
                         f"({len(target)} vs {len(source)}; first mismatches {mismatched[:3]})")
    for a, b in zip(source, target):
        b.assign(a)
    return copy
