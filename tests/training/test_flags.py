"""The shared flags: defined once (a driver's own definition wins), per-driver defaults, and
the loop's settings read from them."""
import pytest
from absl import flags

from albert_tf.training import flags as shared_flags
from albert_tf.training.loop import TrainConfig


def test_shared_flags_skip_those_a_driver_defined():
    values = flags.FlagValues()
    flags.DEFINE_bool("use_tpu", True, "The driver's own definition.", flag_values=values)
    shared_flags.define_flags(values)
    shared_flags.define_flags(values)  # twice is harmless
    values(["prog", "--distribution_strategy=mirrored", "--mixed_precision=bf16"])
    assert values.use_tpu is True and values.distribution_strategy == "mirrored"
    assert values.gradient_accumulation_steps == 1 and values.seed == 12345 and values.num_tpu_cores == 8
    for name in ("num_gpus", "enable_xla", "log_steps", "tpu_name", "tpu_zone", "gcp_project", "master"):
        assert name in values
    # The loop's flags, with the original drivers' defaults.
    assert (values.iterations_per_loop, values.save_checkpoints_steps, values.keep_checkpoint_max) == (1000, 1000, 5)


def test_a_driver_changes_a_default_and_misspellings_are_refused():
    values = flags.FlagValues()
    shared_flags.define_flags(values, save_checkpoints_steps=5000)
    values(["prog"])
    assert values.save_checkpoints_steps == 5000
    with pytest.raises(ValueError, match="no shared flag save_checkpoint_steps"):
        shared_flags.define_flags(flags.FlagValues(), save_checkpoint_steps=5)


def test_train_config_from_flags_reads_every_loop_setting():
    values = flags.FlagValues()
    flags.DEFINE_string("output_dir", None, "", flag_values=values)
    flags.DEFINE_integer("train_batch_size", 32, "", flag_values=values)
    shared_flags.define_flags(values)
    values(["prog", "--output_dir=out", "--iterations_per_loop=7", "--save_checkpoints_steps=3",
            "--keep_checkpoint_max=2", "--log_steps=4", "--gradient_accumulation_steps=2", "--enable_xla",
            "--seed=9"])
    config = shared_flags.train_config_from_flags(values, num_train_steps=40)
    assert config == TrainConfig(output_dir="out", num_train_steps=40, train_batch_size=32, steps_per_loop=7,
                                 save_checkpoints_steps=3, keep_checkpoint_max=2, log_steps=4,
                                 gradient_accumulation_steps=2, enable_xla=True, seed=9)
    assert shared_flags.train_config_from_flags(values, num_train_steps=1, output_dir="/abs").output_dir == "/abs"
    with pytest.raises(ValueError, match="no flag or override for num_train_steps"):
        shared_flags.train_config_from_flags(values)
    # A driver's --learning_rate is named in lines about the learning rate (the NaN stop); without it, none is.
    assert config.learning_rate_flag is None
    flags.DEFINE_float("learning_rate", 5e-5, "", flag_values=values)
    values(["prog"])
    assert shared_flags.train_config_from_flags(values, num_train_steps=1).learning_rate_flag == "--learning_rate"
