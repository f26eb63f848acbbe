"""How every driver ends on an error the user can fix: one line on stderr saying
what is wrong (file, flag, value), exit status 1, no traceback.

Bad flags, data, configs and checkpoints raise ValueError subclasses
(ConfigError, CheckpointError, GlueDataError, SquadFormatError, ...); files that
cannot be read or written raise OSError or TensorFlow's OpError; a diverged run
raises a `RunError` (NonFiniteLossError). Ctrl-C is one line too (exit 130). Anything else is a
bug and keeps its traceback.
"""
from __future__ import annotations

import functools
import os
import re
import sys
from typing import Any, Callable, Mapping

from albert_tf.errors import RunError

EXIT_USER_ERROR = 1
EXIT_INTERRUPTED = 128 + 2  # SIGINT's number: what a shell reports for a process Ctrl-C ended


def _user_errors() -> tuple[type[BaseException], ...]:
    # A TensorFlow error can only come from a driver that loaded TensorFlow: don't import it
    # (seconds) to classify the errors of one that did not (create_pretraining_data).
    tf = sys.modules.get("tensorflow")
    op_error = (tf.errors.OpError,) if tf is not None else ()
    return (ValueError, OSError, RunError, *op_error)


def error_line(err: BaseException) -> str:
    """The one line to show for a user error.  A failed in-graph assertion (e.g. a token id
    >= vocab_size) becomes its own message and values, without TensorFlow's node names."""
    message = getattr(err, "message", None) or str(err)  # OpError's text is in .message
    failed = re.search(r"assertion failed: (.*)", message)
    if failed:
        parts = re.findall(r"\[([^\[\]]*)\]", failed.group(1))
        values = [p for p in parts[1:] if p and not p.endswith("= ") and not p.startswith("Condition")]
        return " ".join([parts[0], *values[:1]]) if parts else failed.group(1)
    return message


def reports_errors(main: Callable[[list[str]], int | None]) -> Callable[[list[str]], int]:
    """Decorates a driver's absl `main(argv)`."""

    driver = os.path.basename(getattr(sys.modules.get(main.__module__), "__file__", None) or sys.argv[0])

    @functools.wraps(main)
    def wrapper(argv: list[str]) -> int:
        try:
            expand_home_in_path_flags()
            return main(argv) or 0
        except _user_errors() as err:
            print(f"{driver}: error: {error_line(err)}", file=sys.stderr)
            return EXIT_USER_ERROR
        except KeyboardInterrupt:
            # Ctrl-C outside the training loop (which stops after its step and says so itself), or a second
            # one inside it: one line and the status of a process SIGINT ended, not a traceback.
            print(f"{driver}: interrupted (SIGINT) before it finished; its files are written whole or not at "
                  "all: rerun the same command to finish (training resumes from its last checkpoint)",
                  file=sys.stderr)
            return EXIT_INTERRUPTED

    return wrapper


# Flags naming files or folders (each item of a comma list: --input_file, --output_file).
_PATH_FLAG = re.compile(r"(_dir|_directory|_file|_path|_handle|checkpoint|checkpoint_to_convert)$")


def expand_home_in_path_flags() -> None:
    """A path flag given as ``--output_dir=~/runs`` means the home folder, but no shell expands a ``~`` after
    ``=`` and TensorFlow does not either: the original wrote into a folder named ``~`` in the current folder
    (whose ``rm -rf ~`` then removes the home folder) and did not find inputs that are there. A leading ``~``
    or ``~user`` of each path given on the command line is expanded as a shell would (``os.path.expanduser``)."""
    from absl import flags

    from albert_tf.fileio import expand_home

    values = flags.FLAGS
    for name in list(values):
        flag = values[name]
        if not (flag.present and isinstance(flag.value, str) and _PATH_FLAG.search(name) and "~" in flag.value):
            continue
        expanded = ",".join(expand_home(item) for item in flag.value.split(","))
        if expanded != flag.value:
            setattr(values, name, expanded)


def closing_summary(driver: str, outputs: Mapping[str, Any]) -> str:
    """What a driver prints when it is done: each output's name, then its path (a path per line
    when there are several) or its figures, each number written as the result files write it
    (``training.results.format_value``), never a Python repr. None values are left out."""
    from albert_tf.training.results import format_value

    lines = [f"{driver}: done"]
    for name, value in outputs.items():
        if value is None:
            continue
        if isinstance(value, Mapping):
            lines += [f"  {name}:", *(f"    {key} = {format_value(v)}" for key, v in value.items())]
        elif isinstance(value, (list, tuple)):
            lines += [f"  {name}:", *(f"    {format_value(_where(v))}" for v in value)]
        else:
            lines.append(f"  {name}: {format_value(_where(value))}")
    return "\n".join(lines)


def _where(value: Any) -> Any:
    """A local file, folder or checkpoint prefix given relative (``--export_dir=out``, ``--init_checkpoint=ck``)
    as an absolute path, as the summary's other outputs are; anything else as it is."""
    from albert_tf.fileio import absolute, is_remote

    if (isinstance(value, str) and value and not is_remote(value) and not os.path.isabs(value)
            and (os.path.lexists(value) or os.path.lexists(value + ".index"))):
        return absolute(value)
    return value


def require_flags(flag_values, *names: str) -> None:
    """The one way drivers declare required flags: checked when ``main`` starts, so a
    missing one is a user error like any other (one line, exit 1)."""
    missing = [f"--{name}" for name in names if getattr(flag_values, name) in (None, "")]
    if missing:
        raise ValueError(f"missing required flag(s): {', '.join(missing)}")


def describe_driver(driver) -> None:
    """Makes ``--help`` show the driver module's description and flags (the shared ones it defined
    in ``training.flags`` included) whatever launched it (the checkout's ``run_*.py`` or an
    installed console script): absl describes the ``__main__`` module, which is the launcher."""
    from absl import flags

    main_module = sys.modules["__main__"]
    if main_module is not driver:
        main_module.__doc__ = driver.__doc__
    for module in (driver, sys.modules.get("albert_tf.training.flags")):
        for flag in flags.FLAGS.get_key_flags_for_module(module) if module else ():
            flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def run_driver(main: Callable[[list[str]], int]) -> None:
    """``absl.app.run(main)`` for a driver of ``albert_tf.drivers``, described as it (``describe_driver``)."""
    from absl import app

    describe_driver(sys.modules[main.__module__])
    app.run(main)


def entry_point(main: Callable[[list[str]], int]) -> Callable[[], None]:
    """A driver's ``run()``: what its console script and the checkout's launcher call."""
    return lambda: run_driver(main)
