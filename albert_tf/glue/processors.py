"""GLUE task readers: the TSV files exactly as distributed, one table of task facts.

The original has one hand-written processor class per task; they differ only in
file names, column positions, header or not, and label list. Here each task is a
`TaskSpec` (data) read by one `GlueProcessor` (code), so a fact lives in one place.

Reading rules (those of the GLUE distribution and the original's `_read_tsv`; `glue.tables.tsv_rows`,
which also reads the TSVs of `--task_name=custom`):
- UTF-8, a leading byte-order mark is dropped (MRPC has one);
- tab-separated, no quoting at all (`"` is an ordinary character: csv QUOTE_NONE);
- rows end at `\\n` only, never at other Unicode line breaks that sit inside GLUE
  sentences; every `\\r` is dropped wherever it is, as the original's reader (`tf.gfile`)
  did, so a lone one joins the text around it, with a warning naming its lines (a file
  saved with CR-only line endings is one line: its error says so); a NUL character is
  an error naming its line (a file saved as UTF-16), as the original's csv reader's;
- empty lines carry no data and are skipped.

Where the original crashed (an unknown label is a KeyError far away, a short row an
IndexError) or read the wrong column, a malformed row here is a `GlueDataError` naming the
file, the line number and the offending value. One exception keeps the original's numbers:
its QQP train and dev reader skips rows too short to hold both questions and the label
(GLUE's 2018 QQP train file had such rows: a question broken by a newline), so ours skips them too,
with a warning naming the file, their count and their lines (`SplitLayout.skip_short_rows`).

Texts are kept raw: the tokenizer applies `preprocess_text` (lower-casing) itself. Labels are matched
as the original's `process_text` left them: `preprocess_text(label, lower=do_lower_case)`.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Iterator, Sequence

from absl import logging

from albert_tf.fileio import is_dir, is_file
from albert_tf.glue.tables import GlueDataError, cr_only_hint, tsv_rows
from albert_tf.tokenization.text import preprocess_text

SPLITS = ("train", "dev", "test")

MNLI_LABELS = ("contradiction", "entailment", "neutral")
NLI2_LABELS = ("entailment", "not_entailment")
BINARY_LABELS = ("0", "1")


@dataclasses.dataclass(frozen=True)
class InputExample:
    """One row of a GLUE file. `label` is a label string, a float (STS-B) or None (test)."""

    guid: str
    text_a: str
    text_b: str | None = None
    label: str | float | None = None


@dataclasses.dataclass(frozen=True)
class SplitLayout:
    """Where one split of a task lives and which columns hold what.

    `guid_column` None means the guid is `"<split>-<line index>"` as the original
    makes it (line index counted from 0 over all rows, header included).
    `label_column` None means the split has no labels (test files). `num_columns`
    is checked only for files without a header; a file with a header must have
    every row as wide as its header, except that `skip_short_rows` skips (with a
    warning) rows too short for the columns read, as the original's QQP reader does.
    """

    file: str
    has_header: bool
    text_a: int
    text_b: int | None = None
    label_column: int | None = None
    guid_column: int | None = 0
    num_columns: int | None = None
    skip_short_rows: bool = False


# What every task reports besides its own metrics (eval_results.txt, and so model.ckpt-best).
COMMON_METRICS = ("eval_loss", "num_examples")
CLASSIFICATION = ("eval_accuracy",)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """Everything task-specific: files, columns, labels, metrics, key metric, GLUE file name.

    `metrics` are the names `glue.metrics` computes for the task (beyond `COMMON_METRICS`);
    `key_metric`, which selects model.ckpt-best, must be one of them: checked here, at
    import, rather than after the first evaluation of a long run.
    """

    name: str
    folder: str
    labels: tuple[str, ...] | None  # None: regression (STS-B)
    splits: dict[str, SplitLayout]
    metrics: tuple[str, ...]
    key_metric: str
    submission_file: str  # the name the GLUE server expects for this task's predictions
    # The class F1 and Matthews correlation score (binary tasks); None: class id 1, the original's.
    positive_label: str | None = None

    def __post_init__(self):
        if self.key_metric not in self.metrics + COMMON_METRICS:
            raise ValueError(f"GLUE task {self.name}: key_metric {self.key_metric!r} is not among its metrics "
                             f"{list(self.metrics + COMMON_METRICS)}")
        binary = self.labels is not None and len(self.labels) == 2
        if self.positive_label is not None and not (binary and self.positive_label in self.labels):
            raise ValueError(f"--positive_label={self.positive_label}: {self.name} has "
                             + (f"the labels {list(self.labels)}" if binary else "not two labels"))

    @property
    def positive_id(self) -> int:
        """The class id of the positive class (binary tasks)."""
        return 1 if self.positive_label is None else self.labels.index(self.positive_label)

    @property
    def is_regression(self) -> bool:
        return self.labels is None

    @property
    def num_labels(self) -> int:
        return 1 if self.labels is None else len(self.labels)

    @property
    def is_pair(self) -> bool:
        """Whether the task's examples have a second text (its test split decides)."""
        layout = self.splits.get("test") or next(iter(self.splits.values()))
        return layout.text_b is not None


def _pair(file: str, labelled: bool) -> SplitLayout:
    """The common layout: header, index in column 0, two texts in 1 and 2, label last."""
    return SplitLayout(file, True, text_a=1, text_b=2, label_column=-1 if labelled else None)


def _mnli(name: str, dev: str, test: str, submission: str) -> TaskSpec:
    # MNLI train has 12 columns, dev 16 (five annotator labels), test 10: texts are
    # always columns 8 and 9 and the gold label is the last column.
    return TaskSpec(
        name=name,
        folder="MNLI",
        labels=MNLI_LABELS,
        splits={
            "train": SplitLayout("train.tsv", True, 8, 9, label_column=-1),
            "dev": SplitLayout(dev, True, 8, 9, label_column=-1),
            "test": SplitLayout(test, True, 8, 9),
        },
        metrics=CLASSIFICATION,
        key_metric="eval_accuracy",
        submission_file=submission,
    )


TASKS: dict[str, TaskSpec] = {
    spec.name: spec
    for spec in (
        TaskSpec(
            name="cola",
            folder="CoLA",
            labels=BINARY_LABELS,
            splits={
                # train/dev: source, label, original label, sentence; no header.
                "train": SplitLayout("train.tsv", False, 3, None, 1, None, num_columns=4),
                "dev": SplitLayout("dev.tsv", False, 3, None, 1, None, num_columns=4),
                "test": SplitLayout("test.tsv", True, 1),
            },
            metrics=("eval_accuracy", "matthew_corr"),
            key_metric="matthew_corr",
            submission_file="CoLA.tsv",
        ),
        _mnli("mnli", "dev_matched.tsv", "test_matched.tsv", "MNLI-m.tsv"),
        _mnli("mismnli", "dev_mismatched.tsv", "test_mismatched.tsv", "MNLI-mm.tsv"),
        TaskSpec(
            name="mrpc",
            folder="MRPC",
            labels=BINARY_LABELS,
            splits={
                # Quality, #1 ID, #2 ID, #1 String, #2 String (UTF-8 BOM on the header).
                "train": SplitLayout("train.tsv", True, 3, 4, 0, None),
                "dev": SplitLayout("dev.tsv", True, 3, 4, 0, None),
                "test": SplitLayout("test.tsv", True, 3, 4),
            },
            metrics=("eval_accuracy", "f1"),
            key_metric="eval_accuracy",
            submission_file="MRPC.tsv",
        ),
        TaskSpec(
            name="rte",
            folder="RTE",
            labels=NLI2_LABELS,
            splits={s: _pair(f"{s}.tsv", s != "test") for s in SPLITS},
            metrics=CLASSIFICATION,
            key_metric="eval_accuracy",
            submission_file="RTE.tsv",
        ),
        TaskSpec(
            name="sst-2",
            folder="SST-2",
            labels=BINARY_LABELS,
            splits={
                "train": SplitLayout("train.tsv", True, 0, None, 1, None),
                "dev": SplitLayout("dev.tsv", True, 0, None, 1, None),
                "test": SplitLayout("test.tsv", True, 1),
            },
            metrics=CLASSIFICATION,
            key_metric="eval_accuracy",
            submission_file="SST-2.tsv",
        ),
        TaskSpec(
            name="sts-b",
            folder="STS-B",
            labels=None,
            splits={
                # index genre filename year old_index source1 source2 sentence1 sentence2 [score]
                "train": SplitLayout("train.tsv", True, 7, 8, -1),
                "dev": SplitLayout("dev.tsv", True, 7, 8, -1),
                "test": SplitLayout("test.tsv", True, 7, 8),
            },
            metrics=("pearson", "spearman", "MSE"),
            key_metric="pearson",
            submission_file="STS-B.tsv",
        ),
        TaskSpec(
            name="qqp",
            folder="QQP",
            labels=BINARY_LABELS,
            splits={
                # id qid1 qid2 question1 question2 is_duplicate; test: id question1 question2.
                # The original skips train/dev rows too short for columns 3-5 (its try/except IndexError).
                "train": SplitLayout("train.tsv", True, 3, 4, 5, skip_short_rows=True),
                "dev": SplitLayout("dev.tsv", True, 3, 4, 5, skip_short_rows=True),
                "test": SplitLayout("test.tsv", True, 1, 2),
            },
            metrics=("eval_accuracy", "f1"),
            key_metric="eval_accuracy",
            submission_file="QQP.tsv",
        ),
        TaskSpec(
            name="qnli",
            folder="QNLI",
            labels=NLI2_LABELS,
            splits={s: _pair(f"{s}.tsv", s != "test") for s in SPLITS},
            metrics=CLASSIFICATION,
            key_metric="eval_accuracy",
            submission_file="QNLI.tsv",
        ),
        TaskSpec(
            name="wnli",
            folder="WNLI",
            labels=BINARY_LABELS,
            splits={s: _pair(f"{s}.tsv", s != "test") for s in SPLITS},
            metrics=CLASSIFICATION,
            key_metric="eval_accuracy",
            submission_file="WNLI.tsv",
        ),
        TaskSpec(
            # The diagnostic set: predicted with an MNLI model, no train or dev split.
            name="ax",
            folder="diagnostic",
            labels=MNLI_LABELS,
            splits={"test": SplitLayout("diagnostic.tsv", True, 1, 2)},
            metrics=CLASSIFICATION,
            key_metric="eval_accuracy",
            submission_file="AX.tsv",
        ),
    )
}

TASK_NAMES: tuple[str, ...] = tuple(TASKS)
# Tasks with nothing to train or evaluate on (the diagnostic set: predicted with an MNLI model).
PREDICT_ONLY: tuple[str, ...] = tuple(name for name, spec in TASKS.items() if "train" not in spec.splits)


def get_task_spec(task_name: str) -> TaskSpec:
    """The spec of a task, by case-insensitive name ("CoLA", "sts-b", ...)."""
    key = task_name.strip().lower()
    if key not in TASKS:
        raise ValueError(
            f"unknown GLUE task {task_name!r}; known tasks: {', '.join(TASK_NAMES)}"
        )
    return TASKS[key]


read_tsv_rows = tsv_rows  # (1-based line number, fields) of each non-empty line of a GLUE TSV


class GlueProcessor:
    """Reads the train/dev/test examples of one GLUE task (see `TaskSpec`)."""

    def __init__(self, spec: TaskSpec, do_lower_case: bool = True):
        self.spec = spec
        self._label_set = frozenset(spec.labels or ())
        # The original matched a label after `process_text` (spaces collapsed and stripped, accents
        # dropped, lower-cased with --do_lower_case): "1 " or "Entailment" trained there.
        self.do_lower_case = do_lower_case

    @property
    def task_name(self) -> str:
        return self.spec.name

    @property
    def is_regression(self) -> bool:
        return self.spec.is_regression

    def get_labels(self) -> list[str] | list[None]:
        """The label list in the original's order ([None] for STS-B, as the original)."""
        return [None] if self.spec.labels is None else list(self.spec.labels)

    def has_split(self, split: str) -> bool:
        return split in self.spec.splits

    def data_file(self, data_dir: str | os.PathLike, split: str) -> str:
        """Path of a split's file: `data_dir/<TASK folder>/<file>`."""
        if split not in self.spec.splits:
            available = ", ".join(self.spec.splits)
            raise ValueError(
                f"task {self.spec.name!r} has no {split!r} split (it has: {available})"
            )
        return os.path.join(data_dir, self.spec.folder, self.spec.splits[split].file)

    def check_files(self, data_dir: str | os.PathLike, splits: Sequence[str]) -> None:
        """A clear error, before any work, for a split the task does not have, a missing file, one without
        a row of data or a malformed row anywhere: every row is read, since the test file is otherwise
        first read to predict, after the whole training (reading is quick next to tokenizing)."""
        for split in splits:
            for _ in self.iter_examples(data_dir, split):
                pass

    def save_alongside(self, output_dir: str) -> None:
        """Writes what a later run on these checkpoints needs to know of the data (nothing for GLUE)."""

    def cache_settings(self) -> dict:
        """What the cached records depend on besides the data file, tokenizer and length."""
        return {}

    def iter_examples(self, data_dir: str | os.PathLike, split: str) -> Iterator[InputExample]:
        """Streams the examples of a split, checking every row."""
        path = self.data_file(data_dir, split)
        if not is_file(path):
            raise FileNotFoundError(
                f"GLUE {self.spec.name} {split} file {'is a folder' if is_dir(path) else 'not found'}: {path} "
                f"(expected --data_dir to contain {self.spec.folder}/{self.spec.splits[split].file})"
            )
        layout = self.spec.splits[split]
        width = layout.num_columns
        # Columns the layout reads; a file narrower than this cannot be this task's file.
        used = [layout.text_a, layout.text_b, layout.label_column, layout.guid_column]
        min_width = max(c + 1 if c >= 0 else -c for c in used if c is not None)
        row_index = -1
        header: list[str] = []
        skipped: list[int] = []  # line numbers of short rows skipped (skip_short_rows)
        for line_number, fields in read_tsv_rows(path):
            row_index += 1
            if layout.has_header and row_index == 0:
                width = len(fields)
                if width < min_width:
                    raise GlueDataError(
                        f"{path}:{line_number}: header has {width} columns, the "
                        f"{self.spec.name} {split} file needs at least {min_width}: {_clip(fields)}"
                        + cr_only_hint(fields)
                    )
                header = fields
                continue
            if layout.skip_short_rows and len(fields) < min_width:
                skipped.append(line_number)
                continue
            if len(fields) != width:
                raise GlueDataError(
                    f"{path}:{line_number}: expected {width} tab-separated columns, "
                    f"found {len(fields)}: {_clip(fields)}" + cr_only_hint(fields)
                )
            yield self._make_example(fields, layout, split, row_index, path, line_number)
        if skipped and row_index == len(skipped) + (0 if layout.has_header else -1):
            # Every row short: not a few broken questions but another file (or another task's), which
            # skipping them all would have turned into a split of no examples.
            raise GlueDataError(f"{path}:{skipped[0]}: no row of data has the {min_width} tab-separated columns "
                                f"the {self.spec.name} {split} file needs ({len(skipped)} row(s), all too short)")
        if skipped:
            _warn_skipped_once(path, split, skipped, min_width)
        if row_index < (1 if layout.has_header else 0):  # an empty split is a mistake, not a no-op
            raise GlueDataError(f"{path}:1: empty file: no rows of data"
                                + (" after the header" if row_index == 0 else "") + cr_only_hint(header))

    def _make_example(
        self,
        fields: Sequence[str],
        layout: SplitLayout,
        split: str,
        row_index: int,
        path: str,
        line_number: int,
    ) -> InputExample:
        guid = f"{split}-{row_index}" if layout.guid_column is None else fields[layout.guid_column]
        label: str | float | None = None
        if layout.label_column is not None:
            raw = fields[layout.label_column]
            if self.spec.is_regression:
                try:
                    label = float(raw)
                except ValueError:
                    raise GlueDataError(
                        f"{path}:{line_number}: label {raw!r} is not a number "
                        f"({self.spec.name} is a regression task)"
                    ) from None
            elif raw in self._label_set:
                label = raw
            elif preprocess_text(raw, lower=self.do_lower_case) in self._label_set:
                label = preprocess_text(raw, lower=self.do_lower_case)
            else:
                raise GlueDataError(
                    f"{path}:{line_number}: unknown label {raw!r} for task "
                    f"{self.spec.name}; expected one of {list(self.spec.labels)}"
                )
        text_b = None if layout.text_b is None else fields[layout.text_b]
        return InputExample(guid=guid, text_a=fields[layout.text_a], text_b=text_b, label=label)

    def get_examples(self, data_dir: str | os.PathLike, split: str) -> list[InputExample]:
        return list(self.iter_examples(data_dir, split))

    def get_train_examples(self, data_dir: str | os.PathLike) -> list[InputExample]:
        return self.get_examples(data_dir, "train")

    def get_dev_examples(self, data_dir: str | os.PathLike) -> list[InputExample]:
        return self.get_examples(data_dir, "dev")

    def get_test_examples(self, data_dir: str | os.PathLike) -> list[InputExample]:
        return self.get_examples(data_dir, "test")


_warned_skips: set[tuple[str, str, tuple[int, ...]]] = set()


def _warn_skipped_once(path: str, split: str, lines: list[int], min_width: int) -> None:
    """One warning per file and process (a run reads a split several times: check, count, build)."""
    key = (str(path), split, tuple(lines))
    if key in _warned_skips:
        return
    _warned_skips.add(key)
    shown = ", ".join(str(n) for n in lines[:10]) + (", ..." if len(lines) > 10 else "")
    logging.warning("%s: skipped %d row(s) with fewer than %d tab-separated columns, as the original's QQP "
                    "reader does (lines %s); mend them to train or evaluate on them", path, len(lines),
                    min_width, shown)


def _clip(fields: Sequence[str], limit: int = 200) -> str:
    text = repr(list(fields))
    return text if len(text) <= limit else text[:limit] + "...]"


def get_processor(task_name: str, do_lower_case: bool = True) -> GlueProcessor:
    """The processor of a task by case-insensitive name; unknown names list the known ones.
    `do_lower_case` (the flag's): whether labels match lower-cased, as the original's."""
    return GlueProcessor(get_task_spec(task_name), do_lower_case)
