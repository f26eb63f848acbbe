"""TSV lines as the original's `_read_tsv` read them: `csv.reader(tf.gfile.Open(path, "r"), delimiter="\\t",
quotechar=None)`, with TensorFlow's own GFile (whose readline drops every "\\r") as the oracle."""
import csv

import pytest
import tensorflow as tf

from albert_tf.glue import custom, tables
from albert_tf.glue.processors import get_processor
from albert_tf.glue.tables import tsv_rows


def original_rows(path) -> list[list[str]]:
    """The original's rows (blank lines, which it crashed on, left out: ours skips them)."""
    with tf.io.gfile.GFile(str(path), "r") as f:
        return [row for row in csv.reader(f, delimiter="\t", quotechar=None) if row]


@pytest.mark.parametrize("data", [
    b"a\tb\nc\td\n",
    b"a\tb\r\nc\td\r\n",                  # CRLF
    b"a\tb\r\r\nc\td\r\r\n",              # CRCRLF: a CRLF file converted once more
    b"a\tb\r",                           # no final line feed
    b'"a\tb"\t"c\n',                     # quotes are ordinary characters
    b"a\t\t\n\r\n\nc\t\t\n",             # trailing tabs (empty fields) and blank lines
    b"0\tIt rained.\rAll day.\t1\n",      # a carriage return inside a sentence
    b"a\tline one\r\r line two\tc\n",
    b"first\rsecond\nthird\n",           # mixed line endings
    b"text\tlabel\rhello\tpos\rbye\tneg\r",  # CR-only line endings: the whole file one line
])
def test_lines_split_as_the_originals_reader(tmp_path, data):
    """A \\r inside a line was read as a space ('It rained. All day.'), where the original's GFile dropped it
    ('It rained.All day.', other pieces), and CRCRLF lines kept a \\r."""
    path = tmp_path / "rows.tsv"
    path.write_bytes(data)
    assert [fields for _, fields in tsv_rows(path)] == original_rows(path)


def test_a_lone_carriage_return_is_dropped_as_the_original_with_a_warning(tmp_path, monkeypatch):
    """Mixed line endings run rows together in the original too; a one-column file cannot show it by a wrong
    column count, so the log names the lines."""
    warnings = []
    monkeypatch.setattr(tables.logging, "warning", lambda fmt, *args: warnings.append(fmt % args))
    path = tmp_path / "test.tsv"
    path.write_bytes(b"text\nfirst review\rsecond review\nthird review\n")
    processor = custom.CustomProcessor({"test": str(path)}, ["text"], "label", ("neg", "pos"))
    for _ in range(2):
        texts = [example.text_a for example in processor.iter_examples("", "test")]
    assert texts == [row[0] for row in original_rows(path)[1:]] == ["first reviewsecond review", "third review"]
    assert len(warnings) == 1 and warnings[0].startswith(f"{path}: 1 line(s) hold a carriage return"), warnings
    assert "(lines 2)" in warnings[0] and "LF or CRLF" in warnings[0]


def test_glue_examples_with_a_lone_carriage_return_are_the_originals(tmp_path, write_tsv):
    d = tmp_path / "glue"
    path = write_tsv(d / "RTE" / "dev.tsv", [["index", "sentence1", "sentence2", "label"],
                                             ["0", "It rained.\rAll day.", "It was wet.", "entailment\r"]])
    (example,) = get_processor("rte").get_dev_examples(d)
    assert [example.guid, example.text_a, example.text_b, example.label] == original_rows(path)[1]


def test_features_cached_by_the_old_reader_are_not_reused(tmp_path, write_tsv, monkeypatch):
    """Records cached when a lone \\r was read as a space hold other ids than the original's: a file holding one
    gets another cache key (files without one keep theirs)."""
    from albert_tf.data import datasets
    from albert_tf.glue import features as F, processors

    class Words:  # one id per whitespace-separated word
        def tokenize(self, text):
            return text.split()

        def convert_tokens_to_ids(self, tokens):
            return [sum(map(ord, token)) for token in tokens]

    d = tmp_path / "glue"
    path = write_tsv(d / "RTE" / "dev.tsv", [["index", "sentence1", "sentence2", "label"],
                                             ["0", "It rained.\rAll day.", "It was wet.", "entailment"]])
    processor, cache_dir = get_processor("rte"), tmp_path / "cache"

    def old_reader(p):  # the rule before: rows split at \n, one \r before it dropped, a lone \r kept
        for number, line in enumerate(open(p, encoding="utf-8-sig", newline="").read().split("\n"), start=1):
            line = line[:-1] if line.endswith("\r") else line
            if line:
                yield number, line.split("\t")

    with monkeypatch.context() as patch:  # a cache written by the old reader, under its key
        patch.setattr(processors, "read_tsv_rows", old_reader)
        patch.setattr(F, "joins_at_cr", lambda p: False, raising=False)
        old = F.cached_features(processor, d, "dev", cache_dir, Words(), "words", 16)
    cache = F.cached_features(processor, d, "dev", cache_dir, Words(), "words", 16)
    ids = next(iter(datasets.eval_dataset(cache, 1)))["input_ids"].numpy()[0].tolist()
    a, b = original_rows(path)[1][1:3]
    assert "rained.All" in a
    assert ids[:9] == Words().convert_tokens_to_ids(["[CLS]", *a.split(), "[SEP]", *b.split(), "[SEP]"])
    assert cache.record_file != old.record_file


def test_a_file_saved_as_utf16_or_holding_nul_is_refused_naming_the_cause(tmp_path):
    """Text saved as UTF-16 without a byte-order mark is valid UTF-8 with a NUL after each ASCII character: it
    was refused only at its last line ("expected 3 tab-separated columns, found 1: ['\\x00']"); with its mark
    the error did not say UTF-16; a NUL in a CSV field was read on Python 3.11 but refused by the csv module
    of 3.10 (a supported version) and of the original's Python ("line contains NUL")."""
    d = tmp_path / "glue"
    rows = "index\tsentence1\tsentence2\n0\tIt rained.\tIt was wet.\n"
    path = d / "RTE" / "test.tsv"
    path.parent.mkdir(parents=True)
    path.write_bytes(rows.encode("utf-16-le"))
    with pytest.raises(tables.GlueDataError, match=rf"^{path}:1: holds a NUL character .*UTF-16"):
        get_processor("rte").get_test_examples(d)
    path.write_bytes(rows.encode("utf-16"))  # with its byte-order mark, as Excel's "Unicode Text"
    with pytest.raises(tables.GlueDataError, match=rf"^{path}:1: not valid UTF-8 .*byte-order mark of UTF-16"):
        get_processor("rte").get_test_examples(d)
    table = tmp_path / "train.csv"
    table.write_bytes(b'text,label\n"good",pos\n"bad\x00",neg\n')
    processor = custom.CustomProcessor({"train": str(table)}, ["text"], "label", ("neg", "pos"))
    with pytest.raises(tables.GlueDataError, match=rf"^{table}:3: holds a NUL character \(\\x00\) after '\"bad'"):
        processor.check_files("", ["train"])


@pytest.mark.parametrize("data,line,after", [
    (b"text,label\nhi\rthere,pos\n", 2, "hi"),                      # a lone CR in an unquoted field
    (b'text,label\n"a\nb",pos\nc,neg\rd,pos\n', 4, "c,neg"),        # after a quoted line break
    (b"text,label\r\nhi,pos\r\r\nyo\r,neg\n", 3, "yo"),             # CRLF and CRCRLF ends are fine
])
def test_a_csv_with_a_lone_carriage_return_names_its_line(tmp_path, data, line, after):
    """It named the line after it, in Python's words ("do you need to open the file in universal-newline
    mode?"). The line is the one the csv module stops on."""
    path = tmp_path / "train.csv"
    path.write_bytes(data)
    lines = [part + "\n" for part in data.decode().split("\n")][:-1]  # as our reader: split at \n only
    reader = csv.reader(lines, strict=True)
    with pytest.raises(csv.Error, match="new-line character seen in unquoted field"):
        list(reader)
    assert reader.line_num == line
    processor = custom.CustomProcessor({"train": str(path)}, ["text"], "label", ("neg", "pos"))
    with pytest.raises(tables.GlueDataError, match=rf"^{path}:{line}: a carriage return \(\\r\) outside quotes, "
                                                   rf"not at the line's end, after '{after}'"):
        processor.check_files("", ["train"])


@pytest.mark.parametrize("name,data,line", [
    ("train.tsv", "text\tlabel\nhi\tpos\n\ufefftext\tlabel\nbye\tneg\n", 3),  # `cat a.tsv b.tsv`, b with a BOM
    ("train.csv", "text,label\nhi,pos\nbye,neg\r\ntext,label\r\nyo,pos\n", 4),
])
def test_a_header_repeated_inside_the_file_is_refused_not_made_a_class(tmp_path, name, data, line):
    """Two files joined with their headers: the second header was a row whose label 'label' became a third class."""
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8"))
    with pytest.raises(tables.GlueDataError, match=rf"^{path}:{line}: the row repeats the header row \(line 1\)"):
        custom.discover_labels(str(path), None, "label", False, [])
