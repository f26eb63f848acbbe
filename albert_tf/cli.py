"""How every driver ends on an error the user can fix: one line on stderr saying
what is wrong (file, flag, value), exit status 1, no traceback.

Bad flags, data, configs and checkpoints raise ValueError subclasses
(ConfigError, CheckpointError, GlueDataError, SquadFormatError, ...); files that
cannot be read or written raise OSError or TensorFlow's OpError; a diverged run
raises NonFiniteLossError. Anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import functools
import os
import sys
from typing import Callable

EXIT_USER_ERROR = 1


def _user_errors() -> tuple[type[BaseException], ...]:
    import tensorflow as tf

    from albert_tf.training.loop import NonFiniteLossError

    return (ValueError, OSError, tf.errors.OpError, NonFiniteLossError)


def reports_errors(main: Callable[[list[str]], int | None]) -> Callable[[list[str]], int]:
    """Decorates a driver's absl `main(argv)`."""

    driver = os.path.basename(getattr(sys.modules.get(main.__module__), "__file__", None) or sys.argv[0])

    @functools.wraps(main)
    def wrapper(argv: list[str]) -> int:
        try:
            return main(argv) or 0
        except _user_errors() as err:
            message = getattr(err, "message", None) or str(err)  # OpError's text is in .message
            print(f"{driver}: error: {message}", file=sys.stderr)
            return EXIT_USER_ERROR

    return wrapper
