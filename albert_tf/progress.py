"""Progress lines of work that runs for a while outside the training loop (evaluation, prediction, the
conversion of a data file to features): what is done, of how much, the rate and the ETA. On the lowest
floor, so that the data tools below the training loop log the same lines as it."""
from __future__ import annotations

import math
import time

from absl import logging


def format_duration(seconds: float) -> str:
    """``75`` -> ``1m15s``; ``3725`` -> ``1h02m05s``; ``?`` for an unknown (infinite or NaN) time."""
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m{secs:02d}s" if hours else f"{minutes}m{secs:02d}s"


# Seconds between two progress lines (the first comes after this long).
PROGRESS_SECONDS = 30.0


class Progress:
    """A line at most every ``PROGRESS_SECONDS`` while an evaluation or prediction runs (they printed nothing
    until done): batches done, of ``total_batches`` when known, examples/s and the ETA, as the training
    lines. The first batch, which traces the step, is left out of the rate."""

    def __init__(self, what: str, total_batches: int | None = None, unit: str = "batch"):
        self.what, self.total_batches, self.unit = what, total_batches, unit
        self.batches = 0
        self.timed_batches = self.timed_examples = 0
        self.timed_since: float | None = None  # the end of the first batch
        self.last_line = time.time()

    def add(self, batches: int, examples: int) -> None:
        """Counts ``batches`` more done (``examples`` rows); logs a line when one is due."""
        now = time.time()
        self.batches += batches
        if self.timed_since is None:
            self.timed_since = now
        else:
            self.timed_batches += batches
            self.timed_examples += examples
        if now - self.last_line >= PROGRESS_SECONDS:
            self.last_line = now
            logging.info("%s", self.line(now))

    def line(self, now: float) -> str:
        text = f"{self.what}: {self.unit} {self.batches}" + (f"/{self.total_batches}" if self.total_batches else "")
        if not self.timed_batches:  # only the first batch so far: its tracing says nothing of the rate
            return text
        elapsed = max(now - (self.timed_since or now), 1e-9)
        text += f", examples/s = {self.timed_examples / elapsed:.1f}"
        if self.total_batches:
            left = max(self.total_batches - self.batches, 0)
            text += f", ETA {format_duration(left * elapsed / self.timed_batches)}"
        return text
