"""Reading SQuAD 1.1 / 2.0 JSON files into examples, with errors that say where.

Pure Python for local files (the evaluator uses it too); remote paths (``gs://``)
are read through ``tf.io.gfile`` (`albert_tf.fileio.read_text`).

Version rule (one place, used by the evaluator and the driver): a top-level
``"version"`` key decides when it names 1.x or 2.x (``"1.1"``, ``"v2.0"``);
otherwise the data is 2.0 when any question carries an ``is_impossible`` key,
else 1.1. The shipped 1.1 files have no version key; 2.0 files have both.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterator

from albert_tf.fileio import read_text


class SquadFormatError(ValueError):
    """A SQuAD file is missing, not JSON, or has a malformed entry."""


@dataclasses.dataclass
class SquadExample:
    """One question with its context.

    ``start_position`` is the character offset of the labelled answer in
    ``paragraph_text`` (training only; None at prediction). ``answers`` holds all
    gold answer texts when the file has them (used by tests and evaluation).
    """

    qas_id: str
    question_text: str
    paragraph_text: str
    orig_answer_text: str | None = None
    start_position: int | None = None
    is_impossible: bool = False
    answers: list[str] = dataclasses.field(default_factory=list)


def load_json(path: str | os.PathLike, what: str = "SQuAD file") -> Any:
    """Parses a JSON file; a missing file or bad JSON raises SquadFormatError naming it."""
    path = os.fspath(path)
    try:
        text = read_text(path)  # gs:// and other remote paths through tf.io.gfile
        if text is None:
            raise SquadFormatError(f"{what} not found: {path}")
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SquadFormatError(
            f"{what} {path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except UnicodeDecodeError as e:
        raise SquadFormatError(f"{what} {path} is not UTF-8 text: {e}") from e


def load_squad(path: str | os.PathLike) -> dict:
    """Loads a SQuAD dataset file and checks its top level ({"data": [...]})."""
    dataset = load_json(path)
    if not isinstance(dataset, dict) or not isinstance(dataset.get("data"), list):
        raise SquadFormatError(
            f"SQuAD file {os.fspath(path)}: expected a JSON object with a 'data' list of articles")
    return dataset


def is_version_2(dataset: dict) -> bool:
    """True for SQuAD 2.0 data (see the module docstring for the rule)."""
    version = str(dataset.get("version", "")).strip().lower().lstrip("v")
    if version[:1] == "2":
        return True
    if version[:1] == "1":
        return False
    return any("is_impossible" in qa for _, _, qa in iter_questions(dataset, "<dataset>"))


def version_mismatch(dataset: dict, flag: str, path: str, version_2: bool) -> str | None:
    """Why the file ``--flag=path`` does not match ``--version_2_with_negative`` (``version_2``), else None.
    A 1.1-looking file under 2.0 counts only when it says so (a version key) or every question has answers:
    a 2.0 file to predict may carry no labels at all."""
    questions = [qa for _, _, qa in iter_questions(dataset, path)]
    if is_version_2(dataset) and not version_2:
        impossible = sum(bool(qa.get("is_impossible")) for qa in questions)
        effect = ("learns its unanswerable questions as answers at [CLS]" if flag == "train_file"
                  else "answers every question")
        return (f"--{flag}={path} is SQuAD 2.0 ({impossible} of {len(questions)} questions unanswerable) but "
                f"--version_2_with_negative is not set: the SQuAD 1.1 head {effect}")
    if version_2 and not is_version_2(dataset) and ("version" in dataset or all(qa.get("answers") for qa in questions)):
        return (f"--{flag}={path} is SQuAD 1.1 (no question is unanswerable) but --version_2_with_negative is "
                f"set: the SQuAD 2.0 head is used on it")
    return None


def iter_questions(dataset: dict, source: str) -> Iterator[tuple[dict, dict, dict]]:
    """Yields (article, paragraph, qa) for every question, checking the structure.

    Errors name the file, the article and paragraph position, and the question id.
    """
    articles = dataset.get("data") if isinstance(dataset, dict) else None
    if not isinstance(articles, list):
        raise SquadFormatError(f"{source}: expected a JSON object with a 'data' list of articles")
    for a, article in enumerate(articles):
        where_a = f"{source}: article {a}"
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            raise SquadFormatError(f"{where_a}: expected an object with a 'paragraphs' list")
        for p, paragraph in enumerate(article["paragraphs"]):
            where_p = f"{where_a} ({article.get('title', '?')!s}), paragraph {p}"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("qas"), list):
                raise SquadFormatError(f"{where_p}: expected an object with a 'qas' list")
            for q, qa in enumerate(paragraph["qas"]):
                if not isinstance(qa, dict) or not isinstance(qa.get("id"), str):
                    raise SquadFormatError(f"{where_p}, question {q}: missing string 'id'")
                yield article, paragraph, qa


def load_questions(path: str | os.PathLike) -> dict:
    """``load_squad``, refusing a file without questions as GLUE and RACE refuse an empty split (training
    on it counted steps from an empty cache, predicting it failed on the empty output)."""
    dataset = load_squad(path)
    if next(iter_questions(dataset, os.fspath(path)), None) is None:
        raise SquadFormatError(f"SQuAD file {os.fspath(path)} holds no questions")
    return dataset


def _bad(source: str, qid: str, message: str) -> SquadFormatError:
    return SquadFormatError(f"{source}: question id {qid!r}: {message}")


def answer_texts(qa: dict, source: str) -> list[str]:
    """The gold answer texts of a question ([] when unanswerable or unlabelled)."""
    answers = qa.get("answers", [])
    if not isinstance(answers, list):
        raise _bad(source, qa["id"], "'answers' must be a list")
    texts = []
    for k, answer in enumerate(answers):
        if not isinstance(answer, dict) or not isinstance(answer.get("text"), str):
            raise _bad(source, qa["id"], f"answer {k} must be an object with a string 'text'")
        texts.append(answer["text"])
    return texts


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


def read_squad_examples(path: str | os.PathLike, is_training: bool) -> list[SquadExample]:
    """Reads every question of a SQuAD file, in file order.

    Training needs a labelled answer (the first of ``answers``, as the original
    takes the only one) whose text is the context's at its ``answer_start``
    (the original trained on the span there, whatever the text), unless
    ``is_impossible``. Prediction needs only id, question and context.
    """
    source = os.fspath(path)
    dataset = load_questions(path)
    examples = []
    seen: set[str] = set()
    for _, paragraph, qa in iter_questions(dataset, source):
        qid = qa["id"]
        if qid in seen:
            raise _bad(source, qid, "duplicate question id")
        seen.add(qid)
        context = paragraph.get("context")
        if not isinstance(context, str):
            raise _bad(source, qid, "its paragraph has no string 'context'")
        question = qa.get("question")
        if not isinstance(question, str):
            raise _bad(source, qid, "missing string 'question'")
        impossible = qa.get("is_impossible", False)
        if not isinstance(impossible, bool):
            raise _bad(source, qid, f"'is_impossible' must be true or false, got {impossible!r}")
        texts = answer_texts(qa, source)
        example = SquadExample(qid, question, context, is_impossible=impossible, answers=texts)
        if is_training and not impossible:
            if not texts:
                raise _bad(source, qid, "training needs an answer (or is_impossible: true)")
            start = qa["answers"][0].get("answer_start")
            if not isinstance(start, int) or isinstance(start, bool) or not 0 <= start < len(context):
                raise _bad(source, qid, f"answer_start {start!r} is not a character offset "
                                        f"inside its context (length {len(context)})")
            if not texts[0]:
                raise _bad(source, qid, "training answer text is empty")
            if start + len(texts[0]) > len(context):  # the span's end is an index into the context too
                raise _bad(source, qid, f"answer text ({len(texts[0])} characters from answer_start {start}) "
                                        f"runs past the end of its context (length {len(context)})")
            found = context[start:start + len(texts[0])]
            if found != texts[0]:  # the model would learn the span at answer_start, not this text
                raise _bad(source, qid, f"answer text {_clip(texts[0])!r} is not at answer_start {start}: "
                                        f"the context has {_clip(found)!r} there")
            example.orig_answer_text = texts[0]
            example.start_position = start
        elif is_training:
            example.orig_answer_text = ""
            example.start_position = -1
        examples.append(example)
    return examples
