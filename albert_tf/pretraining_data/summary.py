"""What create_pretraining_data reports: progress lines on stderr while it runs, and the JSON summary
of the corpus, the instances and the settings at the end."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from typing import Sequence

from albert_tf.pretraining_data.config import PipelineConfig
from albert_tf.pretraining_data.options import InstanceStats
from albert_tf.pretraining_data.outputs import output_paths_from_summary
from albert_tf.pretraining_data.reading import CorpusFacts, ReadCounters
from albert_tf.fileio import atomic_write_text


class Progress:
    """Progress lines on stderr for one phase: share done, the counts the phase reports (``counts``:
    documents, instances) and their rates, ETA. A count the phase never reports is left out of its lines
    (writing counted no documents: its lines said "0 documents (0/s)")."""

    def __init__(self, phase: str, total: int, interval: float, counts: Sequence[str] = ("documents", "instances")):
        self.phase = phase
        self.counts = tuple(counts)
        self.total = max(1, total)
        self.interval = interval
        self.start = self.last = time.monotonic()
        self.done = self.documents = self.instances = 0
        self._shown: tuple | None = None

    def update(self, done: int = 0, documents: int = 0, instances: int = 0, final: bool = False) -> None:
        self.done += done
        self.documents += documents
        self.instances += instances
        now = time.monotonic()
        if self.interval <= 0 or (now - self.last < self.interval and not final):
            return
        if final and self._shown == (self.done, self.documents, self.instances):
            return  # the last line already said it
        self.last = now
        self._shown = (self.done, self.documents, self.instances)
        elapsed = max(now - self.start, 1e-9)
        fraction = min(1.0, self.done / self.total)
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else float("inf")
        counted = "".join(f"| {getattr(self, name)} {name} ({getattr(self, name) / elapsed:.0f}/s) "
                          for name in self.counts)
        sys.stderr.write(
            f"create_pretraining_data: {self.phase} {100 * fraction:5.1f}% {counted}"
            f"| elapsed {elapsed:.0f}s | ETA {eta:.0f}s\n"
        )
        sys.stderr.flush()


def _shares(counts: dict) -> dict:
    total = sum(counts.values())
    return {str(k): (v / total if total else 0.0) for k, v in sorted(counts.items())}


def output_sizes(output_bytes: Sequence[int], instances: int) -> list[dict]:
    """Each output's bytes (as written) and records: instance k went to output k % len(outputs), as the
    original's round-robin writer. run_pretraining compares the bytes with the file it is given (a copy
    cut between two records reads as a shorter whole file)."""
    n = len(output_bytes)
    return [{"bytes": size, "records": len(range(j, instances, n))} for j, size in enumerate(output_bytes)]


def build_summary(config: PipelineConfig, stats: InstanceStats, counters: ReadCounters, facts: CorpusFacts,
                  vocab: dict, shuffle: dict, elapsed: float, output_bytes: Sequence[int]) -> dict:
    """The summary; ``output_bytes``: each output's size as written, in ``config.output_files`` order."""
    n = stats.instances
    replacements = {"mask": stats.replaced_mask, "keep": stats.replaced_keep, "random": stats.replaced_random}
    labels = {"0": stats.sop_in_order, "1": stats.sop_swapped + stats.sop_random_document}
    return {
        "instances": n,
        "output_files": list(config.output_files),
        "output_paths_from_summary": output_paths_from_summary(config),  # what check_outputs takes as ours
        "output_sizes": output_sizes(output_bytes, n),  # in output_files order
        "input_files": list(config.input_files),
        "documents": facts.documents,
        "sentences": facts.sentences,
        "tokens": facts.tokens,
        "input_lines": counters.lines,
        "invalid_lines_skipped": counters.invalid_lines_skipped,
        **vocab,
        "mean_tokens": stats.tokens / n if n else 0.0,
        "masked_fraction": stats.masked / stats.tokens if stats.tokens else 0.0,
        "mean_masked_per_instance": stats.masked / n if n else 0.0,
        "ngram_length_histogram": {
            "drawn": {str(k): v for k, v in sorted(stats.ngram_draws.items())},
            "drawn_shares": _shares(stats.ngram_draws),
            "masked_words": {str(k): v for k, v in sorted(stats.masked_ngram_words.items())},
            "masked_words_shares": _shares(stats.masked_ngram_words),
        },
        "replacement_counts": replacements,
        "replacement_shares": _shares(replacements),
        "sop_label_counts": labels,
        "sop_label_shares": _shares(labels),
        "sop_sources": {
            "in_order": stats.sop_in_order,
            "swapped": stats.sop_swapped,
            "random_document": stats.sop_random_document,
        },
        "shuffle": shuffle,
        "settings": {
            "vocab_file": config.vocab_file,
            "spm_model_file": config.spm_model_file,
            "do_lower_case": config.do_lower_case,
            "random_seed": config.random_seed,
            "dupe_factor": config.dupe_factor,
            "block_size_mb": config.block_size_mb,
            "shuffle_bucket_mb": config.shuffle_bucket_mb,
            "num_workers": config.num_workers,
            **asdict(config.options),
        },
        "elapsed_seconds": elapsed,
        "instances_per_second": n / elapsed if elapsed > 0 else 0.0,
    }


def write_summary_json(path: str, payload: dict) -> None:
    atomic_write_text(path, json.dumps(payload, indent=2, sort_keys=False) + "\n")
