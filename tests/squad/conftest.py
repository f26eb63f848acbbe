"""Fixtures for the SQuAD tests: the 30k-clean SentencePiece model and converted
shared subsets, computed once per session (conversion takes ~1 s per file)."""
import functools

import pytest

from albert_tf import tokenization
from albert_tf.squad import data, features


@functools.cache
def _sp_model(path):
    return tokenization.load_spm_model(path)


@functools.cache
def _convert(squad_path, spm_path, is_training, max_seq_length, doc_stride, max_query_length):
    examples = data.read_squad_examples(squad_path, is_training)
    stats = features.ConversionStats()
    feats = list(features.convert_examples_to_features(
        examples, _sp_model(spm_path), max_seq_length, doc_stride, max_query_length,
        is_training, True, stats))
    return examples, feats, stats


@pytest.fixture
def spm_path(shared):
    return str(shared("data", "spm", "30k-clean.model"))


@pytest.fixture
def sp_model(spm_path):
    return _sp_model(spm_path)


@pytest.fixture
def convert(shared, spm_path):
    """convert(file_name, is_training, max_seq_length=384, doc_stride=128, max_query_length=64)
    -> (examples, features, stats) for a file of ../shared/data/squad."""
    def run(name, is_training, max_seq_length=384, doc_stride=128, max_query_length=64):
        path = str(shared("data", "squad", name))
        return _convert(path, spm_path, is_training, max_seq_length, doc_stride, max_query_length)
    return run
