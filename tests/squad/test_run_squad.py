"""run_squad.py end to end with a tiny model: train + predict for both heads,
predict-only that ends, and the driver's errors."""
import json
import pathlib
import subprocess
import sys

import pytest
import tensorflow as tf

REPO = pathlib.Path(__file__).resolve().parents[2]
TINY = {"vocab_size": 30000, "embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
        "num_hidden_groups": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "inner_group_num": 1, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 128,
        "type_vocab_size": 2, "initializer_range": 0.02}
SMALL = ["--max_seq_length=128", "--doc_stride=64", "--max_query_length=32",
         "--predict_batch_size=64", "--train_batch_size=16", "--learning_rate=1e-3",
         "--log_steps=2", "--iterations_per_loop=4"]


def _run(args, timeout=240):
    out = subprocess.run([sys.executable, str(REPO / "run_squad.py"), *args],
                         capture_output=True, text=True, timeout=timeout, cwd=REPO)
    return out


@pytest.fixture
def common(shared, tmp_path):
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps(TINY))
    return [f"--albert_config_file={config}", f"--spm_model_file={shared('data', 'spm', '30k-clean.model')}"]


def test_v1_train_predict_then_predict_only(common, shared, tmp_path):
    squad = shared("data", "squad")
    out_dir = tmp_path / "v1"
    run = _run([*common, *SMALL, f"--output_dir={out_dir}", "--do_train", "--do_predict",
                f"--train_file={squad / 'train-v1.1.University_of_Notre_Dame.json'}",
                f"--predict_file={squad / 'dev-v1.1.Super_Bowl_50.json'}", "--num_train_epochs=0.3"])
    assert run.returncode == 0, run.stderr[-3000:]
    predictions = json.loads((out_dir / "predictions.json").read_text())
    nbest = json.loads((out_dir / "nbest_predictions.json").read_text())
    assert len(predictions) == len(nbest) == 810 and all(predictions.values())
    assert not (out_dir / "null_odds.json").exists()
    results = (out_dir / "eval_results.txt").read_text()
    assert results.startswith("exact_match = ") and "\nf1 = " in results
    assert "exact_match" in run.stdout
    # Predict-only: no --train_file, weights from the latest checkpoint in output_dir; it ends.
    (out_dir / "predictions.json").unlink()
    again = _run([*common, *SMALL, f"--output_dir={out_dir}", "--do_predict",
                  f"--predict_file={squad / 'dev-v1.1.Super_Bowl_50.json'}"], timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Reusing cached SQuAD features" in again.stderr
    assert json.loads((out_dir / "predictions.json").read_text()) == predictions
    # Predict-only into an empty output_dir: the weights come from --init_checkpoint.
    fine_tuned = tf.train.latest_checkpoint(str(out_dir))
    elsewhere = tmp_path / "from_init"
    from_init = _run([*common, *SMALL, f"--output_dir={elsewhere}", "--do_predict",
                      f"--init_checkpoint={fine_tuned}",
                      f"--predict_feature_file={out_dir / 'predict.tf_record'}",
                      f"--predict_file={squad / 'dev-v1.1.Super_Bowl_50.json'}"], timeout=180)
    assert from_init.returncode == 0, from_init.stderr[-3000:]
    assert "Predicting with loaded" in from_init.stderr and fine_tuned in from_init.stderr
    assert not list(elsewhere.glob("model.ckpt*"))
    assert json.loads((elsewhere / "predictions.json").read_text()) == predictions


def test_v2_train_and_predict(common, shared, tmp_path):
    squad = shared("data", "squad")
    dev = json.loads(shared("data", "squad", "dev-v2.0.first5articles.json").read_text())
    train = dict(dev, data=[dict(dev["data"][0], paragraphs=dev["data"][0]["paragraphs"][:8])])
    train_file = tmp_path / "train-v2.json"
    train_file.write_text(json.dumps(train))
    out_dir = tmp_path / "v2"
    run = _run([*common, *SMALL, f"--output_dir={out_dir}", "--do_train", "--do_predict",
                "--version_2_with_negative", "--start_n_top=3", "--end_n_top=3",
                "--null_score_diff_threshold=0.0", f"--train_file={train_file}",
                f"--predict_file={squad / 'dev-v2.0.first5articles.json'}", "--num_train_epochs=1"])
    assert run.returncode == 0, run.stderr[-3000:]
    predictions = json.loads((out_dir / "predictions.json").read_text())
    null_odds = json.loads((out_dir / "null_odds.json").read_text())
    assert len(predictions) == len(null_odds) == 1407
    # The written predictions are the non-null answers with "" where the null score exceeds 0.
    nbest = json.loads((out_dir / "nbest_predictions.json").read_text())
    for qid, text in predictions.items():
        assert text == ("" if null_odds[qid] > 0.0 else nbest[qid][0]["text"])
    results = (out_dir / "eval_results.txt").read_text()
    head, tuned = results.split("# tuned on this data")
    assert "HasAns_exact = " in head and "null_score_diff_threshold = 0.0" in head
    assert "best_f1_thresh = " in tuned and "best_f1 = " not in head


# All error cases in one interpreter (one TensorFlow import): parse each argv, call main.
_ERRORS_SCRIPT = """
import json, sys
from absl import flags
import run_squad
for args in json.loads(sys.argv[1]):
    flags.FLAGS.unparse_flags()
    flags.FLAGS(["run_squad.py", *args])
    print("RC=%d" % run_squad.main([]), file=sys.stderr, flush=True)
"""


def test_driver_errors(common, shared, tmp_path):
    squad = shared("data", "squad")
    dev = f"--predict_file={squad / 'dev-v1.1.Super_Bowl_50.json'}"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "q-broken"}]}]}]}))
    cases = [
        ([f"--output_dir={tmp_path / 'a'}", "--do_predict", dev, "--max_seq_length=67",
          "--max_query_length=64"], "--max_seq_length (67) must be greater than --max_query_length (64) + 3"),
        ([f"--output_dir={tmp_path / 'b'}", "--do_predict", f"--predict_file={tmp_path / 'none.json'}"],
         "none.json: file not found"),
        ([f"--output_dir={tmp_path / 'c'}", dev], "at least one of --do_train or --do_predict"),
        ([f"--output_dir={tmp_path / 'd'}", "--max_seq_length=256", "--do_predict", dev],
         "--max_seq_length=256 exceeds max_position_embeddings (128)"),
        ([f"--output_dir={tmp_path / 'e'}", "--do_predict", dev],
         "needs a fine-tuned checkpoint: none in --output_dir"),
        ([f"--output_dir={tmp_path / 'f'}", "--do_train", f"--train_file={bad}"], "'q-broken'"),
    ]
    argvs = [[*common, "--max_seq_length=128", *args] for args, _ in cases]
    run = subprocess.run([sys.executable, "-c", _ERRORS_SCRIPT, json.dumps(argvs)],
                         capture_output=True, text=True, timeout=180, cwd=REPO)
    outputs = run.stderr.split("RC=")
    assert len(outputs) == len(cases) + 1, run.stderr[-3000:]
    for (args, message), before, after in zip(cases, outputs[:-1], outputs[1:]):
        assert after.startswith("1") and message in before, (args, before[-1500:])
