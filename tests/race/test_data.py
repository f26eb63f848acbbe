"""Reading RACE folders: one example per question, levels and files in order, level
selection, padding examples, and one clear file:line error per malformed input."""
import os

import pytest

from albert_tf.race import data
from albert_tf.race.data import RaceDataError, RaceExample


def test_reads_every_question_of_every_line_in_order(race_dir, make_record):
    two = make_record(article="Ann lives in Rome. Ann has a dog.", id="middle7.txt",
                      questions=["Where does Ann live?", "Ann has a _ ."],
                      options=[["Oslo", "Rome", "Lima", "Pisa"], ["cat", "cow", "owl", "dog"]], answers=["B", "D"])
    one = make_record(id="middle8.txt")
    race_dir("train", "middle", [two, "", one])  # the blank line is skipped
    race_dir("train", "high", [make_record(id="high2.txt", answers=["C"])], name="2.txt")
    root = race_dir("train", "high", [make_record(id="high10.txt", answers=["D"])], name="10.txt")

    examples = data.read_race(root, "train")

    assert [(e.level, e.id, e.question_index, e.label) for e in examples] == [
        ("middle", "middle7.txt", 0, 1), ("middle", "middle7.txt", 1, 3), ("middle", "middle8.txt", 0, 0),
        ("high", "high10.txt", 0, 3), ("high", "high2.txt", 0, 2)]  # files in name order: 10.txt < 2.txt
    assert examples[1] == RaceExample(id="middle7.txt", question_index=1, level="middle",
                                      article="Ann lives in Rome. Ann has a dog.", question="Ann has a _ .",
                                      options=("cat", "cow", "owl", "dog"), label=3)
    assert all(e.is_real for e in examples)


def test_reads_every_txt_file_and_ignores_others(race_dir, make_record):
    race_dir("dev", "middle", [make_record(id="a")], name="1.txt")
    race_dir("dev", "middle", [make_record(id="b")], name="notes.json")
    root = race_dir("dev", "high", [make_record(id="c")])
    assert [e.id for e in data.read_race(root, "dev")] == ["a", "c"]


def test_all_txt_is_read_alone_when_present(race_dir, make_record, caplog):
    """A release folder with all.txt beside the per-article files: only all.txt, as the
    original (reading both would see every question twice); the log says which."""
    race_dir("dev", "middle", [make_record(id="a"), make_record(id="b")])  # all.txt
    race_dir("dev", "middle", [make_record(id="a")], name="a.txt")
    race_dir("dev", "middle", [make_record(id="b")], name="b.txt")
    root = race_dir("dev", "high", [make_record(id="c")], name="c.txt")
    with caplog.at_level("INFO"), caplog.at_level("INFO", logger="absl"):
        examples = data.read_race(root, "dev")
    assert [e.id for e in examples] == ["a", "b", "c"]
    assert [path.rsplit("/", 1)[1] for _, path in data.race_files(root, "dev")] == ["all.txt", "c.txt"]
    logged = caplog.text
    assert "RACE dev/middle: reading" in logged and "middle/all.txt" in logged
    assert "RACE dev/high: no all.txt, reading the 1 per-article files" in logged


def test_reads_from_a_remote_filesystem(make_record):
    """gs:// inputs go through tf.io.gfile; TensorFlow's ram:// filesystem stands in for a bucket."""
    import json
    import uuid

    import tensorflow as tf

    root = f"ram://race-{uuid.uuid4().hex}"
    for level, ids in (("middle", ["m1", "m2"]), ("high", ["h1"])):
        folder = f"{root}/RACE/test/{level}"
        tf.io.gfile.makedirs(folder)
        for name in ids:
            with tf.io.gfile.GFile(f"{folder}/{name}.txt", "w") as f:
                f.write(json.dumps(make_record(id=name)) + "\n")
    assert [(e.level, e.id) for e in data.read_race(root, "test")] == [("middle", "m1"), ("middle", "m2"),
                                                                       ("high", "h1")]
    with pytest.raises(RaceDataError, match=f"{root}/RACE/dev/middle"):
        data.read_race(root, "dev")


@pytest.mark.parametrize("high_only, middle_only, levels", [
    (False, False, ["middle", "high"]), (True, False, ["high"]), (False, True, ["middle"])])
def test_level_selection(race_dir, make_record, high_only, middle_only, levels):
    race_dir("test", "middle", [make_record(id="m")])
    root = race_dir("test", "high", [make_record(id="h")])
    examples = data.read_race(root, "test", high_only=high_only, middle_only=middle_only)
    assert [e.level for e in examples] == levels


def test_high_only_with_middle_only_is_refused(race_dir, make_record):
    root = race_dir("train", "high", [make_record()])
    with pytest.raises(RaceDataError, match="--high_only and --middle_only"):
        data.read_race(root, "train", high_only=True, middle_only=True)


def test_a_selected_level_may_not_be_missing(race_dir, make_record):
    root = race_dir("train", "middle", [make_record()])
    assert len(data.read_race(root, "train", middle_only=True)) == 1
    with pytest.raises(RaceDataError) as err:
        data.read_race(root, "train")
    message = str(err.value)
    assert "RACE/train/high" in message.replace("\\", "/") and "--data_dir" in message


def test_missing_split_folder_names_the_folder(tmp_path):
    with pytest.raises(RaceDataError, match="RACE dev data not found"):
        data.read_race(tmp_path, "dev")


def test_folder_without_txt_files(race_dir, make_record):
    root = race_dir("train", "middle", [make_record()], name="all.json")
    with pytest.raises(RaceDataError, match=r"no \.txt files in .*middle"):
        data.read_race(root, "train", middle_only=True)


def test_files_without_questions(race_dir):
    root = race_dir("train", "middle", [""])
    with pytest.raises(RaceDataError, match="holds no questions"):
        data.read_race(root, "train", middle_only=True)


@pytest.mark.parametrize("name", ["x.txt", "all.txt"])
def test_a_folder_named_like_a_data_file_is_refused_when_listed(race_dir, make_record, name):
    """GFile reads a folder as no lines: it was skipped silently here and failed later, when the split's
    records were hashed (the test split's after the whole training), with the OS's "Is a directory"."""
    root = race_dir("test", "high", [make_record()], name="0.txt")
    folder = os.path.join(root, "RACE", "test", "high")
    os.mkdir(os.path.join(folder, name))
    with pytest.raises(RaceDataError) as err:
        data.race_files(root, "test", high_only=True)
    assert str(err.value) == (f"{os.path.join(folder, name)} is a folder: expected a RACE data file (one JSON "
                              f"article per line) in {folder}; move or rename it")
    with pytest.raises(RaceDataError, match="is a folder"):
        data.read_race(root, "test", high_only=True)


def test_unknown_split(tmp_path):
    with pytest.raises(RaceDataError, match="unknown RACE split 'valid'"):
        data.read_race(tmp_path, "valid")


BAD_LINES = {
    "not json": ('{"article": "x",', "not a JSON object"),
    "not an object": ("[1, 2]", "expected a JSON object with article, questions, options, answers, id, got list"),
    "missing fields": ('{"article": "x", "questions": [], "options": []}', "missing fields answers, id"),
    "missing field": ('{"article": "x", "questions": [], "options": [], "answers": []}', "missing field id "),
    "article not text": (dict(article=["x"]), "field article must be a string, got list"),
    "id not text": (dict(id=7), "field id must be a string, got int"),
    "questions not a list": (dict(questions="Why?"), "field questions must be a list, got str"),
    "question not text": (dict(questions=[None]), r"field questions\[0\] must be a string, got NoneType"),
    "counts differ": (dict(answers=["A", "B"]), "1 questions, 1 option lists and 2 answers"),
    "three options": (dict(options=[["a", "b", "c"]]), r"options\[0\] has 3 options, expected 4"),
    "five options": (dict(options=[["a", "b", "c", "d", "e"]]), r"options\[0\] has 5 options, expected 4"),
    "option not text": (dict(options=[["a", "b", 3, "d"]]), r"field options\[0\]\[2\] must be a string, got int"),
    "letter E": (dict(answers=["E"]), r"answers\[0\] is 'E', expected one of A, B, C, D"),
    "lower-case letter": (dict(answers=["a"]), r"answers\[0\] is 'a'"),
    "two letters": (dict(answers=["AB"]), r"answers\[0\] is 'AB'"),
    "answer index": (dict(answers=[0]), r"answers\[0\] is 0"),
    "not UTF-8": (b'{"article": "caf\xe9"}', "not UTF-8 text"),
}


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_malformed_line_is_reported_with_file_and_line(race_dir, make_record, case):
    bad, expected = BAD_LINES[case]
    if isinstance(bad, dict):
        bad = make_record(**bad)
    root = race_dir("train", "middle", [make_record(), "", bad, make_record()])
    with pytest.raises(RaceDataError, match=expected) as err:
        data.read_race(root, "train", middle_only=True)
    where = str(err.value).split(": ", 1)[0].replace("\\", "/")
    assert where.endswith("RACE/train/middle/all.txt:3")


def test_padding_examples_fill_to_a_multiple_and_are_marked(race_dir, make_record):
    root = race_dir("dev", "middle", [make_record(id=str(i)) for i in range(7)])
    examples = data.read_race(root, "dev", middle_only=True)
    padded = data.pad_to_multiple(examples, 4)
    assert len(padded) == 8 and padded[:7] == examples
    assert [e.is_real for e in padded] == [True] * 7 + [False]
    assert padded[7].label == 0 and len(padded[7].options) == 4
    assert data.pad_to_multiple(examples, 7) == examples and data.pad_to_multiple(examples, 1) == examples
    assert len(data.pad_to_multiple(examples, 5)) == 10
    with pytest.raises(ValueError, match="padding multiple must be >= 1"):
        data.pad_to_multiple(examples, 0)


def test_a_run_says_once_which_files_a_split_reads(race_dir, make_record, tokenizer, tmp_path, monkeypatch):
    """The task reads a split when it checks the splits, and lists its files again to cache its features:
    each "RACE train/<level>: reading ..." line came twice."""
    from albert_tf.race.task import RaceTask

    for level in ("middle", "high"):
        root = race_dir("train", level, [make_record(id=f"{level}1.txt")])
    lines = []
    monkeypatch.setattr(data.logging, "info", lambda message, *args: lines.append(message % args))
    task = RaceTask(data_dir=root, output_dir=str(tmp_path / "out"), tokenizer=tokenizer, tokenizer_id="t",
                    max_seq_length=64, max_qa_length=32)
    task.check_splits(["train"])
    assert task.load_split("train").cached.num_records == 2
    reading = [line for line in lines if ": reading " in line]
    assert reading == [f"RACE train/{level}: reading {os.path.join(root, 'RACE', 'train', level, 'all.txt')}"
                       for level in ("middle", "high")]
