"""--enable_xla: its values, and the rule that runs bf16 on CPU without XLA unless forced."""
import pytest
import tensorflow as tf
from absl import flags

from albert_tf.keras import keras
from albert_tf.training import flags as training_flags, xla


@pytest.fixture
def warnings_seen(monkeypatch):
    seen = []
    monkeypatch.setattr(xla, "_warned", False)
    monkeypatch.setattr(xla.logging, "warning", lambda message, *args: seen.append(message % args))
    return seen


@pytest.mark.parametrize("setting, dtype, device, expected", [
    (False, "float32", "CPU", False),
    (False, "bfloat16", "GPU", False),
    (True, "float32", "CPU", True),
    (True, "float16", "CPU", True),
    (True, "bfloat16", "CPU", False),   # the rule
    (True, "bfloat16", "cpu", False),
    (True, "bfloat16", "GPU", True),
    (True, "bfloat16", "TPU", True),
    ("force", "bfloat16", "CPU", True),
    ("true", "bfloat16", "CPU", False),
    ("false", "float32", "GPU", False),
])
def test_use_xla(setting, dtype, device, expected, warnings_seen):
    assert xla.use_xla(setting, dtype, device) is expected
    overruled = bool(xla.parse_xla_setting(setting)) and not expected
    assert len(warnings_seen) == (1 if overruled else 0)


def test_the_warning_is_one_line_once_per_process(warnings_seen):
    for _ in range(3):
        assert xla.use_xla(True, "bfloat16", "CPU") is False
    assert len(warnings_seen) == 1 and "\n" not in warnings_seen[0]
    assert "--enable_xla=force" in warnings_seen[0]


@pytest.mark.parametrize("argv, expected", [
    ([], False),
    (["--enable_xla"], True),
    (["--noenable_xla"], False),
    (["--enable_xla=true"], True),
    (["--enable_xla=false"], False),
    (["--enable_xla=1"], True),
    (["--enable_xla=force"], "force"),
    (["--enable_xla=FORCE"], "force"),
])
def test_flag_keeps_its_boolean_forms_and_takes_force(argv, expected):
    values = flags.FlagValues()
    training_flags.define_flags(values)
    values(["prog", *argv])
    assert values.enable_xla == expected


def test_flag_rejects_other_values():
    values = flags.FlagValues()
    training_flags.define_flags(values)
    with pytest.raises(flags.IllegalFlagValueError, match="expected true, false or force"):
        values(["prog", "--enable_xla=sometimes"])


def test_train_config_rejects_other_values(tmp_path):
    from albert_tf.training import TrainConfig

    with pytest.raises(ValueError, match="expected true, false or force"):
        TrainConfig(str(tmp_path), 1, 8, enable_xla="sometimes").validate()


@pytest.fixture
def policy():
    yield keras.mixed_precision.set_global_policy
    keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("name, setting, compiled", [
    ("mixed_bfloat16", True, False),
    ("mixed_bfloat16", "force", True),
    ("float32", True, True),
])
def test_trainer_applies_the_rule(toy, toy_data, tmp_path, policy, warnings_seen, name, setting, compiled):
    policy(name)
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(tmp_path),
                               num_train_steps=1, enable_xla=setting)
    assert trainer.xla_compiled is compiled
    result = trainer.train()
    assert result.global_step == 1
