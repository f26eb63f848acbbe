"""--task_name=custom: fine-tuning on a user's own TSV, CSV or JSON Lines with named columns, labels found in
the data, bad input as one line with file:line and nothing written."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.glue import custom
from albert_tf.glue.processors import GlueDataError

REPO = pathlib.Path(__file__).resolve().parents[2]
SEQ = 24
GOOD = ["good", "great", "wonderful", "lovely", "excellent"]
BAD = ["bad", "awful", "terrible", "boring", "poor"]
THINGS = ["movie", "film", "story", "book", "show", "song"]


def sentiment_rows(n, seed):
    """(text, label) rows whose label is told by one word of the sentence."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        positive = bool(rng.integers(0, 2))
        word = rng.choice(GOOD if positive else BAD)
        rows.append((f"the {rng.choice(THINGS)} was {word}", "pos" if positive else "neg"))
    return rows


def run_classifier(*args, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, str(REPO / "run_classifier.py"), *args], capture_output=True, text=True,
                          env=env, timeout=timeout)


def _train_args(tiny_config_file, spm_model, out, steps):
    return ["--task_name=custom", f"--albert_config_file={tiny_config_file}", f"--spm_model_file={spm_model}",
            f"--output_dir={out}", f"--max_seq_length={SEQ}", "--train_batch_size=16", "--eval_batch_size=8",
            "--predict_batch_size=8", f"--train_step={steps}", f"--save_checkpoints_steps={steps // 2}",
            "--learning_rate=1e-3", f"--warmup_step={steps // 10}", f"--log_steps={steps // 2}",
            f"--iterations_per_loop={steps}"]


# ---- reading ----
def test_csv_with_quoted_commas_and_a_pair_of_texts(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text('question,answer,label\n"Is it red, or blue?","It is red, not ""blue""",yes\n'
                    '"Two\nlines?",one line,no\n', encoding="utf-8")
    processor = custom.CustomProcessor({"train": str(path)}, ["question", "answer"], "label", ("no", "yes"))
    examples = processor.get_examples("", "train")
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [
        ("Is it red, or blue?", 'It is red, not "blue"', "yes"), ("Two\nlines?", "one line", "no")]
    assert processor.spec.num_labels == 2 and custom.is_pair(processor.spec)


def test_labels_are_found_sorted_and_scores_are_a_regression(tmp_path, caplog):
    tsv = tmp_path / "train.tsv"
    tsv.write_text("text\tlabel\n\ufeffx\tneutral\ny\tnegative\nz\tpositive\nw\tnegative\n", encoding="utf-8")
    assert custom.discover_labels(str(tsv), None, "label", False, []) == ("negative", "neutral", "positive")
    jsonl = tmp_path / "scores.jsonl"
    jsonl.write_text('{"s": "a", "score": 0.5}\n\n{"s": "b", "score": 3}\n', encoding="utf-8")
    with caplog.at_level("INFO"):
        assert custom.discover_labels(str(jsonl), None, "score", False, []) is None
    assert "training a regression" in caplog.text
    integers = tmp_path / "stars.jsonl"
    integers.write_text('{"s": "a", "stars": 1}\n{"s": "b", "stars": 5}\n', encoding="utf-8")
    assert custom.discover_labels(str(integers), None, "stars", False, []) == ("1", "5")
    assert custom.discover_labels(str(integers), None, "stars", True, []) is None  # --regression
    # A predict-only run reads the training run's labels.txt.
    custom.write_labels(str(tmp_path), ("neg", "pos"))
    assert custom.discover_labels(None, None, "label", False, [str(tmp_path / "none"), str(tmp_path)]) == (
        "neg", "pos")
    emptied = tmp_path / "emptied"  # e.g. a copy cut short: one line naming it, not a shape error later
    emptied.mkdir()
    (emptied / "labels.txt").write_text("")
    with pytest.raises(GlueDataError, match=f"{emptied / 'labels.txt'} holds 0 label\\(s\\); expected"):
        custom.discover_labels(None, None, "label", False, [str(emptied)])


@pytest.mark.parametrize("name,content,message", [
    ("missing_column.tsv", "sentence\tlabel\nhello\tpos\n", ":2: no column 'text'; the columns found are "
                                                             "'sentence', 'label'"),
    ("short_row.csv", "text,label\nfine,pos\nnothing\n", ":3: expected 2 fields (text, label), found 1"),
    ("empty_text.jsonl", '{"text": "ok", "label": "pos"}\n{"text": " ", "label": "neg"}\n',
     ":2: empty text in column 'text'"),
    ("empty.tsv", "", ":1: empty file"),
    ("header_only.csv", "text,label\n", ":1: the file has a header row but no rows of data"),
    ("latin1.tsv", "text\tlabel\ncaf\xe9\tpos\n".encode("latin-1"), ":2: not valid UTF-8"),
    ("not_json.jsonl", '{"text": "ok", "label": "pos"}\n{"text": oops}\n', ":2: not a JSON object"),
])
def test_bad_rows_name_the_file_and_line(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    processor = custom.CustomProcessor({"train": str(path)}, ["text"], "label", ("neg", "pos"))
    with pytest.raises(GlueDataError) as error:
        processor.check_files("", ["train"])
    assert str(error.value).startswith(f"{path}{message}")


def test_a_dev_label_unseen_in_training_is_refused(tmp_path):
    dev = tmp_path / "dev.tsv"
    dev.write_text("text\tlabel\na\tpos\nb\tmixed\n", encoding="utf-8")
    processor = custom.CustomProcessor({"dev": str(dev)}, ["text"], "label", ("neg", "pos"))
    with pytest.raises(GlueDataError, match=rf"{dev}:3: label 'mixed' is not among the training file's labels"):
        processor.check_files("", ["dev"])


# ---- the driver ----
def test_driver_errors_exit_1_and_write_nothing(tmp_path, tiny_config_file, spm_model, driver_errors):
    train = tmp_path / "train.tsv"
    train.write_text("text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in sentiment_rows(8, 0)))
    dev = tmp_path / "dev.tsv"
    dev.write_text("text\tlabel\nfine\tpos\n\tneg\n")
    three = tmp_path / "three.tsv"
    three.write_text("text\tlabel\na\tx\nb\ty\nc\tz\n")
    out = tmp_path / "out"
    base = _train_args(tiny_config_file, spm_model, out, 10)
    theirs = tmp_path / "their_folder"
    theirs.mkdir()
    (theirs / "labels.txt").write_text("my own notes on labels\n")
    results = driver_errors({
        "a labels.txt not of this run": [*_train_args(tiny_config_file, spm_model, theirs, 10), "--do_train",
                                         f"--train_file={train}", "--text_columns=text"],
        "empty dev text": [*base, "--do_train", "--do_eval", f"--train_file={train}", f"--dev_file={dev}",
                           "--text_columns=text"],
        "missing column": [*base, "--do_train", f"--train_file={train}", "--text_columns=sentence"],
        "no labels anywhere": [*base, "--do_predict", f"--test_file={dev}", "--text_columns=text"],
        "f1 of three labels": [*base, "--do_train", f"--train_file={three}", "--text_columns=text",
                               "--key_metric=f1"],
    })
    assert results["empty dev text"]["stderr"] == f"run_classifier.py: error: {dev}:3: empty text in column 'text'\n"
    assert f"{train}:2: no column 'sentence'; the columns found are 'text', 'label'" in \
        results["missing column"]["stderr"]
    assert "needs the labels of the training run: no labels.txt" in results["no labels anywhere"]["stderr"]
    assert "--key_metric=f1: not available for this data (3 labels); use one of ['accuracy']" in \
        results["f1 of three labels"]["stderr"]
    assert results["a labels.txt not of this run"]["stderr"] == (
        f"run_classifier.py: error: {theirs / 'labels.txt'} exists and does not list this run's labels (neg, pos); "
        "it is another file or a run on other labels: pick another --output_dir or move it away\n")
    assert all(r["code"] == 1 for r in results.values()), results
    assert not out.exists() or not any(out.iterdir())  # nothing written
    assert (theirs / "labels.txt").read_text() == "my own notes on labels\n"


def _load_export(out):
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    (version,) = os.listdir(out / "export")
    return tf.saved_model.load(str(out / "export" / version))


def test_sentiment_tsv_trains_predicts_with_label_strings_and_exports(tmp_path, tiny_config_file, spm_model):
    for split, n, seed in (("train", 160, 0), ("dev", 40, 1), ("test", 12, 2)):
        rows = sentiment_rows(n, seed)
        (tmp_path / f"{split}.tsv").write_text("id\ttext\tsentiment\n" + "".join(
            f"{i}\t{text}\t{label}\n" for i, (text, label) in enumerate(rows)), encoding="utf-8")
    out = tmp_path / "out"
    proc = run_classifier(*_train_args(tiny_config_file, spm_model, out, 100), "--do_train", "--do_eval",
                          "--do_predict", f"--train_file={tmp_path / 'train.tsv'}",
                          f"--dev_file={tmp_path / 'dev.tsv'}", f"--test_file={tmp_path / 'test.tsv'}",
                          "--text_columns=text", "--label_column=sentiment", f"--export_dir={out / 'export'}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "F1 and Matthews correlation score 'pos' as the positive class (it names a positive)" in proc.stderr
    assert (out / "labels.txt").read_text() == "neg\npos\n"
    blocks = [dict(line.split(" = ") for line in b.strip().splitlines())
              for b in (out / "eval_results.txt").read_text().split("=" * 50) if b.strip()]
    dev_labels = [label for _, label in sentiment_rows(40, 1)]
    majority = max(dev_labels.count("pos"), dev_labels.count("neg")) / len(dev_labels)
    assert float(blocks[-1]["eval_accuracy"]) >= majority + 0.3, (blocks, majority)
    assert {"f1", "matthew_corr"} <= set(blocks[-1])  # binary: both available
    # Predictions carry the label strings; the exported model predicts the same.
    submit = (out / "submit_results.tsv").read_text().splitlines()
    assert submit[0] == "index\tprediction" and len(submit) == 13
    predicted = [line.split("\t")[1] for line in submit[1:]]
    assert set(predicted) <= {"neg", "pos"}
    texts = [text for text, _ in sentiment_rows(12, 2)]
    served = _load_export(out).signatures["serving_text"](text_a=tf.constant(texts))
    assert [label.decode() for label in served["labels"].numpy()] == predicted
    probs = np.loadtxt(out / "test_results.tsv", delimiter="\t", ndmin=2)
    np.testing.assert_allclose(served["probabilities"].numpy(), probs, atol=1e-5)

    # Predict-only elsewhere, from the best checkpoint: the labels come from its labels.txt.
    again = tmp_path / "again"
    proc = run_classifier("--task_name=custom", f"--albert_config_file={tiny_config_file}",
                          f"--spm_model_file={spm_model}", f"--output_dir={again}", f"--max_seq_length={SEQ}",
                          "--do_predict", f"--test_file={tmp_path / 'test.tsv'}", "--text_columns=text",
                          f"--init_checkpoint={out / 'model.ckpt-best'}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (again / "submit_results.tsv").read_text() == (out / "submit_results.tsv").read_text()


def test_jsonl_regression_learns_the_score(tmp_path, tiny_config_file, spm_model):
    """The score is the share of good words among two adjectives; detected as a regression."""
    rng = np.random.default_rng(3)
    for split, n in (("train", 160), ("dev", 40)):
        with open(tmp_path / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for _ in range(n):
                good = int(rng.integers(0, 3))
                words = [*rng.choice(GOOD, good), *rng.choice(BAD, 2 - good)]
                f.write(json.dumps({"review": f"it was {' and '.join(rng.permutation(words))}",
                                    "score": good / 2 + 0.25}) + "\n")
    out = tmp_path / "out"
    proc = run_classifier(*_train_args(tiny_config_file, spm_model, out, 100), "--do_train", "--do_eval",
                          f"--train_file={tmp_path / 'train.jsonl'}", f"--dev_file={tmp_path / 'dev.jsonl'}",
                          "--text_columns=review", "--label_column=score")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "training a regression" in proc.stderr
    assert (out / "labels.txt").read_text() == "# regression\n"
    last = [dict(line.split(" = ") for line in b.strip().splitlines())
            for b in (out / "eval_results.txt").read_text().split("=" * 50) if b.strip()][-1]
    assert {"pearson", "spearman", "MSE"} <= set(last)
    assert float(last["pearson"]) > 0.8, last  # measured: 0.90


def test_a_tsv_with_cr_only_line_endings_is_named_as_the_cause(tmp_path):
    """Saved with CR-only line endings, a TSV of your own is one line: it said 'empty file: no rows of data'
    (or named a missing column), not why."""
    path = tmp_path / "train.tsv"
    path.write_bytes(b"text\tlabel\rhello\tpos\rbye\tneg\r")
    processor = custom.CustomProcessor({"train": str(path)}, ["text"], "label", ("neg", "pos"))
    with pytest.raises(GlueDataError) as error:
        processor.check_files("", ["train"])
    message = str(error.value)
    assert message.startswith(f"{path}:1: the header row is ") and "carriage return" in message, message
    assert "LF or CRLF line endings" in message
