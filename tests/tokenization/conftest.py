"""Fixtures for the tokenization tests: the real 30k-clean model and the 848 reference lines."""
import json

import pytest


@pytest.fixture
def spm_model_path(shared):
    return shared("data", "spm", "30k-clean.model")


@pytest.fixture
def reference_rows(shared):
    path = shared("reference", "tokenization_30k-clean.jsonl")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 848, f"{path} should hold 848 lines, found {len(rows)}"
    return rows
