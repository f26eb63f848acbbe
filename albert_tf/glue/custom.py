"""A user's own labelled text as a classification (or regression) task: ``run_classifier.py
--task_name=custom`` with ``--train_file``/``--dev_file``/``--test_file`` in TSV, CSV or JSON Lines,
``--text_columns=a[,b]`` and ``--label_column``. No code: the task is defined by its data.

Reading (``read_rows``, on ``glue.tables``): the format by ``--file_format`` or the file's extension
(``.tsv``, ``.csv``, ``.jsonl``/``.json``); a TSV is split at tabs only, as the GLUE files (``"`` is
an ordinary character); a CSV is parsed strictly (RFC 4180 quoting); TSV and CSV have a header row
naming the columns. Every error names ``file:line``: a column that is not there (with the columns
found), a row with too many or too few fields, an unclosed quote (where it opened), an empty text,
an empty file, bytes that are not UTF-8, a label that is not a finite number where a number is
expected (``nan``, ``inf``), and a dev label the training file does not have. Test files need no
label column; what it holds is ignored (placeholders such as ``-1``).

Labels (``discover_labels``): the training file's distinct labels, sorted as strings; numeric
labels with a fractional value are taken as scores (regression, with Pearson/Spearman as for STS-B)
and the log warns so; ``--regression`` forces it. They are written to ``labels.txt`` in
``--output_dir`` (one per line; ``# regression`` for scores), which a predict-only run reads back,
and they go into the exported SavedModel, whose ``labels`` output then carries the label names.
With two labels, F1 and Matthews score ``--positive_label``, else ``default_positive_label``'s.
"""
from __future__ import annotations

import math
import os
from typing import Any, Iterator, Sequence

from absl import logging

from albert_tf.fileio import absolute, atomic_write_text, is_dir, is_file, read_text
from albert_tf.glue.processors import GlueProcessor, InputExample, SplitLayout, TaskSpec
from albert_tf.glue.tables import GlueDataError, header_rows
from albert_tf.weights.files import LABELS_FILE

TASK_NAME = "custom"
REGRESSION_MARK = "# regression"
FORMATS = {".tsv": "tsv", ".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl"}
# --key_metric values -> the metric names of glue.metrics
KEY_METRICS = {"accuracy": "eval_accuracy", "f1": "f1", "matthews": "matthew_corr", "pearson": "pearson",
               "spearman": "spearman"}
# Labels that name the positive class of a binary task (default_positive_label), lower-cased.
POSITIVE_NAMES = ("1", "true", "yes", "pos", "positive")
NEGATION_PREFIXES = ("not_", "not-", "not ", "non_", "non-", "non")

# In the feature caches' key: features cached by an older reader are rebuilt, not reused. 2: TSV rows
# split on tabs as the original's GLUE reader (1 read them with CSV quote rules). Bump on any change
# to how rows are read (files holding a lone \r, read otherwise before, get their own key in features).
READER_VERSION = 2


def file_format(path: str, given: str | None = None) -> str:
    if given:
        return given
    extension = os.path.splitext(path)[1].lower()
    if extension not in FORMATS:
        raise GlueDataError(f"{path}: cannot tell the format from the extension {extension or '(none)'!r}; "
                            f"name the file .tsv, .csv or .jsonl, or pass --file_format=tsv|csv|jsonl")
    return FORMATS[extension]


def read_rows(path: str, fmt: str, columns: Sequence[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yields (line number, {column: value}) for each row, checking that ``columns`` are there."""
    if not is_file(path):
        raise GlueDataError(f"{path}: " + ("is a folder; expected a file" if is_dir(path) else "file not found"))
    seen = False
    for line, row in header_rows(path, fmt):
        seen = True
        missing = [c for c in columns if c not in row]
        if missing:
            raise GlueDataError(f"{path}:{line}: no column {missing[0]!r}; the columns found are "
                                f"{', '.join(map(repr, row)) or 'none'}")
        yield line, row
    if not seen:  # a JSON Lines file with no objects (a TSV/CSV with only its header fails in header_rows)
        raise GlueDataError(f"{path}:1: empty file: no rows of data")


def _text(row: dict, column: str, where: str) -> str:
    value = row[column]
    if not isinstance(value, str) or not value.strip():
        raise GlueDataError(f"{where}: empty text in column {column!r}" if isinstance(value, str) or value is None
                            else f"{where}: column {column!r} holds {type(value).__name__}, expected text")
    return value


def _label(row: dict, column: str, where: str) -> str:
    value = row[column]
    if isinstance(value, bool) or not isinstance(value, (str, int, float)) or str(value).strip() == "":
        raise GlueDataError(f"{where}: empty or invalid label in column {column!r}: {value!r}")
    text = str(value).strip()
    if "\n" in text or "\t" in text:
        raise GlueDataError(f"{where}: label {text!r} holds a tab or line break")
    if _is_number(text) and not math.isfinite(float(text)):
        raise GlueDataError(f"{where}: label {text!r} is not a finite number; a label is a class name or a "
                            f"score")
    return text


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class CustomProcessor(GlueProcessor):
    """Reads a user's files with named columns (see the module docstring)."""

    def __init__(self, files: dict[str, str | None], text_columns: Sequence[str], label_column: str,
                 labels: tuple[str, ...] | None, key_metric: str | None = None, fmt: str | None = None,
                 positive_label: str | None = None):
        if not 1 <= len(text_columns) <= 2:
            raise ValueError(f"--text_columns: one column or a pair, got {list(text_columns)}")
        self.files = {split: path for split, path in files.items() if path}
        self.text_columns = tuple(text_columns)
        self.label_column = label_column
        self.formats = {split: file_format(path, fmt) for split, path in self.files.items()}
        if positive_label is None and labels is not None and len(labels) == 2:
            positive_label = default_positive_label(labels)[0]
        super().__init__(custom_spec(self.files, len(text_columns) == 2, labels, key_metric, positive_label))

    def save_alongside(self, output_dir: str) -> None:
        """``labels.txt``: the labels a predict-only run reads back."""
        write_labels(output_dir, self.spec.labels)

    def cache_settings(self) -> dict[str, Any]:
        return {"text_columns": list(self.text_columns), "label_column": self.label_column,
                "labels": list(self.spec.labels or []), "formats": self.formats, "reader": READER_VERSION}

    def iter_examples(self, data_dir: str | os.PathLike, split: str) -> Iterator[InputExample]:
        path = self.data_file(data_dir, split)
        labelled = split != "test"  # a test file's label column, if any, is not read (it may hold -1)
        for index, (line, row) in enumerate(read_rows(path, self.formats[split], self.text_columns
                                                      + ((self.label_column,) if labelled else ()))):
            where = f"{path}:{line}"
            texts = [_text(row, column, where) for column in self.text_columns]
            label = self._checked_label(_label(row, self.label_column, where), where) if labelled else None
            yield InputExample(f"{split}-{index}", texts[0], texts[1] if len(texts) > 1 else None, label)

    def _checked_label(self, text: str, where: str) -> str | float:
        if self.spec.is_regression:
            if not _is_number(text):
                raise GlueDataError(f"{where}: label {text!r} is not a number (the task is a regression)")
            return float(text)
        if text not in self._label_set:
            raise GlueDataError(f"{where}: label {text!r} is not among the training file's labels "
                                f"{list(self.spec.labels)}")
        return text

    def check_files(self, data_dir: str | os.PathLike, splits: Sequence[str]) -> None:
        """Reads every row of the splits a run needs, so bad input stops it before anything is written."""
        for split in splits:
            if split not in self.files:
                raise ValueError(f"--task_name={TASK_NAME} needs --{_FLAG[split]} for this run")
            for _ in self.iter_examples("", split):
                pass


_FLAG = {"train": "train_file", "dev": "dev_file", "test": "test_file"}


def is_pair(spec: TaskSpec) -> bool:
    """Whether the task's examples have a second text."""
    return next(iter(spec.splits.values())).text_b is not None


def default_positive_label(labels: Sequence[str]) -> tuple[str, str]:
    """(the positive class of two labels, why): the label the other one negates (``duplicate`` against
    ``not_duplicate``), else the one that names a positive (``1``, ``true``, ``yes``, ``pos``,
    ``positive``), else the one that sorts second (class id 1, as for GLUE's ``0``/``1``)."""
    first, second = sorted(labels)
    for label, other in ((first, second), (second, first)):
        if any(other.lower() == prefix + label.lower() for prefix in NEGATION_PREFIXES):
            return label, f"{other!r} negates it"
    named = [label for label in (first, second) if label.lower() in POSITIVE_NAMES]
    if len(named) == 1:
        return named[0], "it names a positive"
    return second, "it sorts second; --positive_label picks the other"


def custom_spec(files: dict[str, str], pair: bool, labels: tuple[str, ...] | None, key_metric: str | None,
                positive_label: str | None = None) -> TaskSpec:
    """The TaskSpec of a user's data: its files (absolute paths), label strings (None: regression), metrics."""
    if labels is None:
        metrics, default = ("pearson", "spearman", "MSE"), "pearson"
    else:
        metrics = ("eval_accuracy", "f1", "matthew_corr") if len(labels) == 2 else ("eval_accuracy",)
        default = "eval_accuracy"
    key = KEY_METRICS.get(key_metric, key_metric) if key_metric else default
    if key not in metrics:
        kind = "a regression" if labels is None else f"{len(labels)} labels"
        allowed = [name for name, metric in KEY_METRICS.items() if metric in metrics]
        raise ValueError(f"--key_metric={key_metric}: not available for this data ({kind}); use one of {allowed}")
    layout = {split: SplitLayout(absolute(path), True, 0, 1 if pair else None,
                                 None if split == "test" else 1) for split, path in files.items()}
    return TaskSpec(name=TASK_NAME, folder="", labels=labels, splits=layout, metrics=metrics, key_metric=key,
                    submission_file="custom.tsv", positive_label=positive_label)


def discover_labels(train_file: str | None, fmt: str | None, label_column: str, regression: bool,
                    saved_dirs: Sequence[str]) -> tuple[str, ...] | None:
    """The labels (None: scores) from the training file, else from a ``labels.txt`` in ``saved_dirs``."""
    if train_file:
        values = {_label(row, label_column, f"{train_file}:{line}")
                  for line, row in read_rows(train_file, file_format(train_file, fmt), (label_column,))}
        numeric = all(_is_number(v) for v in values)
        if regression or (numeric and any(not float(v).is_integer() for v in values)):
            if not numeric:
                bad = sorted(v for v in values if not _is_number(v))[0]
                raise GlueDataError(f"{train_file}: --regression needs numeric labels, found {bad!r}")
            if not regression:
                logging.warning("%s: the labels of column %r are numbers with fractions: training a regression "
                             "(Pearson/Spearman); integer labels would be classes", train_file, label_column)
            return None
        if len(values) < 2:
            raise GlueDataError(f"{train_file}: column {label_column!r} has one label only ({sorted(values)}); "
                                f"classification needs two or more")
        labels = tuple(sorted(values))
        logging.info("%s: %d labels: %s", train_file, len(labels), ", ".join(labels))
        return labels
    for folder in saved_dirs:
        text = read_text(os.path.join(folder, LABELS_FILE))
        if text is not None:
            lines = [line for line in text.splitlines() if line]
            if REGRESSION_MARK in lines:
                return None
            if len(lines) < 2:  # what the training run wrote has two labels or more
                raise GlueDataError(f"{os.path.join(folder, LABELS_FILE)} holds {len(lines)} label(s); expected the "
                                    f"training run's labels, one per line in class-id order (two or more)")
            return tuple(lines)
    raise ValueError(f"--task_name={TASK_NAME} without --train_file needs the labels of the training run: no "
                     f"{LABELS_FILE} in {', '.join(saved_dirs)} (pass --train_file, or the training run's "
                     f"--output_dir or --init_checkpoint)")


def write_labels(output_dir: str, labels: tuple[str, ...] | None) -> str:
    """``labels.txt``: one label per line in class-id order, or the regression mark.

    One already there is kept when it says the same, and refused when it does not: it is the user's own
    file or a run's on other labels, whose checkpoints this run's head does not fit."""
    text = REGRESSION_MARK + "\n" if labels is None else "".join(label + "\n" for label in labels)
    path = os.path.join(output_dir, LABELS_FILE)
    try:
        there = read_text(path)
    except UnicodeDecodeError:
        there = ""  # not text of ours
    if there is None:
        return atomic_write_text(path, text)
    if there != text:
        shown = "regression" if labels is None else ", ".join(labels)
        raise GlueDataError(f"{path} exists and does not list this run's labels ({shown}); it is another "
                            f"file or a run on other labels: pick another --output_dir or move it away")
    return path
