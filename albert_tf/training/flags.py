"""The flags every training driver shares, defined once, and what they build.

``define_flags()`` defines the distribution, precision and TPU flags and the loop's
(``--iterations_per_loop``, ``--save_checkpoints_steps``, ``--keep_checkpoint_max``,
``--log_steps``, ``--gradient_accumulation_steps``, ``--enable_xla``, ``--seed``); a driver
passes the defaults that differ from the rest (run_pretraining saves every 5000 steps,
as the original did). ``strategy_from_flags`` and ``train_config_from_flags`` read them:
a driver adds only what its flags say differently (the step count, an absolute
output_dir).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from absl import flags, logging

from albert_tf import cpu_bf16
from albert_tf.training import xla
from albert_tf.training.distribution import (PRECISIONS, STRATEGIES, create_strategy, replica_device_type,
                                             set_mixed_precision)
from albert_tf.training.loop import TrainConfig

_DEFAULTS = {field.name: field.default for field in dataclasses.fields(TrainConfig)}

# (kind, name, default, help, enum values); the loop's defaults come from TrainConfig.
_FLAGS: tuple[tuple[str, str, Any, str, list | None], ...] = (
    ("enum", "distribution_strategy", "one_device", "How to spread training over devices.", list(STRATEGIES)),
    ("integer", "num_gpus", 0, "GPUs for --distribution_strategy=mirrored (0 = all visible; without GPUs, "
     "N > 1 splits the CPU into N logical devices).", None),
    ("enum", "mixed_precision", "none", "Compute precision: none (float32), bf16, or fp16 (with dynamic loss "
     "scaling).", list(PRECISIONS)),
    ("xla", "enable_xla", _DEFAULTS["enable_xla"], "Compile the forward/backward step with XLA: true, false or "
     "force. With bf16 on a CPU, true runs without XLA (its CPU backend is ~4x slower for bf16 there); force "
     "compiles anyway. GPUs and TPUs use XLA whenever asked (albert_tf.training.xla).", None),
    ("integer", "gradient_accumulation_steps", _DEFAULTS["gradient_accumulation_steps"], "Split each batch into "
     "this many micro-batches and apply one update with their mean gradient (the same update as the whole "
     "batch).", None),
    ("integer", "log_steps", _DEFAULTS["log_steps"], "Print a progress line and write summaries every this many "
     "steps.", None),
    ("integer", "seed", _DEFAULTS["seed"], "Seed for initialization, data shuffling and dropout.", None),
    ("integer", "iterations_per_loop", _DEFAULTS["steps_per_loop"], "Training steps per host call (one "
     "tf.function call).", None),
    ("integer", "save_checkpoints_steps", _DEFAULTS["save_checkpoints_steps"], "Save a checkpoint every this "
     "many steps (drivers with --do_eval evaluate each one).", None),
    ("integer", "keep_checkpoint_max", _DEFAULTS["keep_checkpoint_max"], "How many recent checkpoints to keep "
     "(model.ckpt-best is kept apart).", None),
    ("bool", "take_over_run_lock", _DEFAULTS["take_over_run_lock"], "Start even though --output_dir's run "
     "lock names another run (one on another host that is known to be dead; a dead process on this host "
     "is detected and its lock taken over without this flag).", None),
    ("bool", "use_tpu", False, "Whether to use TPU (implies --distribution_strategy=tpu).", None),
    ("string", "tpu_name", None, "The Cloud TPU to use: a name or grpc://ip.address.of.tpu:8470.", None),
    ("string", "tpu_zone", None, "GCE zone of the Cloud TPU (detected when possible).", None),
    ("string", "gcp_project", None, "GCP project of the Cloud TPU (detected when possible).", None),
    ("string", "master", None, "TensorFlow master URL (used as the TPU address if --tpu_name is unset).", None),
    ("integer", "num_tpu_cores", 8, "Kept for compatibility: TPUStrategy finds the cores itself.", None),
)
# TrainConfig field -> the flag it is read from (same name unless listed).
_FIELD_FLAGS = {"steps_per_loop": "iterations_per_loop"}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS, **defaults: Any) -> None:
    """Defines the shared flags (skipping any the driver already defined); ``defaults``
    changes a flag's default for this driver, e.g. ``save_checkpoints_steps=5000``."""
    unknown = set(defaults) - {name for _, name, _, _, _ in _FLAGS}
    if unknown:
        raise ValueError(f"define_flags: no shared flag {', '.join(sorted(unknown))}")
    for kind, name, default, help_text, enum_values in _FLAGS:
        if name in flag_values:
            continue
        default = defaults.get(name, default)
        if kind == "xla":
            xla.define_flag(name, default, help_text, flag_values)
        elif kind == "enum":
            flags.DEFINE_enum(name, default, enum_values, help_text, flag_values=flag_values)
        else:
            getattr(flags, f"DEFINE_{kind}")(name, default, help_text, flag_values=flag_values)


# A training run's flags that count something (>= 1), and its warmup lengths (>= 0, each with the
# length of the training it warms up), where a driver has them.
_TRAINING_COUNTS = ("train_batch_size", "train_step", "num_train_steps", "iterations_per_loop",
                    "save_checkpoints_steps", "log_steps", "gradient_accumulation_steps")
_TRAINING_STEPS_OF_WARMUP = {"warmup_step": "train_step", "num_warmup_steps": "num_train_steps"}


def count_flag_problems(flag_values: flags.FlagValues, *names: str) -> list[str]:
    """``--name must be >= 1`` for each of the flags ``names`` below 1."""
    return [f"--{name} must be >= 1, got {flag_values[name].value}" for name in names
            if flag_values[name].value < 1]


def training_flag_problems(flag_values: flags.FlagValues) -> list[str]:
    """What is wrong with a training run's flags, each problem naming the flag as typed; for a
    driver to refuse before any work (the loop's own checks come after the data was read and
    name its fields, not the flags)."""
    f = flag_values
    problems = count_flag_problems(f, *(name for name in _TRAINING_COUNTS if name in f))
    problems += [f"--{name} must be >= 0, got {f[name].value}" for name in _TRAINING_STEPS_OF_WARMUP
                 if name in f and f[name].value < 0]
    if not f.learning_rate >= 0:  # a negative rate ascends the loss (0 is allowed: weights saved as loaded)
        problems.append(f"--learning_rate must be >= 0, got {f.learning_rate}")
    return problems


def warn_if_warmup_outlasts_training(flag_values: flags.FlagValues) -> None:
    """A warmup longer than training is allowed, as the original allowed it, but the learning rate then
    never reaches --learning_rate: said in one warning."""
    f = flag_values
    for warmup, steps in _TRAINING_STEPS_OF_WARMUP.items():
        if warmup in f and steps in f and f[warmup].value > f[steps].value:
            logging.warning("--%s=%d is longer than --%s=%d: the learning rate never reaches --learning_rate",
                            warmup, f[warmup].value, steps, f[steps].value)
    if "warmup_proportion" in f and f.warmup_proportion > 1:
        logging.warning("--warmup_proportion=%g is above 1: the warmup is longer than training, so the learning "
                        "rate never reaches --learning_rate", f.warmup_proportion)


def strategy_from_flags(flag_values: flags.FlagValues | None = None):
    """Sets the precision policy and builds the strategy from ``define_flags()``'s flags."""
    f = flag_values or flags.FLAGS
    set_mixed_precision(f.mixed_precision)
    strategy = create_strategy(
        distribution_strategy=f.distribution_strategy,
        num_gpus=f.num_gpus,
        use_tpu=f.use_tpu,
        tpu_name=f.tpu_name,
        tpu_zone=f.tpu_zone,
        gcp_project=f.gcp_project,
        master=f.master,
    )
    if f.mixed_precision == "bf16":
        cpu_bf16.warn_if_emulated("--mixed_precision=bf16", replica_device_type(strategy))
    return strategy


def train_config_from_flags(flag_values: flags.FlagValues | None = None, **overrides: Any) -> TrainConfig:
    """The loop's settings from the flags of the same names (``--output_dir``,
    ``--train_batch_size``, ``--num_train_steps`` when the driver has them, and the shared
    ones); ``overrides`` set what a driver computes (e.g. ``num_train_steps`` from epochs)."""
    f = flag_values or flags.FLAGS
    values = {}
    for field in dataclasses.fields(TrainConfig):
        name = _FIELD_FLAGS.get(field.name, field.name)
        if name in f:
            values[field.name] = getattr(f, name)
    if "learning_rate" in f:  # a driver's: its lines about the learning rate name the flag
        values["learning_rate_flag"] = "--learning_rate"
    values.update(overrides)
    missing = [field.name for field in dataclasses.fields(TrainConfig)
               if field.name not in values and field.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"train_config_from_flags: no flag or override for {', '.join(missing)}")
    return TrainConfig(**values)
