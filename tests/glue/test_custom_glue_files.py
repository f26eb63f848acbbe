"""--task_name=custom reads users' files as written: the real GLUE TSVs give exactly the rows the GLUE
reader gives; quotes in a TSV are characters; a CSV is parsed strictly; rows of the wrong width, nan/inf
labels and empty files are one ``file:line`` error; test labels are ignored; --positive_label chooses the
class F1 and Matthews score."""
import csv

import numpy as np
import pytest

from albert_tf.glue import custom, metrics
from albert_tf.glue.processors import GlueDataError, get_processor

# (task, split, text columns, label column); CoLA's train/dev have no header: one is written before them.
GLUE_FILES = [
    ("MRPC", "train", ["#1 String", "#2 String"], "Quality"),
    ("MRPC", "dev", ["#1 String", "#2 String"], "Quality"),
    ("MRPC", "test", ["#1 String", "#2 String"], None),
    ("STS-B", "train", ["sentence1", "sentence2"], "score"),
    ("STS-B", "dev", ["sentence1", "sentence2"], "score"),
    ("STS-B", "test", ["sentence1", "sentence2"], None),
    ("CoLA", "train", ["sentence"], "label"),
    ("CoLA", "dev", ["sentence"], "label"),
    ("CoLA", "test", ["sentence"], None),
    ("RTE", "train", ["sentence1", "sentence2"], "label"),
    ("RTE", "dev", ["sentence1", "sentence2"], "label"),
    ("RTE", "test", ["sentence1", "sentence2"], None),
]
COLA_HEADER = "source\tlabel\toriginal_label\tsentence\n"


@pytest.mark.parametrize("task,split,texts,label", GLUE_FILES, ids=[f"{t}-{s}" for t, s, _, _ in GLUE_FILES])
def test_real_glue_tsvs_read_as_custom_give_the_glue_rows(shared, tmp_path, task, split, texts, label):
    glue_dir = shared("data", "glue")
    path = glue_dir / task / f"{split}.tsv"
    if task == "CoLA" and split != "test":  # no header row: the custom reader needs one
        headed = tmp_path / f"{split}.tsv"
        headed.write_bytes(COLA_HEADER.encode() + path.read_bytes())
        path = headed
    glue = get_processor(task)
    expected = [(e.text_a, e.text_b, e.label) for e in glue.get_examples(str(glue_dir), split)]
    train = glue_dir / task / "train.tsv" if task != "CoLA" else None
    labels = glue.spec.labels
    if train is not None:  # the labels found in the training file are the task's
        assert custom.discover_labels(str(train), None, "score" if task == "STS-B" else (
            "Quality" if task == "MRPC" else "label"), False, []) == labels
    reader = custom.CustomProcessor({split: str(path)}, texts, label or "label", labels)
    got = [(e.text_a, e.text_b, e.label) for e in reader.get_examples("", split)]
    assert got == expected
    # Independently of both readers: one example per non-empty line after the header.
    data_lines = [line for line in path.read_bytes().split(b"\n") if line.strip(b"\r")][1:]
    assert len(got) == len(data_lines)
    if task in ("MRPC", "STS-B") and split == "train":  # the rows a CSV reader got wrong keep their quotes
        quoted = [row for row in got if '"' in row[0] + (row[1] or "")]
        assert len(quoted) > 100, len(quoted)


# ---- TSV: tabs only ----
def test_tsv_quotes_are_characters_and_an_unbalanced_one_merges_nothing(tmp_path):
    path = tmp_path / "train.tsv"
    path.write_text('text\tlabel\n"Great" movie\tpos\n"good movie\tpos\nbad\tneg\nfine\tpos\nawful\tneg\n',
                    encoding="utf-8")
    reader = custom.CustomProcessor({"train": str(path)}, ["text"], "label", ("neg", "pos"))
    assert [(e.text_a, e.label) for e in reader.get_examples("", "train")] == [
        ('"Great" movie', "pos"), ('"good movie', "pos"), ("bad", "neg"), ("fine", "pos"), ("awful", "neg")]


def test_features_cached_by_the_quote_rule_reader_are_not_reused(tmp_path, spm_model, monkeypatch):
    """The cache key carries the reader's version: a TSV cached by reader 1 (CSV quote rules, which
    stripped the quotes above) is built again by today's reader, not read back."""
    from albert_tf.glue import features
    from albert_tf.tokenization import FullTokenizer

    path = tmp_path / "train.tsv"
    path.write_text('text\tlabel\n"Great" movie\tpos\nbad\tneg\n', encoding="utf-8")
    reader = custom.CustomProcessor({"train": str(path)}, ["text"], "label", ("neg", "pos"))
    tokenizer = FullTokenizer(spm_model_file=str(spm_model))

    def cache():
        return features.cached_features(reader, "", "train", tmp_path / "cache", tokenizer, "spm", 16)

    monkeypatch.setattr(custom, "READER_VERSION", 1)
    old = cache()
    monkeypatch.undo()
    new = cache()
    assert not new.reused and new.record_file != old.record_file and new.side["settings"]["reader"] == 2
    assert cache().reused


@pytest.mark.parametrize("name,content,message", [
    ("extra.tsv", "text\tlabel\nfine\tpos\nsome\ttext\tneg\n",
     ":3: expected 2 fields (text, label), found 3 tab-separated (a TSV has no quoting): ['some', 'text', 'neg']"),
    ("short.tsv", "text\tlabel\nfine\tpos\nnothing\n", ":3: expected 2 fields (text, label), found 1"),
    ("extra.csv", "text,label\nfine,pos\nsome,text,neg\n", ":3: expected 2 fields (text, label), found 3"),
    ("repeated.tsv", "text\ttext\nfine\tpos\n", ":1: the header names column 'text' twice"),
    ("header_only.tsv", "text\tlabel\n", ":1: the file has a header row but no rows of data"),
    ("late_header.tsv", "\n\ntext\tlabel\n\n", ":3: the file has a header row but no rows of data"),
    ("blank.jsonl", "\n\n", ":1: empty file: no rows of data"),
    ("blank.csv", "\n\n", ":1: empty file: expected a header row"),
])
def test_rows_of_the_wrong_width_and_empty_files_are_one_error(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    for split in ("train", "dev", "test"):
        reader = custom.CustomProcessor({split: str(path)}, ["text"], "label", ("neg", "pos"))
        with pytest.raises(GlueDataError) as error:
            reader.check_files("", [split])
        assert str(error.value).startswith(f"{path}{message}"), str(error.value)


# ---- CSV: strict ----
@pytest.mark.parametrize("content,message", [
    # The unbalanced quote of the review: before, 2 records of 4 were read, exit 0.
    ('text,label\n"good movie,pos\nbad,neg\nfine,pos\nawful,neg\n',
     ":2: a quoted field opens on this line and is never closed"),
    # Closed in the middle of a field, on a later line: the error names the line it opened on.
    ('text,label\nfine,pos\n"good movie,pos\nbad,neg\n"awful",neg\n',
     ":3: the quoted field opening on this line closes on line 5 before 'a'"),
    ('text,label\n"one ""quoted"" word" here,pos\n', ":2: the quoted field opening on this line closes on line 2 "
                                                     "before ' '"),
    ('text,label\nfine,pos\nbad,"neg\n', ":3: a quoted field opens on this line and is never closed"),
])
def test_csv_unbalanced_quotes_name_the_line_they_opened_on(tmp_path, content, message):
    path = tmp_path / "train.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(GlueDataError) as error:
        list(custom.read_rows(str(path), "csv", ["text", "label"]))
    assert str(error.value).startswith(f"{path}{message}"), str(error.value)


def test_csv_quoting_and_a_field_over_16_mib(tmp_path):
    path = tmp_path / "train.csv"
    long_text = "word " * ((17 << 20) // 5)  # 17 MiB in one field: before, a _csv.Error traceback
    assert len(long_text) > 16 << 20
    with open(path, "w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["text", "label"], ['5" screen, "great"', "pos"], ["two\nlines", "neg"],
                                 [long_text, "pos"]])
    with open(path, "a", encoding="utf-8") as f:
        f.write('a 5" screen,neg\n')  # a quote inside an unquoted field is a character
    reader = custom.CustomProcessor({"train": str(path)}, ["text"], "label", ("neg", "pos"))
    rows = [(e.text_a, e.label) for e in reader.get_examples("", "train")]
    assert rows == [('5" screen, "great"', "pos"), ("two\nlines", "neg"), (long_text, "pos"),
                    ('a 5" screen', "neg")]
    assert [line for line, _ in custom.read_rows(str(path), "csv", ["text"])] == [2, 3, 5, 6]


# ---- labels ----
def test_test_files_need_no_label_and_ignore_what_it_holds(tmp_path):
    placeholders = tmp_path / "test.tsv"
    placeholders.write_text("text\tlabel\nfine\t-1\nbad\t-1\n", encoding="utf-8")  # as Hugging Face's GLUE tests
    none = tmp_path / "test.csv"
    none.write_text("text\nfine\nbad\n", encoding="utf-8")
    for path in (placeholders, none):
        reader = custom.CustomProcessor({"test": str(path)}, ["text"], "label", ("neg", "pos"))
        reader.check_files("", ["test"])
        assert [(e.text_a, e.label) for e in reader.get_examples("", "test")] == [("fine", None), ("bad", None)]
    dev = tmp_path / "dev.tsv"
    dev.write_text("text\tlabel\nfine\t-1\n", encoding="utf-8")  # a dev file's labels are still checked
    with pytest.raises(GlueDataError, match=rf"{dev}:2: label '-1' is not among the training file's labels"):
        custom.CustomProcessor({"dev": str(dev)}, ["text"], "label", ("neg", "pos")).check_files("", ["dev"])


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-Infinity"])
def test_nan_and_inf_labels_are_one_error(tmp_path, value):
    train = tmp_path / "train.tsv"
    train.write_text(f"text\tlabel\na\t0\nb\t1\nc\t{value}\nd\t0\n", encoding="utf-8")
    with pytest.raises(GlueDataError, match=rf"^{train}:4: label '{value}' is not a finite number"):
        custom.discover_labels(str(train), None, "label", False, [])
    dev = tmp_path / "dev.jsonl"
    dev.write_text('{"text": "a", "score": 0.5}\n{"text": "b", "score": NaN}\n', encoding="utf-8")
    reader = custom.CustomProcessor({"dev": str(dev)}, ["text"], "score", None)
    with pytest.raises(GlueDataError, match=rf"^{dev}:2: label 'nan' is not a finite number"):
        reader.check_files("", ["dev"])


@pytest.mark.parametrize("labels,positive,why", [
    (("0", "1"), "1", "names a positive"),
    (("duplicate", "not_duplicate"), "duplicate", "'not_duplicate' negates it"),
    (("entailment", "not_entailment"), "entailment", "negates it"),
    (("neg", "pos"), "pos", "names a positive"),
    (("False", "True"), "True", "names a positive"),
    (("no", "yes"), "yes", "names a positive"),
    (("ham", "spam"), "spam", "sorts second"),
])
def test_the_default_positive_label(labels, positive, why):
    label, reason = custom.default_positive_label(labels)
    assert label == positive and why in reason


def test_f1_scores_the_positive_label(tmp_path):
    gold = np.array([0, 0, 0, 1, 1, 0, 1, 0])  # class ids of ("duplicate", "not_duplicate")
    predicted = np.array([0, 0, 1, 1, 0, 0, 1, 1])
    logits = np.eye(2)[predicted] * 3.0

    def by_hand(positive):
        tp = sum(g == p == positive for g, p in zip(gold, predicted))
        fp = sum(p == positive != g for g, p in zip(gold, predicted))
        fn = sum(g == positive != p for g, p in zip(gold, predicted))
        return 2 * tp / (2 * tp + fp + fn)

    def spec(positive=None):
        return custom.CustomProcessor({"train": str(tmp_path / "t.tsv")}, ["text"], "label",
                                      ("duplicate", "not_duplicate"), "f1", positive_label=positive).spec

    default = metrics.compute_metrics(spec(), gold, logits)
    assert spec().positive_label == "duplicate" and spec().key_metric == "f1"
    assert default["f1"] == pytest.approx(by_hand(0))  # 0.6; before, not_duplicate's 0.5
    chosen = metrics.compute_metrics(spec("not_duplicate"), gold, logits)
    assert chosen["f1"] == pytest.approx(by_hand(1)) and by_hand(0) != by_hand(1)
    assert chosen["matthew_corr"] == pytest.approx(default["matthew_corr"])  # symmetric in the classes
    with pytest.raises(ValueError, match="--positive_label=maybe: custom has the labels"):
        spec("maybe")
    # GLUE tasks keep the original's class 1.
    mrpc = get_processor("MRPC").spec
    assert mrpc.positive_id == 1
    assert metrics.compute_metrics(mrpc, gold, logits)["f1"] == pytest.approx(by_hand(1))


# ---- GLUE: an empty split ----
def test_a_header_only_glue_split_is_one_error(tmp_path, shared):
    header = shared("data", "glue", "MRPC", "dev.tsv").read_bytes().split(b"\n")[0] + b"\n"
    (tmp_path / "MRPC").mkdir()
    (tmp_path / "MRPC" / "dev.tsv").write_bytes(header)
    with pytest.raises(GlueDataError, match=rf"^{tmp_path / 'MRPC' / 'dev.tsv'}:1: empty file: no rows of data "
                                            r"after the header$"):
        get_processor("MRPC").check_files(str(tmp_path), ["dev"])


# ---- the driver ----
def test_driver_refuses_bad_files_with_one_line_and_writes_nothing(tmp_path, tiny_config_file, spm_model,
                                                                   driver_errors):
    good = tmp_path / "good.tsv"
    good.write_text("text\tlabel\n" + "".join(f"row {i}\t{'pos' if i % 2 else 'neg'}\n" for i in range(8)))
    quote = tmp_path / "quote.csv"
    quote.write_text('text,label\n"good movie,pos\nbad,neg\nfine,pos\nawful,neg\n')
    nan = tmp_path / "nan.tsv"
    nan.write_text("text\tlabel\na\t0\nb\tnan\nc\t1\n")
    wide = tmp_path / "wide.tsv"
    wide.write_text("text\tlabel\nfine\tpos\nsome\ttext\tneg\n")
    empty = tmp_path / "empty.tsv"
    empty.write_text("text\tlabel\n")
    out = tmp_path / "out"
    base = ["--task_name=custom", f"--albert_config_file={tiny_config_file}", f"--spm_model_file={spm_model}",
            f"--output_dir={out}", "--max_seq_length=16", "--train_step=2", "--text_columns=text"]
    results = driver_errors({
        "quote": [*base, "--do_train", f"--train_file={quote}"],
        "nan": [*base, "--do_train", f"--train_file={nan}"],
        "wide test": [*base, "--do_train", "--do_predict", f"--train_file={good}", f"--test_file={wide}"],
        "empty dev": [*base, "--do_train", "--do_eval", f"--train_file={good}", f"--dev_file={empty}"],
        "positive": [*base, "--do_train", f"--train_file={good}", "--positive_label=yes"],
    })
    assert results["quote"]["stderr"] == (f"run_classifier.py: error: {quote}:2: a quoted field opens on this line "
                                          f"and is never closed (the file ends inside it): a '\"' without its pair\n")
    assert results["nan"]["stderr"].startswith(f"run_classifier.py: error: {nan}:3: label 'nan' is not a finite")
    assert results["wide test"]["stderr"].startswith(f"run_classifier.py: error: {wide}:3: expected 2 fields")
    assert results["empty dev"]["stderr"] == (f"run_classifier.py: error: {empty}:1: the file has a header row but no "
                                              f"rows of data\n")
    assert "--positive_label=yes: custom has the labels ['neg', 'pos']" in results["positive"]["stderr"]
    assert all(r["code"] == 1 for r in results.values()), results
    assert all(r["stderr"].count("\n") == 1 for r in results.values()), results  # one line, no traceback
    assert not out.exists() or not any(out.iterdir())  # nothing written
