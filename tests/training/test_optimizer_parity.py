"""The whole update path of a training step against the original's ``create_optimizer``, in NumPy.

``test_optimizers.py`` checks the optimizers' arithmetic by calling ``apply_gradients``;
here the Trainer runs the path users run: the gradient, its global-norm clip at 1.0,
warmup + polynomial decay read at ``global_step``, AdamW / LAMB with the exclusions, and the
step count, on ALBERT-base names and shapes, with the recipes' flags, under mixed precision
and gradient accumulation.  The reference is written from the original's
``optimization.py`` / ``lamb_optimizer.py`` (float32, as TF1 computes).  Every registered
model kind's variables get weight decay and the trust ratio exactly where the original's
names would.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.keras import keras
from albert_tf.training import Task, TrainConfig, Trainer, create_optimizer

F32 = np.float32
EXCLUDE = ("LayerNorm", "layer_norm", "bias")  # the original's exclude_from_weight_decay

# ALBERT-base's variables, by their TF1 names, with their shapes (one transformer block's worth).
SHAPES = {
    "bert/embeddings/word_embeddings": (30000, 128),
    "bert/embeddings/token_type_embeddings": (2, 128),
    "bert/embeddings/position_embeddings": (512, 128),
    "bert/embeddings/LayerNorm/gamma": (128,),
    "bert/embeddings/LayerNorm/beta": (128,),
    "bert/encoder/embedding_hidden_mapping_in/kernel": (128, 768),
    "bert/encoder/embedding_hidden_mapping_in/bias": (768,),
    "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/kernel": (768, 768),
    "bert/encoder/transformer/group_0/inner_group_0/attention_1/self/query/bias": (768,),
    "bert/encoder/transformer/group_0/inner_group_0/LayerNorm/gamma": (768,),
    "bert/encoder/transformer/group_0/inner_group_0/LayerNorm/beta": (768,),
    "bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/kernel": (768, 3072),
    "bert/encoder/transformer/group_0/inner_group_0/ffn_1/intermediate/dense/bias": (3072,),
    "bert/pooler/dense/kernel": (768, 768),
    "cls/predictions/output_bias": (30000,),
    "output_weights": (2, 768),
    "output_bias": (2,),
}
BATCH = 4


def initial_values() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    values = {}
    for name, shape in SHAPES.items():
        if name.endswith(("bias", "beta")):
            values[name] = np.zeros(shape, F32)  # as the original initialises them: the trust ratio's w = 0 case
        elif name.endswith("gamma"):
            values[name] = np.ones(shape, F32)
        else:
            values[name] = (rng.standard_normal(shape) * 0.02).astype(F32)  # initializer_range 0.02
    return values


def loss_terms() -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """loss = sum_v 0.5 * a_v * sum(w_v^2) + s * sum(b_v * w_v), s the batch mean of the feature x:
    the gradient a_v * w_v + s * b_v is known exactly and its global norm goes from below to above 1."""
    rng = np.random.default_rng(1)
    a = {name: 1e-3 * (0.5 + i / len(SHAPES)) for i, name in enumerate(SHAPES)}
    b = {name: (rng.standard_normal(shape) * 4e-4).astype(F32) for name, shape in SHAPES.items()}
    return a, b


# One x per example: consecutive batches of 4 with means 2.5, 0.25, 4.0, 0.5, ...; within a batch the
# two halves (the micro-batches of gradient_accumulation_steps=2) differ.
X = np.array([0.0, 1.0, 4.0, 5.0,  0.5, 0.0, 0.5, 0.0,  8.0, 0.0, 0.0, 8.0,  1.0, 1.0, 0.0, 0.0], F32)


class Weights(keras.Model):
    """The variables alone, each named as in the original's checkpoints."""

    def __init__(self, values):
        super().__init__()
        self.weights_by_name = {n: tf.Variable(v, name=n) for n, v in values.items()}


def make_trainer(tmp_path, optimizer_fn, **config) -> Trainer:
    a, b = loss_terms()
    b_constants = {n: tf.constant(v) for n, v in b.items()}

    def loss_fn(model, features, training):
        # Computed from the float32 variables outside any layer: no policy casts them, so any
        # change of the update under mixed precision comes from the loop or the optimizer.
        s = tf.reduce_mean(features["x"])
        return tf.add_n([0.5 * a[n] * tf.reduce_sum(tf.square(v)) + s * tf.reduce_sum(b_constants[n] * v)
                         for n, v in model.weights_by_name.items()])

    task = Task(build_model=lambda: Weights(initial_values()), loss_fn=loss_fn,
                train_dataset_fn=lambda ctx: tf.data.Dataset.from_tensor_slices({"x": X}).batch(BATCH).repeat())
    return Trainer(task, tf.distribute.OneDeviceStrategy("/cpu:0"), optimizer_fn,
                   TrainConfig(output_dir=str(tmp_path), train_batch_size=BATCH, handle_signals=False,
                               save_checkpoints_steps=1000, **config))


def original_learning_rate(step, init_lr, num_train_steps, num_warmup_steps, poly_power, start_warmup_step):
    """create_optimizer's rate at global_step ``step``: polynomial_decay to 0.0, then the warmup blend."""
    p = F32(min(step, num_train_steps)) / F32(num_train_steps)
    lr = F32(init_lr) * F32((F32(1.0) - p) ** F32(poly_power))
    if num_warmup_steps:
        done = np.int32(step) - np.int32(start_warmup_step)
        warmup_lr = F32(init_lr) * (F32(done) / F32(num_warmup_steps))
        is_warmup = F32(done < num_warmup_steps)
        lr = (F32(1.0) - is_warmup) * lr + is_warmup * warmup_lr
    return F32(lr)


def original_training(num_steps, init_lr, num_train_steps, num_warmup_steps, optimizer,
                      poly_power=1.0, start_warmup_step=0):
    """The original's train_op run ``num_steps`` times: (weights, adam_m, adam_v, global_step, rates,
    gradient norms before clipping)."""
    a, b = loss_terms()
    w = initial_values()
    m = {n: np.zeros_like(v) for n, v in w.items()}
    v_ = {n: np.zeros_like(v) for n, v in w.items()}
    global_step, rates, norms = 0, [], []
    for step in range(num_steps):
        s = F32(X[(step * BATCH) % len(X):][:BATCH].mean())
        grads = {n: F32(a[n]) * w[n] + s * b[n] for n in w}
        global_norm = F32(np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values())))
        norms.append(global_norm)
        # tf.clip_by_global_norm: g * clip_norm / max(global_norm, clip_norm)
        grads = {n: g * (F32(1.0) / max(global_norm, F32(1.0))) for n, g in grads.items()}
        lr = original_learning_rate(global_step, init_lr, num_train_steps, num_warmup_steps, poly_power,
                                    start_warmup_step)
        rates.append(lr)
        for n, g in grads.items():
            m[n] = F32(0.9) * m[n] + F32(1.0 - 0.9) * g
            v_[n] = F32(0.999) * v_[n] + F32(1.0 - 0.999) * (g * g)
            update = m[n] / (np.sqrt(v_[n]) + F32(1e-6))
            excluded = any(re.search(p, n) for p in EXCLUDE)
            if not excluded:  # weight_decay_rate 0.01
                update = update + F32(0.01) * w[n]
            ratio = F32(1.0)
            if optimizer == "lamb" and not excluded:  # exclude_from_layer_adaptation = the same list
                w_norm, u_norm = np.linalg.norm(w[n]), np.linalg.norm(update)
                ratio = F32(w_norm / u_norm) if w_norm > 0 and u_norm > 0 else F32(1.0)
            w[n] = w[n] - ratio * lr * update
        global_step += 1  # create_optimizer's explicit increment
    return w, m, v_, global_step, rates, norms


def assert_same_training(trainer, initial, reference):
    w_ref, m_ref, v_ref, step_ref, _, _ = reference
    assert int(trainer.global_step.numpy()) == step_ref
    optimizer = trainer.optimizer
    if isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer):
        optimizer = optimizer.inner_optimizer
    assert int(optimizer.iterations.numpy()) == step_ref  # the step the schedule is read at
    for name, variable in trainer.model.weights_by_name.items():
        got = variable.numpy()
        assert variable.dtype == tf.float32
        # The change, so that updates far below the weights' size are compared too; it carries
        # the rounding of the weights themselves (a few float32 steps of their size).
        atol = 8 * np.spacing(np.max(np.abs(initial[name])))
        np.testing.assert_allclose(got - initial[name], w_ref[name] - initial[name], rtol=2e-4,
                                   atol=atol, err_msg=name)
        index = optimizer._index_dict[optimizer._var_key(variable)]
        for slot, want in ((optimizer._adam_m[index], m_ref[name]), (optimizer._adam_v[index], v_ref[name])):
            assert slot.dtype == tf.float32, slot.name
            np.testing.assert_allclose(slot.numpy(), want, rtol=2e-4, atol=1e-12, err_msg=slot.name)


# (optimizer, learning_rate, num_train_steps, num_warmup_steps, poly_power, start_warmup_step, steps run)
RECIPES = {
    # run_pretraining's defaults but short: LAMB at 0.00176, warmup 2 of 8 steps, run to the end.
    "pretraining": ("lamb", 0.00176, 8, 2, 1.0, 0, 8),
    # the fine-tuning drivers' AdamW: SQuAD's 3e-5 with warmup_proportion 0.1 (int(10 * 0.1) = 1 step).
    "squad": ("adamw", 3e-5, 10, 1, 1.0, 0, 10),
    # RACE's 1e-5, no warmup (run_classifier's --warmup_step default 0).
    "race_no_warmup": ("adamw", 1e-5, 6, 0, 1.0, 0, 6),
    # --start_warmup_step and --poly_power: a warmup restarted at step 2 (rates below 0 before it, as the original).
    "restarted_warmup": ("lamb", 0.00176, 10, 3, 2.0, 2, 7),
}


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_trainer_updates_as_the_original(tmp_path, recipe):
    optimizer, lr, total, warmup, power, start, steps = RECIPES[recipe]
    trainer = make_trainer(tmp_path, lambda: create_optimizer(lr, total, warmup, optimizer, power, start),
                           num_train_steps=steps)
    trainer.train()
    reference = original_training(steps, lr, total, warmup, optimizer, power, start)
    assert_same_training(trainer, initial_values(), reference)
    # The run really has clipped and unclipped steps, and reaches the schedule's ends.
    rates, norms = reference[4], reference[5]
    assert min(norms) < 1.0 < max(norms)
    if warmup and not start:
        assert rates[0] == 0.0
    assert rates[-1] > 0.0 and original_learning_rate(total, lr, total, warmup, power, start) == 0.0


def test_first_warmup_step_changes_no_weight(tmp_path):
    """Step 0 of a warmup run has lr exactly 0: weights untouched (slots filled), as the original."""
    trainer = make_trainer(tmp_path, lambda: create_optimizer(0.00176, 8, 2, "lamb"), num_train_steps=1)
    trainer.train()
    initial = initial_values()
    for name, variable in trainer.model.weights_by_name.items():
        np.testing.assert_array_equal(variable.numpy(), initial[name], err_msg=name)
    assert int(trainer.global_step.numpy()) == 1


@pytest.fixture
def precision():
    yield lambda name: keras.mixed_precision.set_global_policy(name)
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_mixed_precision_changes_no_update(tmp_path, precision, policy):
    """bf16 (no loss scale) and fp16 (dynamic loss scale): the same float32 update and float32 slots."""
    precision(policy)
    trainer = make_trainer(tmp_path, lambda: create_optimizer(0.00176, 8, 2, "lamb"), num_train_steps=5)
    trainer.train()
    assert isinstance(trainer.optimizer, keras.mixed_precision.LossScaleOptimizer) == (policy == "mixed_float16")
    assert_same_training(trainer, initial_values(), original_training(5, 0.00176, 8, 2, "lamb"))


def test_gradient_accumulation_clips_the_whole_batch_gradient(tmp_path):
    """Two micro-batches per step: their mean gradient is clipped, not each one's (the original has
    one batch per update).  At these sizes the step used to fail with AlreadyExistsError (a Grappler
    TemporaryVariable in the accumulation loop, see ``step.TrainStep._replica_gradients``)."""
    trainer = make_trainer(tmp_path, lambda: create_optimizer(3e-5, 6, 1, "adamw"), num_train_steps=6,
                           gradient_accumulation_steps=2)
    trainer.train()
    assert_same_training(trainer, initial_values(), original_training(6, 3e-5, 6, 1, "adamw"))


def test_every_model_kind_decays_and_adapts_as_the_original_names_say():
    """Exclusions match our variables' names; each must decide as the original's name for it
    (``weights.kinds.tf1_name_map``), for every model the drivers train."""
    import albert_tf.glue.heads  # noqa: F401  (registers the task kinds)
    import albert_tf.race.model  # noqa: F401
    import albert_tf.squad.heads  # noqa: F401
    from albert_tf.config import AlbertConfig
    from albert_tf.weights import kinds

    config = AlbertConfig(vocab_size=30, embedding_size=8, hidden_size=16, num_hidden_layers=2,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=32)
    checked = set()
    for kind in kinds.kinds():
        model = kind.build(config)
        tf1_names = {id(v): n for n, v in kinds.tf1_name_map(model).items()}
        optimizer = create_optimizer(1e-3, 10, 1, "lamb")
        optimizer.build(model.trainable_variables)
        for variable, decay, adapt in zip(model.trainable_variables, optimizer._use_decay,
                                          optimizer._use_adaptation):
            original = tf1_names[id(variable)]
            want = not any(re.search(p, original) for p in EXCLUDE)
            assert (decay, adapt) == (want, want), (kind.name, variable.name, original)
            checked.add(want)
    assert checked == {True, False}
    assert {"pretrainer", "classifier", "race", "squad", "squad_v2"} <= {k.name for k in kinds.kinds()}
