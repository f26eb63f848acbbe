"""Fixtures for the pretraining-data tests: botchan.txt prepared as one sentence per line,
and one pipeline run whose records and summary several tests inspect."""
import pathlib

import numpy as np
import pytest

from albert_tf.data.books import write_book_as_sentences
from albert_tf.pretraining_data.instances import InstanceOptions
from albert_tf.pretraining_data.pipeline import PipelineConfig, create_pretraining_data

_CACHE = {}

SEQ_LENGTH = 64
MAX_PREDICTIONS = 10


@pytest.fixture
def spm_model(shared):
    return str(shared("data", "spm", "30k-clean.model"))


@pytest.fixture
def botchan_corpus(shared, tmp_path_factory):
    if "corpus" not in _CACHE:
        folder = tmp_path_factory.mktemp("corpus")
        _CACHE["corpus"] = pathlib.Path(write_book_as_sentences(
            shared("data", "corpus", "botchan.txt"), folder / "botchan_sentences.txt"))
    return _CACHE["corpus"]


def _make_config(corpus, spm_model, output_files, **overrides):
    options = InstanceOptions(
        max_seq_length=overrides.pop("max_seq_length", SEQ_LENGTH),
        max_predictions_per_seq=overrides.pop("max_predictions_per_seq", MAX_PREDICTIONS),
        do_permutation=overrides.pop("do_permutation", False),
        random_next_sentence=overrides.pop("random_next_sentence", False),
    )
    settings = dict(
        input_files=(str(corpus),),
        output_files=tuple(str(f) for f in output_files),
        spm_model_file=spm_model,
        options=options,
        dupe_factor=2,
        num_workers=1,
        block_size_mb=0.05,  # several blocks even for one book, so workers share the work
        progress_interval=0,
    )
    settings.update(overrides)
    return PipelineConfig(**settings)


@pytest.fixture
def make_config():
    """make_config(corpus, spm_model, output_files, **overrides) -> PipelineConfig for small test runs."""
    return _make_config


@pytest.fixture
def botchan_run(botchan_corpus, spm_model, tmp_path_factory):
    """One in-process run on the book (seq 64, dupe 4): (output path, summary)."""
    if "run" not in _CACHE:
        out = tmp_path_factory.mktemp("run") / "botchan.tfrecord"
        summary = create_pretraining_data(_make_config(botchan_corpus, spm_model, [out], dupe_factor=4))
        _CACHE["run"] = (out, summary)
    return _CACHE["run"]


@pytest.fixture
def botchan_records(botchan_run):
    """The run's records parsed with the shared feature spec, as numpy arrays."""
    if "records" not in _CACHE:
        import tensorflow as tf

        from albert_tf.pretraining_data.features import parse_example

        out, _ = botchan_run
        ds = tf.data.TFRecordDataset(str(out)).batch(4096)
        ds = ds.map(lambda s: parse_example(s, SEQ_LENGTH, MAX_PREDICTIONS))
        batches = list(ds.as_numpy_iterator())
        _CACHE["records"] = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    return _CACHE["records"]
