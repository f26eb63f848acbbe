"""The training loop in this process, on one device: accumulation, NaN stop, checkpoints,
summaries, eval, precision, XLA, init_fn, signals and input errors."""
import logging as std_logging
import os
import signal

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.keras import keras
from albert_tf.training import NonFiniteLossError, StatelessDropout, TrainConfig, Trainer, loop
from albert_tf.training.schedule import AlbertLearningRateSchedule
from albert_tf.training.signals import StopSignals


def test_gradient_accumulation_is_the_same_update_as_the_whole_batch(train_toy, tmp_path, reference_plain,
                                                                      toy, same_weights):
    trainer, result, _ = train_toy(tmp_path, dropout=0.0, num_train_steps=6, gradient_accumulation_steps=2)
    assert result.global_step == 6
    same_weights(toy.weights_by_name(trainer.model), reference_plain["weights"], atol=1e-5)


def test_checkpoints_state_file_and_keep_max(reference_dropout):
    out = reference_dropout["dir"]
    state = (out / "checkpoint").read_text()
    assert state == ('model_checkpoint_path: "model.ckpt-12"\n'
                     'all_model_checkpoint_paths: "model.ckpt-8"\n'
                     'all_model_checkpoint_paths: "model.ckpt-12"\n')
    assert tf.train.latest_checkpoint(str(out)) == str(out / "model.ckpt-12")
    names = sorted(p.name for p in out.iterdir() if p.name.startswith("model.ckpt"))
    assert not [n for n in names if n.startswith("model.ckpt-4.")], names  # keep_checkpoint_max=2
    assert "model.ckpt-8.input-0.index" in names and "model.ckpt-12.index" in names
    keys = {name for name, _ in tf.train.list_variables(str(out / "model.ckpt-12"))}
    assert "global_step/.ATTRIBUTES/VARIABLE_VALUE" in keys
    model_vars = [k for k in keys if k.startswith("model/")]
    slots = [k for k in keys if k.startswith("optimizer/_variables/")]  # adam_m, adam_v of each
    assert len(model_vars) == 7 and len(slots) == 2 * len(model_vars)
    assert "optimizer/_iterations/.ATTRIBUTES/VARIABLE_VALUE" in keys
    reader = tf.train.load_checkpoint(str(out / "model.ckpt-12"))
    assert reader.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 12


def test_rerun_after_the_last_step_trains_nothing(reference_dropout, toy, toy_data, same_weights):
    out = reference_dropout["dir"]
    before = sorted(os.listdir(out))
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(out),
                               keep_checkpoint_max=2)
    result = trainer.train()
    assert result.global_step == 12 and result.checkpoint_path == str(out / "model.ckpt-12")
    assert sorted(os.listdir(out)) == before
    same_weights(toy.weights_by_name(trainer.model), reference_dropout["weights"], atol=0)


def test_summaries_and_console_line(reference_plain, scalars, caplog, train_toy, tmp_path):
    out = reference_plain["dir"]
    assert sorted(reference_plain["losses"]) == [1, 2, 3, 4, 5, 6]
    schedule = AlbertLearningRateSchedule(0.05, 6, 2)
    learning_rates = scalars(out, "learning_rate")
    for step in range(1, 7):
        assert learning_rates[step] == pytest.approx(float(schedule(step - 1)))
    for tag in ("gradient_norm", "examples_per_second", "accuracy", "weighted_accuracy", "mean_logit"):
        assert sorted(scalars(out, tag)) == [1, 2, 3, 4, 5, 6], tag
    assert all(0 <= v <= 1 for v in scalars(out, "accuracy").values())
    eval_losses = scalars(out / "eval", "loss")
    assert list(eval_losses) == [6] and eval_losses[6] == pytest.approx(reference_plain["eval"]["loss"])

    caplog.set_level(std_logging.INFO)
    # absl's logger keeps its own level (WARNING once any test has parsed absl flags).
    caplog.set_level(std_logging.INFO, logger="absl")
    train_toy(tmp_path, dropout=0.0, num_train_steps=4, log_steps=2)
    lines = [r.getMessage() for r in caplog.records if "/4: loss = " in r.getMessage()]
    assert [line.split(":")[0] for line in lines] == ["step 2/4", "step 4/4"]
    assert all("lr = " in line and "examples/s = " in line and "ETA " in line and "accuracy = " in line
               for line in lines)


def test_nan_loss_stops_with_the_step_and_keeps_the_last_good_checkpoint(toy, toy_data, tmp_path):
    hooks = {"nan_at_step": 5}  # the 6th update's loss is NaN
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(tmp_path),
                               hooks=hooks, save_checkpoints_steps=2, dropout=0.0)
    with pytest.raises(NonFiniteLossError, match=r"NaN/Inf at step 6\b.*last good one is .*model\.ckpt-4"):
        trainer.train()
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-4")
    assert not list(tmp_path.glob("model.ckpt-6*"))
    reader = tf.train.load_checkpoint(str(tmp_path / "model.ckpt-4"))
    for name, _ in tf.train.list_variables(str(tmp_path / "model.ckpt-4")):
        value = reader.get_tensor(name)
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            assert np.isfinite(value).all(), name
    # And the loop refuses to write weights that are not finite.
    with pytest.raises(NonFiniteLossError, match="not writing a checkpoint"):
        trainer.save_checkpoint()


def test_nan_loss_before_the_first_checkpoint_says_there_is_none(toy, toy_data, tmp_path):
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(tmp_path),
                               hooks={"nan_at_step": 1}, save_checkpoints_steps=4, dropout=0.0)
    with pytest.raises(NonFiniteLossError) as err:
        trainer.train()
    message = str(err.value)
    assert "NaN/Inf at step 2;" in message and "None" not in message and "\n" not in message
    # (the toy starts from no given weights: no flag of them to check; it runs the Python API, without flags, so
    # no flag of the learning rate either: that is named only when a driver's flags made the TrainConfig)
    assert message.endswith("there is no checkpoint yet, so a rerun starts again from step 0: lower the learning "
                            "rate, check the input data."), message
    assert not list(tmp_path.glob("model.ckpt*"))


def test_evaluate_counts_every_example_and_respects_max_steps(reference_plain, toy, toy_data, tmp_path):
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"],
                               str(reference_plain["dir"]), eval_file=toy_data["eval"], dropout=0.0,
                               num_train_steps=6, log_steps=1)
    path = str(reference_plain["dir"] / "model.ckpt-6")
    results = trainer.evaluate(checkpoint_path=path)
    assert results["global_step"] == 6

    # The same numbers by hand over all 23 examples (batches of 5: the last one has 3).
    examples = list(tf.data.TFRecordDataset(toy_data["eval"]).map(toy.parse_example).batch(23))[0]
    logits = trainer.model(examples["input_ids"], training=False).numpy()
    labels, weights = examples["label"].numpy(), examples["weight"].numpy()
    correct = (logits.argmax(-1) == labels).astype(np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    assert results["accuracy"] == pytest.approx(correct.mean(), abs=1e-7)
    assert results["weighted_accuracy"] == pytest.approx((weights * correct).sum() / weights.sum(), abs=1e-7)
    assert results["loss"] == pytest.approx(-log_probs[np.arange(23), labels].mean(), abs=1e-5)
    assert results["mean_logit"] == pytest.approx(logits.mean(), abs=1e-5)

    two_steps = trainer.evaluate(max_eval_steps=2, checkpoint_path=path)
    assert two_steps["accuracy"] == pytest.approx(correct[:10].mean(), abs=1e-7)


@pytest.fixture
def precision():
    yield lambda name: keras.mixed_precision.set_global_policy(name)
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_trains_and_fp16_scales_the_loss(train_toy, tmp_path, precision, policy):
    precision(policy)
    trainer, result, _ = train_toy(tmp_path, num_train_steps=4, save_checkpoints_steps=4)
    assert result.global_step == 4 and np.isfinite(result.logs["loss"])
    assert trainer.model.layers[0].compute_dtype == policy.split("_")[1]
    scaled = isinstance(trainer.optimizer, keras.mixed_precision.LossScaleOptimizer)
    assert scaled == (policy == "mixed_float16")
    keys = {name for name, _ in tf.train.list_variables(str(tmp_path / "model.ckpt-4"))}
    assert any("current_loss_scale" in k for k in keys) == scaled


def test_xla_gives_the_same_weights(train_toy, tmp_path, reference_plain, toy, same_weights):
    trainer, _, _ = train_toy(tmp_path, dropout=0.0, num_train_steps=6, enable_xla=True)
    same_weights(toy.weights_by_name(trainer.model), reference_plain["weights"], atol=1e-4)


def test_the_first_loop_is_one_step_then_the_freed_memory_goes_back(train_toy, tmp_path, reference_plain, toy,
                                                                   same_weights, monkeypatch):
    """A fresh train function's first call runs one step; the allocator's free pages are returned
    (`host_memory`) while it runs and after it, never in a later loop, and the loops after it run to
    their boundaries as before.  Loop sizes change no numbers: the same weights as the reference run,
    which logs (so loops) every step."""
    loops, released_after = [], []
    run = loop.run_interruptibly

    def recording_run(fn, iterator, num_steps, **kwargs):
        loops.append(int(num_steps))
        return run(fn, iterator, num_steps, **kwargs)

    monkeypatch.setattr(loop, "run_interruptibly", recording_run)
    monkeypatch.setattr(loop, "release_freed_memory", lambda: released_after.append(len(loops)) or True)
    trainer, result, _ = train_toy(tmp_path, dropout=0.0, num_train_steps=6)  # saves at 4: loops 1, 3, 2
    assert result.global_step == 6
    assert loops == [1, 3, 2] and released_after and set(released_after) == {1}
    same_weights(toy.weights_by_name(trainer.model), reference_plain["weights"], atol=0)
    releases = len(released_after)
    trainer.config.num_train_steps = 8  # the same train function again: no one-step loop, no release
    trainer.train()
    assert loops == [1, 3, 2, 2] and len(released_after) == releases


def test_init_fn_runs_only_on_a_fresh_start(toy, toy_data, tmp_path):
    calls = []

    def make():
        trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(tmp_path),
                                   num_train_steps=2, save_checkpoints_steps=2)
        trainer.task.init_fn = lambda model: calls.append(model)
        return trainer

    first = make()
    assert first.train().global_step == 2 and calls == [first.model]
    assert make().train().global_step == 2 and len(calls) == 1


def test_run_interruptibly_calls_while_waiting_only_while_the_function_runs():
    import time

    from albert_tf.training.signals import run_interruptibly

    calls, finished = [], []

    def slow():
        time.sleep(0.7)
        finished.append(time.monotonic())
        return "done"

    with StopSignals(False) as signals:
        out = run_interruptibly(slow, signals=signals, stop_flag=tf.Variable(0.0),
                                while_waiting=lambda: calls.append(time.monotonic()))
    assert out == "done" and finished and 2 <= len(calls) <= 4, calls  # at about 0.2, 0.4, 0.6 s


def test_stop_signals_turn_into_a_request_and_a_second_sigint_aborts():
    before = signal.getsignal(signal.SIGINT)
    with StopSignals(True) as signals:
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.received == "SIGINT"
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is before


def test_input_errors_are_clear(toy, toy_data, tmp_path):
    def trainer(**options):
        return toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(tmp_path),
                                **options)

    with pytest.raises(ValueError, match="not divisible by gradient_accumulation_steps 3"):
        trainer(gradient_accumulation_steps=3).train()
    wrong_batch = trainer()
    wrong_batch.config.train_batch_size = 4  # the dataset still yields batches of 8
    with pytest.raises(ValueError, match="batches of 8, expected 4"):
        wrong_batch.train()
    finite = trainer(num_train_steps=20)
    finite.task.train_dataset_fn = lambda ctx: tf.data.TFRecordDataset(toy_data["train"]).map(
        toy.parse_example).batch(8, drop_remainder=True)
    with pytest.raises(ValueError, match="ended at step 12: train_dataset_fn must return a repeating dataset"):
        finite.train()
    with pytest.raises(ValueError, match="save_checkpoints_steps must be >= 1"):
        TrainConfig(output_dir=str(tmp_path), num_train_steps=1, train_batch_size=1,
                    save_checkpoints_steps=0).validate()
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    with strategy.scope(), pytest.raises(ValueError, match="outside strategy.scope"):
        Trainer(toy.make_task(toy_data["train"], 8), strategy, lambda: None,
                TrainConfig(output_dir=str(tmp_path), num_train_steps=1, train_batch_size=8))


def test_stateless_dropout_is_a_function_of_the_seed_scope():
    layer = StatelessDropout(0.5)
    x = tf.ones([4, 16])
    with loop.dropout_seed_scope(tf.constant([1, 2])):
        a1, a2 = layer(x, training=True), layer(x, training=True)
    with loop.dropout_seed_scope(tf.constant([1, 2])):
        b1 = layer(x, training=True)
    with loop.dropout_seed_scope(tf.constant([1, 3])):
        c1 = layer(x, training=True)
    np.testing.assert_array_equal(a1, b1)  # same scope seed, same call: same mask
    assert not np.array_equal(a1, a2)  # second call in a scope: another mask
    assert not np.array_equal(a1, c1)  # another step: another mask
    assert set(np.unique(a1.numpy())) <= {0.0, 2.0}
    np.testing.assert_array_equal(layer(x, training=False), x)
