"""A tokenizer or pretraining data that does not fit albert_config.json's vocab_size is refused
before any work, with one line naming both sizes (not a TensorFlow "Graph execution error")."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SEQ, PRED = 32, 5
SMALL_VOCAB = {"vocab_size": 320, "embedding_size": 8, "hidden_size": 16, "num_hidden_layers": 1,
               "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": 512}


def _run(script, *flags):
    done = subprocess.run([sys.executable, str(REPO / script), *flags], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    lines = [line for line in done.stderr.splitlines() if line.startswith(f"{script}: error:")]
    return done.returncode, lines


@pytest.fixture(scope="module")
def made_with_30k(make_pretraining_data):
    """Pretraining data made with Google's 30k-clean model, and a config with vocab_size 320."""
    records, config = make_pretraining_data("vocab", SMALL_VOCAB, SEQ, PRED)
    return {"folder": records.parent, "records": records, "config": config}


def _pretrain(data, output_dir, input_file):
    return _run("run_pretraining.py", f"--albert_config_file={data['config']}", f"--input_file={input_file}",
                f"--output_dir={output_dir}", f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}",
                "--train_batch_size=4", "--num_train_steps=2")


def test_pretraining_refuses_data_whose_summary_records_another_vocabulary(made_with_30k, tmp_path):
    summary = json.loads(pathlib.Path(str(made_with_30k["records"]) + ".summary.json").read_text())
    assert summary["vocab_size"] == 30000  # recorded by create_pretraining_data.py
    code, lines = _pretrain(made_with_30k, tmp_path / "out", made_with_30k["records"])
    assert code == 1 and len(lines) == 1, lines
    assert "30000" in lines[0] and "vocab_size 320" in lines[0] and str(made_with_30k["records"]) in lines[0]
    assert not (tmp_path / "out").exists()


def test_pretraining_checks_ids_in_graph_when_no_summary_says(made_with_30k, tmp_path):
    copy = tmp_path / "copied.tfrecord"  # a copy has no summary beside it
    copy.write_bytes(made_with_30k["records"].read_bytes())
    code, lines = _pretrain(made_with_30k, tmp_path / "out", copy)
    assert code == 1 and len(lines) == 1, lines
    assert "token id >= vocab_size 320" in lines[0] and "Graph execution" not in lines[0]
    largest = int(lines[0].rsplit(" ", 1)[1])  # the record's largest id, named at the end
    assert largest >= 320
    assert not list((tmp_path / "out").glob("*"))  # no checkpoint, no event file


@pytest.mark.parametrize("script,flags", [
    ("run_classifier.py", ["--task_name=mrpc", "--do_train", "--output_dir={out}", "--data_dir={glue}"]),
    ("run_squad.py", ["--do_predict", "--output_dir={out}", "--predict_file={squad}"]),
    ("export_model.py", ["--checkpoint=unused", "--export_path={out}"]),
])
def test_drivers_refuse_a_sentencepiece_model_of_another_size(made_with_30k, shared, tmp_path, script, flags):
    out = tmp_path / "out"
    paths = {"out": out, "glue": shared("data", "glue"), "squad": shared("data", "squad", "dev-v1.1.Super_Bowl_50.json")}
    code, lines = _run(script, f"--albert_config_file={made_with_30k['config']}",
                       f"--spm_model_file={shared('data', 'spm', '30k-clean.model')}",
                       *[f.format(**paths) for f in flags])
    assert code == 1 and len(lines) == 1, lines
    assert "has 30000 pieces" in lines[0] and "vocab_size 320" in lines[0]
    assert not out.exists()


def test_tokenizer_check_reads_remote_files(shared, tmp_path):
    """gs:// tokenizer files go through tf.io.gfile; TensorFlow's ram:// filesystem stands in for a bucket."""
    import uuid

    import tensorflow as tf

    from albert_tf.vocab_check import VocabMismatchError, check_tokenizer

    root = f"ram://vocab-check-{uuid.uuid4().hex}"
    tf.io.gfile.copy(str(shared("data", "spm", "30k-clean.model")), f"{root}/30k-clean.model")
    with tf.io.gfile.GFile(f"{root}/vocab.txt", "w") as f:
        f.write("[PAD]\n[UNK]\n\nhello\n")
    check_tokenizer(f"{root}/30k-clean.model", None, 30000, "albert_config.json")
    check_tokenizer(None, f"{root}/vocab.txt", 4, "albert_config.json")  # the blank line is the token " "
    with pytest.raises(VocabMismatchError, match="has 30000 pieces"):
        check_tokenizer(f"{root}/30k-clean.model", None, 320, "albert_config.json")


def test_a_whitespace_only_vocab_line_has_an_id(tmp_path):
    """The Chinese releases' vocab (21128 lines, vocab_size 21128) has a line holding only U+2028; the
    original's load_vocab makes it the token " " with its own id, so the tokens after it have ids up to
    21127. Counting only non-blank lines said 21127 and refused every such model."""
    from albert_tf.tokenization import FullTokenizer
    from albert_tf.vocab_check import VocabMismatchError, check_tokenizer

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n\u2028\nhello\n", encoding="utf-8")
    assert FullTokenizer(vocab_file=str(vocab)).convert_tokens_to_ids(["hello"]) == [5]  # line 6: id 5
    check_tokenizer(None, str(vocab), 6, "albert_config.json")
    with pytest.raises(VocabMismatchError, match="has 6 entries"):
        check_tokenizer(None, str(vocab), 5, "albert_config.json")
