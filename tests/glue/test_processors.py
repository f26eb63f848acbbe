"""GLUE readers: real files (row counts, label sets, guids) and hand-written MNLI/QQP/SST-2/AX rows."""
import collections

import pytest

from albert_tf.glue import processors
from albert_tf.glue.processors import GlueDataError, get_processor

# (task, split): (rows, label counts) from ../shared/data/SOURCES.md
REAL_FILES = {
    ("cola", "train"): (8551, {"0": 2528, "1": 6023}),
    ("cola", "dev"): (1043, {"0": 322, "1": 721}),
    ("cola", "test"): (1063, {None: 1063}),
    ("mrpc", "train"): (3668, {"0": 1194, "1": 2474}),
    ("mrpc", "dev"): (408, {"0": 129, "1": 279}),
    ("mrpc", "test"): (1725, {None: 1725}),
    ("rte", "train"): (2490, {"entailment": 1249, "not_entailment": 1241}),
    ("rte", "dev"): (277, {"entailment": 146, "not_entailment": 131}),
    ("rte", "test"): (3000, {None: 3000}),
    ("qnli", "dev"): (5463, {"entailment": 2702, "not_entailment": 2761}),
    ("wnli", "train"): (635, {"0": 323, "1": 312}),
    ("wnli", "dev"): (71, {"0": 40, "1": 31}),
    ("wnli", "test"): (146, {None: 146}),
}


@pytest.fixture
def data_dir(shared):
    return shared("data", "glue")


@pytest.mark.parametrize("task,split", sorted(REAL_FILES))
def test_real_file_rows_and_labels(data_dir, task, split):
    rows, label_counts = REAL_FILES[(task, split)]
    examples = get_processor(task).get_examples(data_dir, split)
    assert len(examples) == rows
    assert dict(collections.Counter(e.label for e in examples)) == label_counts
    assert len({e.guid for e in examples}) == rows  # guids are unique: submissions rely on them


@pytest.mark.parametrize("split,rows", [("train", 5749), ("dev", 1500), ("test", 1379)])
def test_stsb_real_files(data_dir, split, rows):
    examples = get_processor("sts-b").get_examples(data_dir, split)
    assert len(examples) == rows
    assert examples[0].guid == "0"
    if split == "test":
        assert all(e.label is None for e in examples)
    else:
        assert all(isinstance(e.label, float) and 0.0 <= e.label <= 5.0 for e in examples)
    if split == "dev":
        assert examples[0] == processors.InputExample(
            "0", "A man with a hard hat is dancing.", "A man wearing a hard hat is dancing.", 5.0)


def test_mrpc_bom_header_and_quotes_kept(data_dir):
    p = get_processor("MRPC")  # case-insensitive, like the original's task_name.lower()
    dev = p.get_dev_examples(data_dir)
    # Header (with its UTF-8 BOM) skipped; guids "<split>-<line index>" as the original.
    assert dev[0].guid == "dev-1" and dev[0].label == "1"
    assert dev[0].text_a.startswith("He said the foodservice pie business")
    # No quoting: a field starting with '"' keeps it, and the row does not swallow the next one.
    assert dev[0].text_b.startswith('"The foodservice pie business does not fit')
    assert dev[1].guid == "dev-2" and dev[1].label == "0"
    test = p.get_test_examples(data_dir)
    assert test[0].guid == "0" and test[-1].guid == "1724" and test[0].text_b


def test_files_on_a_remote_filesystem(data_dir):
    """gs:// data dirs go through tf.io.gfile; TensorFlow's ram:// filesystem stands in for a bucket.
    MRPC's BOM, header and quotes read as from the local file."""
    import uuid

    import tensorflow as tf

    root = f"ram://glue-{uuid.uuid4().hex}"
    tf.io.gfile.copy(str(data_dir / "MRPC" / "dev.tsv"), f"{root}/MRPC/dev.tsv")
    p = get_processor("MRPC")
    assert p.get_dev_examples(root) == p.get_dev_examples(data_dir)
    with pytest.raises(FileNotFoundError, match=f"{root}/MRPC/train.tsv"):
        p.get_train_examples(root)


def test_cola_guids_and_texts(data_dir):
    p = get_processor("cola")
    train = p.get_train_examples(data_dir)
    assert train[0].guid == "train-0" and train[0].text_b is None
    assert train[0].text_a == "Our friends won't buy this analysis, let alone the next one we propose."
    test = p.get_test_examples(data_dir)
    assert (test[0].guid, test[0].text_a) == ("0", "Bill whistled past the house.")


def test_mnli_matched_and_mismatched(glue_dir):
    mnli, mis = get_processor("mnli"), get_processor("mismnli")
    assert mnli.get_labels() == ["contradiction", "entailment", "neutral"]
    train = mnli.get_train_examples(glue_dir)
    assert [e.label for e in train] == ["neutral", "entailment", "contradiction"]
    assert train[1].text_a == 'He said "yes.' and train[1].text_b == "He agreed."
    assert train[0].guid == "0"
    dev_m, dev_mm = mnli.get_dev_examples(glue_dir), mis.get_dev_examples(glue_dir)
    # gold_label is the last of 16 columns, not label1.
    assert [e.label for e in dev_m] == ["neutral", "entailment"]
    assert dev_m[0].text_a == "matched premise one" and dev_mm[0].text_a == "mismatched premise one"
    assert mis.get_train_examples(glue_dir) == train
    test_m, test_mm = mnli.get_test_examples(glue_dir), mis.get_test_examples(glue_dir)
    assert [e.text_a for e in test_m] == ["test_matched a", "test_matched c"]
    assert [e.text_a for e in test_mm] == ["test_mismatched a", "test_mismatched c"]
    assert all(e.label is None for e in test_m + test_mm)


def test_qqp_sst2_ax(glue_dir):
    qqp = get_processor("qqp")
    train = qqp.get_train_examples(glue_dir)
    assert [(e.guid, e.label) for e in train] == [("133273", "0"), ("402555", "1")]
    assert train[1].text_b == "How do you control your horniness?"
    assert len(qqp.get_dev_examples(glue_dir)) == 1
    test = qqp.get_test_examples(glue_dir)
    assert [(e.guid, e.text_a[:6], e.label) for e in test] == [("0", "Why do", None), ("1", "What's", None)]

    sst = get_processor("sst-2")
    train = sst.get_train_examples(glue_dir)
    assert [e.label for e in train] == ["0", "0", "1"] and train[0].guid == "train-1"
    assert train[0].text_a == "hide new secretions from the parental units " and train[0].text_b is None
    test = sst.get_test_examples(glue_dir)
    assert [e.guid for e in test] == ["0", "1"] and test[0].text_a == "uneasy mishmash of styles and genres ."

    ax = get_processor("ax")
    assert ax.get_labels() == ["contradiction", "entailment", "neutral"]
    test = ax.get_test_examples(glue_dir)
    assert [e.guid for e in test] == ["0", "1", "2"] and test[2].text_b.startswith("When you've got snow")
    with pytest.raises(ValueError, match="no 'train' split"):
        ax.get_train_examples(glue_dir)


def test_crlf_bom_blank_lines_and_unicode_breaks(tmp_path, write_tsv):
    d = tmp_path / "glue"
    write_tsv(d / "RTE" / "train.tsv", [
        ["index", "sentence1", "sentence2", "label"],
        ["0", "line\u2028separator and form\x0cfeed stay inside", "b", "entailment"],
        ["1", "c", "d", "not_entailment"],
    ], bom=True, newline="\r\n")
    with open(d / "RTE" / "train.tsv", "a", encoding="utf-8") as f:
        f.write("\n")  # a trailing blank line carries no data
    examples = get_processor("rte").get_train_examples(d)
    assert [e.label for e in examples] == ["entailment", "not_entailment"]
    assert examples[0].text_a == "line\u2028separator and form\x0cfeed stay inside"
    assert examples[1].text_b == "d"


def test_wrong_column_count_names_file_line_value(tmp_path, write_tsv):
    d = tmp_path / "glue"
    path = write_tsv(d / "QQP" / "train.tsv", [
        ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
        ["1", "2", "3", "q1", "q2", "0"],
        ["4", "5", "6", "a question\twith a tab", "q2", "1"],
    ])
    with pytest.raises(GlueDataError) as err:
        get_processor("qqp").get_train_examples(d)
    message = str(err.value)
    assert f"{path}:3:" in message and "expected 6" in message and "found 7" in message
    assert "with a tab" in message


def test_check_files_reads_every_row_before_any_work(tmp_path, write_tsv):
    """A malformed row late in the test file stops the run at the start, not at the prediction after the
    whole training (the check read each split's first row only)."""
    d = tmp_path / "glue"
    header = ["index", "sentence1", "sentence2"]
    write_tsv(d / "RTE" / "train.tsv", [header + ["label"], ["0", "a", "b", "entailment"]])
    path = write_tsv(d / "RTE" / "test.tsv", [header, ["0", "a", "b"], ["1", "c", "d"], ["2", "e", "f", "g"]])
    with pytest.raises(GlueDataError, match=rf"{path}:4: expected 3 tab-separated columns, found 4"):
        get_processor("rte").check_files(d, ["train", "test"])


def test_headerless_cola_column_count(tmp_path, write_tsv):
    d = tmp_path / "glue"
    path = write_tsv(d / "CoLA" / "dev.tsv", [["gj04", "1", "", "Fine."], ["gj04", "0", "Short"]])
    with pytest.raises(GlueDataError, match=rf"{path}:2: expected 4 .*found 3"):
        get_processor("cola").get_dev_examples(d)


def test_unknown_label_names_file_line_value(tmp_path, write_tsv):
    d = tmp_path / "glue"
    path = write_tsv(d / "RTE" / "dev.tsv", [
        ["index", "sentence1", "sentence2", "label"],
        ["0", "a", "b", "entailment"],
        ["1", "a", "b", "contradiction"],
    ])
    with pytest.raises(GlueDataError) as err:
        get_processor("rte").get_dev_examples(d)
    assert f"{path}:3:" in str(err.value) and "'contradiction'" in str(err.value)
    assert "not_entailment" in str(err.value)


def test_stsb_score_must_be_a_number(tmp_path, write_tsv):
    d = tmp_path / "glue"
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"]
    path = write_tsv(d / "STS-B" / "train.tsv", [header, ["0", "g", "f", "y", "o", "s", "s", "a", "b", "high"]])
    with pytest.raises(GlueDataError, match=rf"{path}:2: label 'high' is not a number"):
        get_processor("sts-b").get_train_examples(d)


def test_unknown_task_lists_known_ones():
    with pytest.raises(ValueError) as err:
        get_processor("sst2")
    for name in ("cola", "mnli", "mismnli", "mrpc", "rte", "sst-2", "sts-b", "qqp", "qnli", "wnli", "ax"):
        assert name in str(err.value)


def test_missing_file_says_where(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"QNLI/train.tsv"):
        get_processor("qnli").get_train_examples(tmp_path)


def test_task_table():
    specs = processors.TASKS
    assert set(specs) == {"cola", "mnli", "mismnli", "mrpc", "rte", "sst-2", "sts-b", "qqp", "qnli",
                          "wnli", "ax"}
    assert specs["sts-b"].is_regression and specs["sts-b"].num_labels == 1
    assert get_processor("sts-b").get_labels() == [None]
    assert {n: s.key_metric for n, s in specs.items() if s.key_metric != "eval_accuracy"} == {
        "cola": "matthew_corr", "sts-b": "pearson"}
    assert specs["mismnli"].submission_file == "MNLI-mm.tsv" and specs["ax"].submission_file == "AX.tsv"


def test_labels_match_after_the_originals_process_text(tmp_path, write_tsv):
    """The original looked labels up after `process_text` (spaces stripped, lower-cased with --do_lower_case):
    a label with a stray space or capital trained there and must here, as the same class."""
    d = tmp_path / "glue"
    path = write_tsv(d / "RTE" / "dev.tsv", [
        ["index", "sentence1", "sentence2", "label"],
        ["0", "a", "b", "entailment "],
        ["1", "c", "d", " Not_Entailment"],
        ["2", "e", "f", "not_entailment"],
    ])
    assert [e.label for e in get_processor("rte").get_dev_examples(d)] == [
        "entailment", "not_entailment", "not_entailment"]
    write_tsv(d / "MRPC" / "train.tsv", [["\ufeffQuality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                                         ["1 ", "1", "2", "a", "b"], ["0", "3", "4", "c", "d"]])
    assert [e.label for e in get_processor("mrpc").get_train_examples(d)] == ["1", "0"]
    # Cased (--nodo_lower_case): the original's label map had no "Not_Entailment" either.
    with pytest.raises(GlueDataError, match=rf"{path}:3: unknown label ' Not_Entailment'"):
        get_processor("rte", do_lower_case=False).get_dev_examples(d)


def test_cr_only_line_endings_are_named_as_the_cause(tmp_path, write_tsv):
    """A file saved with CR-only line endings is one line (rows end at LF or CRLF, as the original's reader):
    the error says so instead of only 'no rows of data after the header' or 'found 19 columns'."""
    d = tmp_path / "glue"
    rte = write_tsv(d / "RTE" / "train.tsv", [["index", "sentence1", "sentence2", "label"],
                                              ["0", "a", "b", "entailment"]], newline="\r")
    with pytest.raises(GlueDataError, match=rf"^{rte}:1: empty file: .*carriage return .*LF or CRLF"):
        get_processor("rte").get_train_examples(d)
    cola = write_tsv(d / "CoLA" / "dev.tsv", [["gj04", "1", "", "Fine."], ["gj04", "0", "*", "Short."]],
                     newline="\r")
    with pytest.raises(GlueDataError, match=rf"^{cola}:1: expected 4 .*found 7.*carriage return"):
        get_processor("cola").get_dev_examples(d)


def test_qqp_rows_too_short_are_skipped_as_the_original_does_with_a_warning(tmp_path, write_tsv, monkeypatch):
    """GLUE's 2018 QQP train file has a question broken by a newline: two rows short of the 6 columns.
    The original's QQP reader skips them (try/except IndexError) and trains on the rest; refusing the file
    left no way to train QQP on it without editing. Skipped here too, each line named in one warning."""
    from albert_tf.glue import processors

    warnings = []
    monkeypatch.setattr(processors.logging, "warning", lambda fmt, *args: warnings.append(fmt % args))
    d = tmp_path / "glue"
    rows = [
        ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
        ["1", "2", "3", "first?", "second?", "0"],
        ["4", "5", "6", "a question broken"],  # the newline ended the row here
        ['"', "by a newline?", "1"],
        ["7", "8", "9", "third?", "fourth?", "1"],
    ]
    path = write_tsv(d / "QQP" / "train.tsv", rows)
    # Independently: the rows with all 6 columns, after the header.
    expected = [(r[3], r[4], r[5]) for r in rows[1:] if len(r) >= 6]
    processor = get_processor("qqp")
    for _ in range(2):  # a run reads a split several times; one warning
        examples = processor.get_train_examples(d)
        assert [(e.text_a, e.text_b, e.label) for e in examples] == expected
    assert len(warnings) == 1
    assert str(path) in warnings[0] and "skipped 2 row(s)" in warnings[0] and "lines 3, 4" in warnings[0]


def test_qqp_test_rows_too_short_are_still_an_error(tmp_path, write_tsv):
    """The original's QQP test reader has no try/except: a short test row crashed it. Here it is the usual
    file:line error (a prediction row cannot be dropped from the submission)."""
    d = tmp_path / "glue"
    path = write_tsv(d / "QQP" / "test.tsv", [["id", "question1", "question2"], ["0", "a?", "b?"], ["1", "c?"]])
    with pytest.raises(GlueDataError, match=rf"{path}:3: expected 3 tab-separated columns, found 2"):
        get_processor("qqp").get_test_examples(d)


def test_qqp_rows_all_too_short_are_an_error_not_a_split_of_no_examples(tmp_path, write_tsv):
    """Skipping short rows is for a few broken questions: a train file whose every row is short (another file
    under QQP's header) is refused naming its first row, as an empty file is, not read as zero examples."""
    d = tmp_path / "glue"
    path = write_tsv(d / "QQP" / "train.tsv", [["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                                               ["1", "first?", "0"], ["2", "second?", "1"]])
    with pytest.raises(GlueDataError, match=rf"^{path}:2: no row of data has the 6 tab-separated columns"):
        get_processor("qqp").get_train_examples(d)
