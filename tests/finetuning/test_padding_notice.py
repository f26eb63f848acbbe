"""SQuAD 1.1 keeps the original's padded batches. That is said once at INFO on every run (the "Batch lengths"
line, with why), and is a warning only when a length flag it cannot honour was given (the README's promise)."""
import logging

import pytest

from albert_tf import AlbertConfig
from albert_tf.data import batching
from albert_tf.finetuning import FineTuningJob
from albert_tf.finetuning.runner import _Runner
from albert_tf.squad.task import SquadSettings, SquadTask

CONFIG = AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)


@pytest.mark.parametrize("flags", [{"seq_length_buckets": (8, 16)}, {"seq_length_multiple": 16}])
def test_the_padded_notice_is_a_warning_only_for_flags_it_ignores(flags, caplog):
    assert flags.get("seq_length_multiple") != batching.DEFAULT_MULTIPLE
    task = SquadTask(SquadSettings("unused.model", version_2=False), output_dir="")
    with caplog.at_level(logging.INFO, logger="absl"):
        _Runner(task, FineTuningJob(output_dir="", albert_config=CONFIG, **flags), None)
    (notice,) = [r for r in caplog.records if "keeps every row padded" in r.getMessage()]
    assert notice.levelno == logging.WARNING


def test_without_such_flags_the_batch_lengths_line_alone_says_why(caplog):
    """It was said twice at INFO: a line of its own, then the "Batch lengths" line."""
    task = SquadTask(SquadSettings("unused.model", version_2=False), output_dir="")
    with caplog.at_level(logging.INFO, logger="absl"):
        runner = _Runner(task, FineTuningJob(output_dir="", albert_config=CONFIG), None)
    assert not [r for r in caplog.records if "keeps every row padded" in r.getMessage()]
    assert "its head scores padding positions" in runner.lengths.describe()


@pytest.mark.parametrize("pad_flag, reason", [(False, "SQuAD 1.1's numbers depend on it: its head scores padding "
                                                      "positions, as the original's"),
                                              (True, "--pad_to_max_length")])
def test_the_batch_lengths_line_names_the_flag_only_when_it_was_given(pad_flag, reason):
    """SQuAD 1.1 pads by default: its "Batch lengths" line named --pad_to_max_length, a flag the user never
    gave."""
    task = SquadTask(SquadSettings("unused.model", version_2=False), output_dir="")
    runner = _Runner(task, FineTuningJob(output_dir="", albert_config=CONFIG, pad_to_max_length=pad_flag), None)
    assert runner.lengths.describe() == f"every row padded to max_seq_length ({reason})"


def test_the_batch_lengths_line_at_the_default_multiple_says_no_rounding():
    """The default --seq_length_multiple=1 read "each batch at its longest row rounded up to 1"."""
    task = SquadTask(SquadSettings("unused.model", version_2=True), output_dir="")
    runner = _Runner(task, FineTuningJob(output_dir="", albert_config=CONFIG), None)
    assert runner.lengths.describe() == "each batch at its longest row"
    runner = _Runner(task, FineTuningJob(output_dir="", albert_config=CONFIG, seq_length_multiple=8), None)
    assert runner.lengths.describe() == "each batch at its longest row rounded up to a multiple of 8"


def test_squad_counts_its_prediction_questions_once(monkeypatch):
    """Evaluation and prediction both load the predict split: its count was logged twice."""
    import types

    from albert_tf.squad import task as squad_task

    task = SquadTask(SquadSettings("unused.model", version_2=True), output_dir="")
    cached = types.SimpleNamespace(side={"num_examples": 7}, num_records=9)
    monkeypatch.setattr(SquadTask, "_features", lambda self, is_training: cached)
    said = []
    monkeypatch.setattr(squad_task.logging, "info", lambda message, *args: said.append(message % args))
    task.load_split("dev")
    task.load_split("dev")
    assert said == ["SQuAD prediction: 7 questions, 9 features"]
