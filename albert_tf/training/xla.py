"""Whether the training step is compiled with XLA: ``--enable_xla`` and the one rule
that can overrule it.

``--enable_xla`` takes ``false`` (default), ``true`` or ``force`` (``--enable_xla``,
``--noenable_xla``, ``--enable_xla=true|false|1|0`` work as for any boolean flag);
``TrainConfig.enable_xla`` takes the same values.

The rule: ``true`` with bf16 compute on CPU devices runs WITHOUT XLA, after one warning
line.  XLA's CPU backend has no AMX/AVX512-BF16 kernels: on an AMX Xeon the bf16
pretraining step ran at 1.94 ex/s with XLA against 9.27 without (``../shared/docs/
PERFORMANCE.md``), while oneDNN, used without XLA, has them.  ``force`` compiles anyway;
GPUs, TPUs and float32/float16 keep XLA whenever it is asked for.  The Trainer applies
the rule (``Trainer.xla_compiled``).
"""
from __future__ import annotations

from typing import Union

from absl import flags, logging

FORCE = "force"
XlaSetting = Union[bool, str]  # False, True or FORCE

_TRUE = ("true", "t", "1", "yes", "on")
_FALSE = ("false", "f", "0", "no", "off")
_warned = False


def parse_xla_setting(value: XlaSetting | int) -> XlaSetting:
    """False, True or "force" from a flag string or a Python value; ValueError otherwise."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text == FORCE:
        return FORCE
    raise ValueError(f"--enable_xla={value!r}: expected true, false or force")


def use_xla(setting: XlaSetting, compute_dtype: str, device_type: str) -> bool:
    """Whether to compile the step with XLA, given ``--enable_xla``, the precision policy's
    compute dtype and the replicas' device type ("CPU", "GPU", "TPU").  Warns once per
    process when it turns a requested XLA off (see the module doc)."""
    global _warned
    setting = parse_xla_setting(setting)
    if setting == FORCE:
        return True
    if not setting:
        return False
    if device_type.upper() == "CPU" and compute_dtype == "bfloat16":
        if not _warned:
            _warned = True
            logging.warning("--enable_xla with bf16 on CPU: XLA's CPU backend has no bf16 (AMX) kernels and runs "
                            "the bf16 step ~4x slower; training without XLA (--enable_xla=force compiles anyway).")
        return False
    return True


class _XlaParser(flags.ArgumentParser):
    def parse(self, argument):
        return parse_xla_setting(argument)

    def flag_type(self) -> str:
        return "bool or 'force'"


def define_flag(name: str, default: XlaSetting, help_text: str, flag_values: flags.FlagValues) -> None:
    """A boolean flag (``--name``, ``--noname``, ``=true/false``) that also takes ``force``."""
    flags.DEFINE_flag(flags.Flag(_XlaParser(), flags.ArgumentSerializer(), name, default, help_text, boolean=True),
                      flag_values=flag_values)
