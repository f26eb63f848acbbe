"""A quiet start for the drivers: TensorFlow's start-up lines hidden unless asked for.

``albert_tf.drivers`` calls ``quiet_startup()`` when it is imported, which every launcher,
console script and ``python -m albert_tf.drivers.*`` does before the driver module imports
TensorFlow; ``python -m albert_tf.demo`` calls it before its first TensorFlow import.  By
default that hides

- TensorFlow's C++ log lines (the oneDNN notice, CPU-feature and ``failed call to
  cuInit`` lines), by setting ``TF_CPP_MIN_LOG_LEVEL=3`` unless the user set it;
- the ``failed call to cuInit`` error record on a machine with CUDA libraries and no GPU even
  under a ``TF_CPP_MIN_LOG_LEVEL=2`` the user set (a common habit to hide INFO lines): the
  devices are listed while the import's output is captured, so the record is written then and
  dropped, instead of appearing beside a driver's one-line error later;
- the lines Abseil prints before TensorFlow initializes its logging, which no log level
  reaches (``WARNING: All log messages before absl::InitializeLog() ...`` and
  ``Could not find cuda drivers``): standard error is captured while ``tensorflow`` is
  imported and written back without them (anything else printed then is kept);
- Python warnings that TensorFlow and Keras raise on import;
- the INFO records TensorFlow's and Keras's own Python code logs while a driver runs, between the
  driver's INFO lines (``Sharding callback duration: 8 microseconds`` twice per checkpoint; at each
  export ``Assets written to`` twice, a fingerprint line and the renaming of numbered inputs); their
  warnings and errors are kept (``LibraryInfoFilter``).

``--verbosity=1`` (absl's flag, also ``-v 1``) or ``ALBERT_TF_VERBOSE=1`` in the
environment shows everything.  Errors never go through here: a driver's own error
line and Python tracebacks are printed as before.

This module imports nothing heavy: it must run before TensorFlow is imported.
"""
from __future__ import annotations

import contextlib
import importlib.abc
import importlib.util
import logging
import os
import re
import sys
import tempfile
import warnings
from typing import Iterator, Mapping, Optional, Sequence

VERBOSE_ENV = "ALBERT_TF_VERBOSE"
_QUIET_MODULES = ("tensorflow",)
# Abseil/TensorFlow C++ records at INFO or WARNING: "I0000 00:00:1796095900.338775   18106 file.cc:31] ..."
_CPP_RECORD = re.compile(r"^[IW]\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ [\w.\-/]+:\d+\] ")
# CUDA's error record when its libraries are installed but no GPU answers: start-up noise for a CPU run.
_NO_GPU_RECORD = re.compile(r"^E\d{4} \d\d:\d\d:\d+\.\d+\s+\d+ cuda_\w+\.cc:\d+\] failed call to cuInit: ")
_NOISE = (
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"),
    _CPP_RECORD,
    _NO_GPU_RECORD,
    re.compile(r"^To enable the following instructions: .* rebuild TensorFlow with the appropriate compiler flags"),
)
# Python warnings raised while importing these packages are start-up noise.
_NOISY_PACKAGES = r"(tensorflow|tf_keras|keras|tensorflow_text|tensorflow_hub|google\.protobuf)(\.|$)"


def verbose_requested(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether the user asked for start-up output: ``--verbosity=N`` / ``-v N`` with N >= 1
    on the command line (the last one counts, as for absl), or ``ALBERT_TF_VERBOSE`` set to
    anything but empty/0/false/no/off."""
    if environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no", "off"):
        return True
    args = list(argv)
    verbose = False
    for i, arg in enumerate(args):
        if arg == "--":
            break
        value: Optional[str] = None
        for name in ("--verbosity", "-verbosity", "--v", "-v"):
            if arg.startswith(name + "="):
                value = arg[len(name) + 1:]
            elif arg == name and i + 1 < len(args):
                value = args[i + 1]
        if value is not None:
            try:
                verbose = int(value) >= 1  # absl keeps the last value given: so do we
            except ValueError:
                return False  # absl reports the bad value itself
    return verbose


def is_noise(line: str) -> bool:
    """Whether a line captured on standard error is TensorFlow start-up noise."""
    return any(pattern.match(line) for pattern in _NOISE)


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Captures file descriptor 2 (C++ and Python writes alike) and writes back the
    lines that are not start-up noise when the block ends, even if it raised."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, AttributeError, ValueError):  # no usable standard error: nothing to filter
        yield
        return
    with tempfile.TemporaryFile() as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            text = capture.read().decode("utf-8", errors="replace")
            kept = "".join(line for line in text.splitlines(keepends=True) if not is_noise(line))
            if kept:
                sys.stderr.write(kept)
                sys.stderr.flush()


class LibraryInfoFilter(logging.Filter):
    """Drops the records below WARNING that code under ``folders`` (TensorFlow's, Keras's) logged."""

    def __init__(self, folders: Sequence[str]):
        super().__init__()
        self.folders = tuple(os.path.join(os.path.realpath(folder), "") for folder in folders)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not os.path.realpath(record.pathname).startswith(self.folders)


def _quiet_library_info(tensorflow) -> None:
    """Filters TensorFlow's and Keras's INFO records from absl's logger (which TensorFlow's checkpoint and
    SavedModel code log through) and TensorFlow's own (whose records also reach its own handler: twice)."""
    from absl import logging as absl_logging  # imported by TensorFlow already

    folders = [os.path.dirname(tensorflow.__file__)]
    for name in ("keras", "tf_keras"):
        with contextlib.suppress(ImportError, ValueError):
            spec = importlib.util.find_spec(name)  # a top-level package: found, not imported
            if spec is not None and spec.origin:
                folders.append(os.path.dirname(spec.origin))
    info_filter = LibraryInfoFilter(folders)
    for logger in (absl_logging.get_absl_logger(), logging.getLogger("tensorflow")):
        logger.addFilter(info_filter)


def _one_handler(tensorflow) -> None:
    """TensorFlow's logger has a stderr handler of its own (made when nothing handled the root logger yet), and
    its records also reach absl's handler on the root logger, which every driver's absl.app installs: each
    warning was printed twice. Through absl's alone, they read as the driver's own lines. At every verbosity:
    ``--verbosity=1`` shows more records, each once."""
    tf_logger = tensorflow.get_logger()
    for handler in list(tf_logger.handlers):
        tf_logger.removeHandler(handler)


class _QuietLoader(importlib.abc.Loader):
    """Runs the real loader of a noisy module inside `filtered_stderr()` (``quiet``), then leaves TensorFlow's
    records one handler (at any verbosity)."""

    def __init__(self, loader: importlib.abc.Loader, quiet: bool = True):
        self._loader = loader
        self._quiet = quiet

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        # The module keeps its real loader (introspection, reloads).
        module.__loader__ = self._loader
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        if not self._quiet:  # --verbosity=1: every start-up line and INFO record shown
            self._loader.exec_module(module)
        else:
            with filtered_stderr():
                self._loader.exec_module(module)
                _list_devices(module)
            with contextlib.suppress(Exception):  # never a reason for a driver not to start
                _quiet_library_info(module)
        with contextlib.suppress(Exception):
            _one_handler(module)


def _list_devices(tensorflow) -> None:
    """Lists the physical devices, which initializes CUDA (and prints its cuInit record) inside the
    capture.  Listing leaves the runtime unconfigured: logical devices and threads can still be set."""
    with contextlib.suppress(Exception):  # a broken device stack is reported where the driver uses it
        tensorflow.config.list_physical_devices()


class _QuietImportFinder(importlib.abc.MetaPathFinder):
    """On the first import of a noisy module: its real spec, with a filtering loader."""

    def __init__(self, quiet: bool = True):
        self.quiet = quiet

    def find_spec(self, fullname, path, target=None):
        if fullname not in _QUIET_MODULES:
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]  # once, and no recursion
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None:
            spec.loader = _QuietLoader(spec.loader, self.quiet)
        return spec


def quiet_startup(argv: Optional[Sequence[str]] = None) -> bool:
    """Hides TensorFlow's start-up output unless the user asked for it (see the module
    doc).  Call it before anything imports TensorFlow; returns whether it is quiet.
    Once TensorFlow is imported it changes nothing (the lines are already out)."""
    argv = sys.argv[1:] if argv is None else argv
    if any(name in sys.modules for name in _QUIET_MODULES):
        return False
    quiet = not verbose_requested(argv, os.environ)
    if quiet:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        warnings.filterwarnings("ignore", module=_NOISY_PACKAGES)
    if not any(isinstance(f, _QuietImportFinder) for f in sys.meta_path):
        # Verbose too: it still gives TensorFlow's records one handler (each warning printed once).
        sys.meta_path.insert(0, _QuietImportFinder(quiet))
    return quiet
