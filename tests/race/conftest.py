"""Fixtures for the RACE tests: the real 30k-clean SentencePiece model (through our
FullTokenizer and, for independent expectations, through sentencepiece itself) and a
writer of RACE-layout folders."""
import json
import os

import pytest


@pytest.fixture(scope="session")
def spm_path(shared):
    return str(shared("data", "spm", "30k-clean.model"))


@pytest.fixture(scope="session")
def tokenizer(spm_path):
    from albert_tf.tokenization import FullTokenizer

    return FullTokenizer(spm_model_file=spm_path, do_lower_case=True)


@pytest.fixture(scope="session")
def sp(spm_path):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=spm_path)


def _record(article="Tom has a red ball.", questions=("What colour is Tom's ball?",),
           options=(("red", "blue", "green", "black"),), answers=("A",), id="middle1.txt", **extra):
    def as_list(x):  # tuples become JSON lists; anything else is written as given
        return [as_list(i) for i in x] if isinstance(x, (list, tuple)) else x

    rec = {"article": article, "questions": as_list(questions), "options": as_list(options),
           "answers": as_list(answers), "id": id}
    rec.update(extra)
    return rec


@pytest.fixture
def make_record():
    """make_record(**fields): one RACE line as a dict (a one-question article by default)."""
    return _record


@pytest.fixture
def race_dir(tmp_path):
    """write(split, level, lines, name="all.txt"): lines are dicts (one JSON line each)
    or raw str/bytes lines; returns the data_dir (tmp_path)."""
    def write(split, level, lines, name="all.txt"):
        folder = tmp_path / "RACE" / split / level
        folder.mkdir(parents=True, exist_ok=True)
        data = b"".join((json.dumps(x).encode() if isinstance(x, dict) else
                         x if isinstance(x, bytes) else x.encode()) + b"\n" for x in lines)
        (folder / name).write_bytes(data)
        return str(tmp_path)
    write.root = str(tmp_path)
    return write
