"""Helpers for the GLUE tests: write task files in the GLUE TSV format."""
import pathlib

import pytest


def _write_tsv(path: pathlib.Path, rows, bom: bool = False, newline: str = "\n") -> pathlib.Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join("\t".join(str(c) for c in row) + newline for row in rows)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


@pytest.fixture
def write_tsv():
    """write_tsv(path, rows, bom=False, newline="\\n"): rows are lists of fields."""
    return _write_tsv


MNLI_TRAIN_HEADER = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                     "sentence2_binary_parse", "sentence1_parse", "sentence2_parse",
                     "sentence1", "sentence2", "label1", "gold_label"]
MNLI_DEV_HEADER = MNLI_TRAIN_HEADER[:-1] + ["label2", "label3", "label4", "label5", "gold_label"]


def mnli_row(index, a, b, labels):
    return [index, "31193", f"{index}n", "government", "( a )", "( b )", "(ROOT a)", "(ROOT b)", a, b,
            *labels]


@pytest.fixture
def glue_dir(tmp_path):
    """A data_dir with MNLI (matched + mismatched), QQP, SST-2 and AX files written by hand."""
    d = tmp_path / "glue"
    _write_tsv(d / "MNLI" / "train.tsv", [
        MNLI_TRAIN_HEADER,
        mnli_row(0, "Conceptually cream skimming has two basic dimensions.",
                 "Product and geography are what make cream skimming work.", ["neutral", "neutral"]),
        mnli_row(1, 'He said "yes.', "He agreed.", ["entailment", "entailment"]),
        mnli_row(2, "The sky is green.", "The sky is blue.", ["contradiction", "contradiction"]),
    ])
    for split, genre_text in (("dev_matched", "matched"), ("dev_mismatched", "mismatched")):
        _write_tsv(d / "MNLI" / f"{split}.tsv", [
            MNLI_DEV_HEADER,
            mnli_row(0, f"{genre_text} premise one", "hypothesis one",
                     ["neutral", "neutral", "entailment", "neutral", "neutral", "neutral"]),
            mnli_row(1, f"{genre_text} premise two", "hypothesis two",
                     ["entailment"] * 5 + ["entailment"]),
        ])
    for split in ("test_matched", "test_mismatched"):
        _write_tsv(d / "MNLI" / f"{split}.tsv", [
            MNLI_TRAIN_HEADER[:10],
            mnli_row(0, f"{split} a", "b", [])[:10],
            mnli_row(1, f"{split} c", "d", [])[:10],
        ])
    _write_tsv(d / "QQP" / "train.tsv", [
        ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
        ["133273", "213221", "213222", "How is the life of a math student?",
         "Which level of prepration is enough for the exam jlpt5?", "0"],
        ["402555", "536040", "536041", "How do I control my horny emotions?",
         "How do you control your horniness?", "1"],
    ])
    _write_tsv(d / "QQP" / "dev.tsv", [
        ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
        ["201359", "303345", "303346", "Why are African-Americans so beautiful?",
         "Why are hispanics so beautiful?", "0"],
    ])
    _write_tsv(d / "QQP" / "test.tsv", [
        ["id", "question1", "question2"],
        ["0", "Why do rockets look white?", "Why are rockets and boosters painted white?"],
        ["1", "What's causing someone to be jealous?", "What can I do to avoid being jealous of someone?"],
    ])
    _write_tsv(d / "SST-2" / "train.tsv", [
        ["sentence", "label"],
        ["hide new secretions from the parental units ", "0"],
        ["contains no wit , only labored gags ", "0"],
        ["that loves its characters and communicates something rather beautiful about human nature ",
         "1"],
    ])
    _write_tsv(d / "SST-2" / "dev.tsv", [
        ["sentence", "label"],
        ["it 's a charming and often affecting journey . ", "1"],
    ])
    _write_tsv(d / "SST-2" / "test.tsv", [
        ["index", "sentence"],
        ["0", "uneasy mishmash of styles and genres ."],
        ["1", "this film 's relationship to actual tension is the same as what christmas-tree flocking "
              "in a spray can is to actual snow : a poor -- if durable -- imitation ."],
    ])
    _write_tsv(d / "diagnostic" / "diagnostic.tsv", [
        ["index", "sentence1", "sentence2"],
        ["0", "The cat sat on the mat.", "The cat did not sit on the mat."],
        ["1", "The cat did not sit on the mat.", "The cat sat on the mat."],
        ["2", "When you've got no snow, it's really hard to learn a snow sport.",
         "When you've got snow, it's really hard to learn a snow sport."],
    ])
    return d


# A tiny ALBERT over the real 30k SentencePiece vocabulary: fast to trace and train on CPU.
TINY_CONFIG = {"vocab_size": 30000, "embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 1,
               "num_attention_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
               "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}


@pytest.fixture
def tiny_config_file(tmp_path):
    import json

    path = tmp_path / "albert_config.json"
    path.write_text(json.dumps(TINY_CONFIG))
    return path


def _head(src: pathlib.Path, dst: pathlib.Path, rows: int) -> None:
    """The first `rows` data rows of a GLUE file (plus its header, if it has one: all but CoLA train/dev)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as f:
        lines = f.read().split(b"\n")
    dst.write_bytes(b"\n".join(lines[: rows + 1]) + b"\n")


@pytest.fixture
def glue_slices(tmp_path, shared):
    """Small slices of the real MRPC and STS-B files (train 48, dev 24, test 12 rows).

    MRPC's dev.tsv is its training slice: evaluating on what it trained on shows
    whether the whole path (reading, features, model, loss, optimizer, loop) learns.
    """
    d = tmp_path / "glue_slices"
    for task in ("MRPC", "STS-B"):
        for split, rows in (("train", 48), ("dev", 24), ("test", 12)):
            _head(shared("data", "glue", task, f"{split}.tsv"), d / task / f"{split}.tsv", rows)
    _head(shared("data", "glue", "MRPC", "train.tsv"), d / "MRPC" / "dev.tsv", 48)
    return d


@pytest.fixture
def spm_model(shared):
    return str(shared("data", "spm", "30k-clean.model"))


@pytest.fixture
def driver_errors(driver_cases):
    """``run(cases)``: run_classifier's ``driver_cases``."""
    return lambda cases: driver_cases("run_classifier", cases)
