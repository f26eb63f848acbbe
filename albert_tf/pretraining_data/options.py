"""The knobs of ALBERT's pretraining-instance algorithm (flags of create_pretraining_data.py) and the
counters behind its JSON summary."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class InstanceOptions:
    """The algorithm's knobs (flags of create_pretraining_data.py)."""

    max_seq_length: int = 512
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True
    do_permutation: bool = False
    random_next_sentence: bool = False

    @property
    def num_masked_slots(self) -> int:
        """Length of the masked_lm_* features (doubled by --do_permutation, as the original)."""
        return self.max_predictions_per_seq * (2 if self.do_permutation else 1)

    def ngram_cumulative(self) -> list[float]:
        """Cumulative p(n) for n = 1..ngram: 1/n normalized, reversed unless favor_shorter_ngram."""
        weights = [1.0 / n for n in range(1, self.ngram + 1)]
        if not self.favor_shorter_ngram:
            weights = weights[::-1]
        total = sum(weights)
        cumulative, running = [], 0.0
        for w in weights:
            running += w / total
            cumulative.append(running)
        cumulative[-1] = 1.0
        return cumulative


@dataclass
class InstanceStats:
    """Counters behind the JSON summary; `merge` adds another's counts."""

    instances: int = 0
    tokens: int = 0
    masked: int = 0
    ngram_draws: dict = field(default_factory=dict)  # drawn n -> count
    masked_ngram_words: dict = field(default_factory=dict)  # words in each masked n-gram -> count
    replaced_mask: int = 0
    replaced_keep: int = 0
    replaced_random: int = 0
    sop_in_order: int = 0
    sop_swapped: int = 0
    sop_random_document: int = 0

    def merge(self, other: "InstanceStats") -> None:
        for name, value in vars(other).items():
            if isinstance(value, dict):
                mine = getattr(self, name)
                for key, count in value.items():
                    mine[key] = mine.get(key, 0) + count
            else:
                setattr(self, name, getattr(self, name) + value)
