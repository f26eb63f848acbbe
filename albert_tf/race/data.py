"""Reading RACE into examples, one per question, with errors that say file:line.

Layout: ``<data_dir>/RACE/{train,dev,test}/{middle,high}/``. The original's
`race_utils.RaceProcessor` reads only ``<level>/all.txt``; so does this reader when
the file exists (a folder that holds ``all.txt`` beside per-article files would
otherwise read every question twice). Without it, every ``*.txt`` of the level
folder is read (the CMU release has one file per article); the log says which.
Each line is one JSON object::

    {"article": str, "questions": [str, ...], "options": [[4 str], ...],
     "answers": ["A".."D", ...], "id": str}

Levels are read middle first, then high (the original's order); ``high_only`` /
``middle_only`` keep one. Files are read in name order (the original took the
directory listing's order, which the OS chooses). Blank lines are skipped (the
original failed on them). The original read the first four options of a question
and took ``ord(answer) - ord("A")`` as the label whatever the letter; here a
question must have exactly four options and an answer in A-D, or reading stops
with the file, line and field at fault.

Examples keep the file's raw text: lower-casing and the SentencePiece clean-up are
the tokenizer's business (`albert_tf.race.features`).
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Sequence

import tensorflow as tf
from absl import logging

from albert_tf.fileio import is_dir

LETTERS = "ABCD"
NUM_CHOICES = len(LETTERS)
LEVELS = ("middle", "high")
ALL_FILE = "all.txt"  # the one file per level the original reads
SPLITS = ("train", "dev", "test")
FIELDS = ("article", "questions", "options", "answers", "id")


class RaceDataError(ValueError):
    """A RACE folder or file is missing, or a line is malformed."""


@dataclasses.dataclass(frozen=True)
class RaceExample:
    """One question of an article with its four options.

    ``label`` is the index of the answer letter in ``LETTERS``. ``is_real`` is False
    only for padding examples (see `padding_example`).
    """

    id: str
    question_index: int
    level: str
    article: str
    question: str
    options: tuple[str, ...]
    label: int
    is_real: bool = True


def padding_example() -> RaceExample:
    """A fake example that fills a batch: encoded as all-zero inputs with label 0 and
    marked ``is_real=False`` so metrics and outputs leave it out (the original's
    `PaddingInputExample`, which it added on TPU only; never counted, never dropped)."""
    return RaceExample(id="", question_index=-1, level="", article="", question="",
                       options=("",) * NUM_CHOICES, label=0, is_real=False)


def pad_to_multiple(examples: Sequence[RaceExample], multiple: int) -> list[RaceExample]:
    """`examples` followed by as many padding examples as make the count a multiple
    of `multiple` (e.g. the eval batch size)."""
    if multiple < 1:
        raise ValueError(f"padding multiple must be >= 1, got {multiple}")
    shortfall = -len(examples) % multiple
    return [*examples, *(padding_example() for _ in range(shortfall))]


def levels_to_read(high_only: bool = False, middle_only: bool = False) -> tuple[str, ...]:
    """The levels `--high_only` / `--middle_only` select, in reading order."""
    if high_only and middle_only:
        raise RaceDataError("--high_only and --middle_only exclude each other (together they select no data)")
    return tuple(level for level in LEVELS
                 if not (level == "middle" and high_only) and not (level == "high" and middle_only))


def race_files(data_dir: str | os.PathLike, split: str, high_only: bool = False,
               middle_only: bool = False, announce: bool = True) -> list[tuple[str, str]]:
    """(level, path) of every file a split reads, in reading order; ``announce``: log what is read (once a
    run: the reading, not a second listing of the same files)."""
    if split not in SPLITS:
        raise RaceDataError(f"unknown RACE split {split!r}: expected one of {', '.join(SPLITS)}")
    files = []
    for level in levels_to_read(high_only, middle_only):
        folder = _join(_join(_join(os.fspath(data_dir), "RACE"), split), level)
        if not tf.io.gfile.isdir(folder):
            raise RaceDataError(f"RACE {split} data not found: expected the folder {folder} "
                                f"(--data_dir must hold RACE/{split}/{level}/*.txt)")
        names = sorted(n for n in tf.io.gfile.listdir(folder) if n.endswith(".txt"))
        if not names:
            raise RaceDataError(f"no .txt files in {folder} (expected RACE's all.txt or one file per article)")
        if ALL_FILE in names:
            names = [ALL_FILE]
            if announce:
                logging.info("RACE %s/%s: reading %s", split, level, _join(folder, ALL_FILE))
        elif announce:
            logging.info("RACE %s/%s: no %s, reading the %d per-article files in %s", split, level, ALL_FILE,
                         len(names), folder)
        paths = [_join(folder, n) for n in names]
        # A folder named like a data file read as no lines here, and failed only when the split's records were
        # built (for the test split, after the whole training) with the OS's words.
        for path in paths:
            if is_dir(path):
                raise RaceDataError(f"{path} is a folder: expected a RACE data file (one JSON article per line) "
                                    f"in {folder}; move or rename it")
        files.extend((level, path) for path in paths)
    return files


def _join(folder: str, name: str) -> str:
    return folder.rstrip("/") + "/" + name if "://" in folder else os.path.join(folder, name)


def read_race(data_dir: str | os.PathLike, split: str, high_only: bool = False,
              middle_only: bool = False) -> list[RaceExample]:
    """All examples of a split: per file, per line, per question, in file order."""
    examples: list[RaceExample] = []
    for level, path in race_files(data_dir, split, high_only, middle_only):
        examples.extend(read_race_file(path, level))
    if not examples:
        raise RaceDataError(f"RACE {split} under {os.fspath(data_dir)} holds no questions")
    return examples


def read_race_file(path: str, level: str) -> list[RaceExample]:
    examples: list[RaceExample] = []
    with tf.io.gfile.GFile(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            where = f"{path}:{number}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise RaceDataError(f"{where}: not UTF-8 text ({err})") from None
            if line.strip():
                examples.extend(parse_line(line, level, where))
    return examples


def parse_line(line: str, level: str, where: str) -> list[RaceExample]:
    """The examples of one article line; `where` ("file:line") prefixes every error."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise RaceDataError(f"{where}: not a JSON object ({err.msg} at column {err.colno})") from None
    if not isinstance(record, dict):
        raise RaceDataError(f"{where}: expected a JSON object with {', '.join(FIELDS)}, "
                            f"got {type(record).__name__}")
    missing = [name for name in FIELDS if name not in record]
    if missing:
        raise RaceDataError(f"{where}: missing field{'s' if len(missing) > 1 else ''} "
                            f"{', '.join(missing)} (a RACE line has {', '.join(FIELDS)})")
    article = _string(record["article"], "article", where)
    example_id = _string(record["id"], "id", where)
    questions, options, answers = (_list(record[name], name, where) for name in ("questions", "options", "answers"))
    if not len(questions) == len(options) == len(answers):
        raise RaceDataError(f"{where}: {len(questions)} questions, {len(options)} option lists and "
                            f"{len(answers)} answers (expected one option list and one answer per question)")
    examples = []
    for i, (question, choices, answer) in enumerate(zip(questions, options, answers)):
        question = _string(question, f"questions[{i}]", where)
        choices = _list(choices, f"options[{i}]", where)
        if len(choices) != NUM_CHOICES:
            raise RaceDataError(f"{where}: options[{i}] has {len(choices)} options, expected {NUM_CHOICES}")
        choices = tuple(_string(c, f"options[{i}][{j}]", where) for j, c in enumerate(choices))
        if not (isinstance(answer, str) and len(answer) == 1 and answer in LETTERS):
            raise RaceDataError(f"{where}: answers[{i}] is {answer!r}, expected one of {', '.join(LETTERS)}")
        examples.append(RaceExample(id=example_id, question_index=i, level=level, article=article,
                                    question=question, options=choices, label=LETTERS.index(answer)))
    return examples


def _string(value: Any, field: str, where: str) -> str:
    if not isinstance(value, str):
        raise RaceDataError(f"{where}: field {field} must be a string, got {type(value).__name__}")
    return value


def _list(value: Any, field: str, where: str) -> list:
    if not isinstance(value, list):
        raise RaceDataError(f"{where}: field {field} must be a list, got {type(value).__name__}")
    return value
