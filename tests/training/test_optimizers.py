"""AdamW and LAMB against a NumPy implementation of the original's update formulas."""
import re

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import optimizers
from albert_tf.training.schedule import AlbertLearningRateSchedule

EXCLUDE = ["LayerNorm", "layer_norm", "bias"]


class NumpyAlbertOptimizer:
    """optimization.AdamWeightDecayOptimizer / lamb_optimizer.LAMBOptimizer in NumPy (float32)."""

    def __init__(self, lamb, lr_fn, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6):
        self.lamb, self.lr_fn, self.wd = lamb, lr_fn, np.float32(weight_decay_rate)
        self.b1, self.b2, self.eps = np.float32(beta_1), np.float32(beta_2), np.float32(epsilon)
        # The original computes 1 - beta in Python (double) before TF casts it to float32.
        self.one_minus_b1, self.one_minus_b2 = np.float32(1.0 - beta_1), np.float32(1.0 - beta_2)
        self.m, self.v, self.step = {}, {}, 0

    def apply(self, grads, weights):
        lr = np.float32(self.lr_fn(self.step))
        for name, g in grads.items():
            w = weights[name]
            m = self.m.get(name, np.zeros_like(w))
            v = self.v.get(name, np.zeros_like(w))
            m = self.b1 * m + self.one_minus_b1 * g
            v = self.b2 * v + self.one_minus_b2 * (g * g)
            u = m / (np.sqrt(v) + self.eps)
            excluded = any(re.search(p, name) for p in EXCLUDE)
            if self.wd and not excluded:
                u = u + self.wd * w
            ratio = np.float32(1.0)
            if self.lamb and not excluded:
                w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(u)
                ratio = np.float32(w_norm / u_norm) if w_norm > 0 and u_norm > 0 else np.float32(1.0)
            weights[name] = w - ratio * lr * u
            self.m[name], self.v[name] = m, v
        self.step += 1


def make_variables(rng):
    shapes = {
        "encoder/dense/kernel": (4, 3),
        "encoder/dense/bias": (3,),
        "encoder/LayerNorm/gamma": (3,),
        "head/layer_norm/beta": (3,),
        "embeddings/word_embeddings": (5, 2),
        "zero_init/kernel": (2, 2),  # ||w|| = 0 at the start: trust ratio 1
        "cls/predictions/output_bias": (5,),
    }
    values = {n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
    values["zero_init/kernel"][:] = 0.0
    return values


@pytest.mark.parametrize("name", ["adamw", "lamb"])
@pytest.mark.parametrize("use_schedule", [False, True])
def test_matches_numpy_reference_over_several_steps(name, use_schedule):
    rng = np.random.default_rng(0)
    initial = make_variables(rng)
    if use_schedule:
        schedule = AlbertLearningRateSchedule(0.05, num_train_steps=10, num_warmup_steps=3)
        opt = optimizers.create_optimizer(0.05, 10, 3, optimizer=name)
        lr_fn = lambda step: float(schedule(step))  # noqa: E731
    else:
        cls = optimizers.LAMB if name == "lamb" else optimizers.AdamWeightDecay
        opt = cls(learning_rate=0.01, weight_decay_rate=0.01, exclude_from_weight_decay=EXCLUDE)
        lr_fn = lambda step: 0.01  # noqa: E731
    tf_vars = [tf.Variable(v, name=n) for n, v in initial.items()]
    reference = NumpyAlbertOptimizer(name == "lamb", lr_fn)
    ref_weights = dict(initial)
    for _ in range(6):
        grads = {n: rng.standard_normal(v.shape).astype(np.float32) for n, v in initial.items()}
        opt.apply_gradients([(tf.constant(grads[v.name[:-2]]), v) for v in tf_vars])
        reference.apply(grads, ref_weights)
        for v in tf_vars:
            np.testing.assert_allclose(v.numpy(), ref_weights[v.name[:-2]], rtol=0, atol=1e-6, err_msg=v.name)
    assert int(opt.iterations) == 6


def test_exclusions_by_name():
    opt = optimizers.create_optimizer(1e-3, 100, 0, optimizer="lamb")
    names = ["bert/encoder/dense/kernel", "bert/encoder/dense/bias", "bert/embeddings/LayerNorm/gamma",
             "x/layer_norm/beta", "cls/predictions/output_bias", "cls/seq_relationship/output_weights"]
    tf_vars = [tf.Variable(tf.ones([2]), name=n) for n in names]
    opt.build(tf_vars)
    decayed = {n: d for n, d in zip(names, opt._use_decay)}
    adapted = {n: a for n, a in zip(names, opt._use_adaptation)}
    expected = {"bert/encoder/dense/kernel": True, "cls/seq_relationship/output_weights": True}
    for n in names:
        assert decayed[n] == expected.get(n, False), n
        assert adapted[n] == expected.get(n, False), n


def test_lamb_zero_norms_give_ratio_one_and_no_nan():
    # w = 0: ratio 1 (a plain AdamW step); update = 0 (zero gradient, no decay): no NaN from 0/0.
    w_zero = tf.Variable(tf.zeros([3]), name="a/kernel")
    w_still = tf.Variable([1.0, -2.0], name="b/kernel")
    opt = optimizers.LAMB(learning_rate=0.1, weight_decay_rate=0.0)
    opt.apply_gradients([(tf.constant([1.0, -1.0, 0.5]), w_zero), (tf.zeros([2]), w_still)])
    u = 0.1 * np.array([1.0, -1.0, 0.5]) / (np.sqrt(0.001 * np.array([1.0, 1.0, 0.25])) + 1e-6)
    np.testing.assert_allclose(w_zero.numpy(), -0.1 * u, rtol=1e-6)
    np.testing.assert_array_equal(w_still.numpy(), [1.0, -2.0])


def test_no_bias_correction():
    # With bias correction the first Adam step would be lr * sign(g); without it, lr * 0.1/sqrt(0.001).
    w = tf.Variable([0.0], name="w/bias")
    optimizers.AdamWeightDecay(learning_rate=1.0).apply_gradients([(tf.constant([2.0]), w)])
    expected = -(0.1 * 2.0) / (np.sqrt(0.001 * 4.0) + 1e-6)
    assert w.numpy()[0] == pytest.approx(expected, rel=1e-6)


def test_slots_round_trip_through_checkpoint(tmp_path):
    def run(opt, var, grads):
        for g in grads:
            opt.apply_gradients([(tf.constant(g), var)])

    grads = [np.full([2], v, np.float32) for v in (0.5, -1.0, 2.0, 0.1)]
    var = tf.Variable([1.0, 2.0], name="d/kernel")
    opt = optimizers.create_optimizer(0.1, 10, 2, optimizer="lamb")
    run(opt, var, grads[:2])
    path = tf.train.Checkpoint(optimizer=opt, var=var).write(str(tmp_path / "ckpt"))
    run(opt, var, grads[2:])

    var2 = tf.Variable([0.0, 0.0], name="d/kernel")
    opt2 = optimizers.create_optimizer(0.1, 10, 2, optimizer="lamb")
    opt2.build([var2])
    tf.train.Checkpoint(optimizer=opt2, var=var2).read(path).assert_consumed()
    assert int(opt2.iterations) == 2
    run(opt2, var2, grads[2:])
    np.testing.assert_array_equal(var2.numpy(), var.numpy())


def test_unknown_optimizer_name():
    with pytest.raises(ValueError, match="adamw, lamb"):
        optimizers.create_optimizer(1e-3, 10, 0, optimizer="sgd")


@pytest.mark.parametrize("name", ["adamw", "lamb"])
def test_update_waits_for_its_gradient(name):
    """No op of a variable's update runs before its gradient exists: b1*m, b2*v and the
    decay term need no gradient, and would otherwise be computed at the start of a
    training step and held through its forward and backward pass (three copies of the
    model's weights)."""
    weight = tf.Variable(np.ones([4, 3], np.float32), name="layer/kernel")
    optimizer = optimizers.create_optimizer(1e-3, 10, 2, name)
    optimizer.build([weight])

    @tf.function
    def apply(gradient):
        optimizer.apply_gradients([(gradient, weight)])

    graph = apply.get_concrete_function(tf.TensorSpec([4, 3], tf.float32)).graph
    gradient_op = graph.inputs[0].op

    def depends_on_gradient(op, seen=None):
        seen = set() if seen is None else seen
        if op is gradient_op:
            return True
        if op.name in seen:
            return False
        seen.add(op.name)
        return any(depends_on_gradient(i.op, seen) for i in op.inputs) or any(
            depends_on_gradient(c, seen) for c in op.control_inputs)

    # The reads of the weight and of its two slots that the update computes with.
    reads = [op for op in graph.get_operations() if op.type == "ReadVariableOp"
             and op.inputs[0].dtype == tf.resource and op.inputs[0].op.type == "Placeholder"]
    update_reads = [op for op in reads if op.outputs[0].shape == tf.TensorShape([4, 3])]
    assert len(update_reads) >= 3, [op.name for op in reads]
    assert all(depends_on_gradient(op) for op in update_reads), [
        op.name for op in update_reads if not depends_on_gradient(op)]


def test_learning_rate_at_reads_every_optimizer_kind():
    """The loop's reported rate: the schedule at the update (also through a LossScaleOptimizer),
    else the optimizer's own constant rate; compared to the original's warmup/decay formula."""
    from albert_tf.keras import keras

    init_lr, steps, warmup = 0.1, 10, 2

    def original(step):  # linear warmup, then linear decay to 0 (poly_power 1)
        decayed = init_lr * (1 - min(step, steps) / steps)
        return init_lr * step / warmup if step < warmup else decayed

    lamb = optimizers.create_optimizer(init_lr, steps, warmup, optimizer="lamb")
    wrapped = keras.mixed_precision.LossScaleOptimizer(optimizers.create_optimizer(init_lr, steps, warmup))
    for step in (0, 1, 2, 7):
        assert optimizers.learning_rate_at(lamb, step) == pytest.approx(original(step), rel=1e-6)
        assert optimizers.learning_rate_at(wrapped, step) == pytest.approx(original(step), rel=1e-6)
    constant = optimizers.AdamWeightDecay(learning_rate=0.25)
    assert constant.learning_rate_schedule is None
    assert optimizers.learning_rate_at(constant, 5) == 0.25
    assert optimizers.learning_rate_at(keras.optimizers.SGD(0.5), 3) == 0.5
