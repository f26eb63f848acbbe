"""SQuAD 1.1 keeps the original's padded batches. That is said once at INFO on every run, and is a
warning only when a length flag it cannot honour was given (the README's promise)."""
import logging

import pytest

from albert_tf import AlbertConfig
from albert_tf.data import batching
from albert_tf.finetuning import FineTuningJob
from albert_tf.finetuning.runner import _Runner
from albert_tf.squad.task import SquadSettings, SquadTask

CONFIG = AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)


@pytest.mark.parametrize("flags, level", [({}, logging.INFO),
                                          ({"seq_length_buckets": (8, 16)}, logging.WARNING),
                                          ({"seq_length_multiple": 16}, logging.WARNING)])
def test_the_padded_notice_is_a_warning_only_for_flags_it_ignores(flags, level, caplog):
    assert flags.get("seq_length_multiple") != batching.DEFAULT_MULTIPLE
    task = SquadTask(SquadSettings("unused.model", version_2=False), output_dir="")
    with caplog.at_level(logging.INFO, logger="absl"):
        _Runner(task, FineTuningJob(output_dir="", albert_config=CONFIG, **flags), None)
    (notice,) = [r for r in caplog.records if "keeps every row padded" in r.getMessage()]
    assert notice.levelno == level


@pytest.mark.parametrize("pad_flag, reason", [(False, "SQuAD 1.1's numbers depend on it"),
                                              (True, "--pad_to_max_length")])
def test_the_batch_lengths_line_names_the_flag_only_when_it_was_given(pad_flag, reason):
    """SQuAD 1.1 pads by default: its "Batch lengths" line named --pad_to_max_length, a flag the user never
    gave."""
    task = SquadTask(SquadSettings("unused.model", version_2=False), output_dir="")
    runner = _Runner(task, FineTuningJob(output_dir="", albert_config=CONFIG, pad_to_max_length=pad_flag), None)
    assert runner.lengths.describe() == f"every row padded to max_seq_length ({reason})"
