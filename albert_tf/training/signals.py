"""Stopping a run cleanly: SIGTERM/SIGINT become a request the in-graph loop reads, and
the loop's steps run in a thread so that the main thread sees a signal at once."""
from __future__ import annotations

import signal
import threading
from typing import Any, Callable

import tensorflow as tf
from absl import logging


class TrainingInterrupted(SystemExit):
    """Raised after SIGTERM/SIGINT once a checkpoint is written. Exits with the shell's status of a process
    that signal ended (128 + its number: 143, 130), as create_pretraining_data.py does: the run is not
    done, so a script (`set -e`) must not go on to evaluate it, and a scheduler restarts it to resume.
    ``signal_name`` None: another worker received it (this one stops with it, as after SIGTERM)."""

    def __init__(self, message: str, signal_name: str | None = None):
        super().__init__(128 + int(signal.Signals[signal_name or "SIGTERM"]))
        self.message = message

    def __str__(self) -> str:
        return self.message


class StopSignals:
    """Turns SIGTERM/SIGINT into a stop request (a second SIGINT aborts at once)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled and threading.current_thread() is threading.main_thread()
        self.received: str | None = None
        self._previous: dict = {}

    def _handle(self, signum, frame):
        if self.received is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name
        logging.warning("Received %s: stopping after the current step to write a checkpoint.", self.received)

    def __enter__(self):
        if self.enabled:
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def run_interruptibly(fn: Callable[..., Any], *args, signals: StopSignals, stop_flag: tf.Variable,
                      while_waiting: Callable[[], Any] | None = None) -> Any:
    """Runs ``fn`` in a thread; sets ``stop_flag`` to 1 as soon as a signal arrives.  Calls
    ``while_waiting()`` (if given) every 0.2 s while ``fn`` runs."""
    result: dict = {}

    def target():
        try:
            result["value"] = fn(*args)
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            result["error"] = e

    if signals.received:  # arrived between loops (a save hook): the loop's first step is its last
        stop_flag.assign(1.0)
    thread = threading.Thread(target=target, name="albert_tf-train-steps", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(timeout=0.2)
        if while_waiting is not None and thread.is_alive():
            while_waiting()
        if signals.received and float(stop_flag.numpy()) == 0.0:
            stop_flag.assign(1.0)
    if "error" in result:
        raise result["error"]
    return result["value"]
