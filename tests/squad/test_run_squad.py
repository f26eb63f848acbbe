"""run_squad.py end to end with a tiny model: train + predict for both heads,
predict-only that ends, and the driver's errors."""
import json
import pathlib
import re
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


def _summary_block(stdout: str, name: str) -> list[str]:
    """The lines under ``name`` in the driver's closing summary."""
    lines = stdout[stdout.index("run_squad.py: done"):].splitlines()
    block = []
    for line in lines[lines.index(f"  {name}:") + 1:]:
        if not line.startswith("    "):
            break
        block.append(line.strip())
    return block


def _summary_line(stdout: str, name: str) -> str | None:
    """The value of ``  name: value`` in the driver's closing summary (None when it is not there)."""
    for line in stdout[stdout.index("run_squad.py: done"):].splitlines():
        if line.startswith(f"  {name}: "):
            return line.split(": ", 1)[1]
    return None


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
                f"--predict_file={squad / 'dev-v1.1.Super_Bowl_50.json'}", "--num_train_epochs=0.3",
                "--save_checkpoints_steps=3", f"--export_dir={tmp_path / 'export'}"])
    assert run.returncode == 0, run.stderr[-3000:]
    predictions = json.loads((out_dir / "predictions.json").read_text())
    nbest = json.loads((out_dir / "nbest_predictions.json").read_text())
    assert len(predictions) == len(nbest) == 810 and all(predictions.values())
    assert not (out_dir / "null_odds.json").exists()
    # The closing summary: a path per line, the metrics as the last block of eval_results.txt writes them.
    assert {pathlib.Path(p) for p in _summary_block(run.stdout, "predictions")} == {
        out_dir / "predictions.json", out_dir / "nbest_predictions.json"}
    exported = [pathlib.Path(p) for p in _summary_block(run.stdout, "export")]  # the SavedModel and the .tflite
    assert len(exported) == 2 and all(p.exists() and tmp_path / "export" in p.parents for p in exported)
    # Every checkpoint scored (one block each), the best by F1 kept and named at the end.
    results = (out_dir / "eval_results.txt").read_text()
    blocks, final = results.split("=" * 50 + "\n")[:-1], results.split("=" * 50 + "\n")[-1]
    scored = [dict(line.split(" = ") for line in block.splitlines() if " = " in line) for block in blocks]
    assert len(scored) == len([p for p in out_dir.glob("model.ckpt-*.index")
                                if re.fullmatch(r"model\.ckpt-\d+\.index", p.name)]) >= 2
    assert all(block.startswith("exact_match = ") for block in blocks)
    f1s = [float(b["f1"]) for b in scored]
    assert [float(b["best f1"]) for b in scored] == [max(f1s[:i + 1]) for i in range(len(f1s))]
    assert (out_dir / "model.ckpt-best.index").exists()
    best_step = int((out_dir / "best_trial.txt").read_text().split(":")[1])
    assert final.rstrip().endswith(f"best perf happened at step: {best_step}")
    assert sorted(_summary_block(run.stdout, "metrics")) == sorted(line for line in final.splitlines() if " = " in line)
    assert float(final.split("\nf1 = ")[1].split("\n")[0]) == max(f1s)
    # The written predictions are the best checkpoint's: rescoring them gives its F1.
    from albert_tf.squad import evaluate
    rescored = evaluate.evaluate(json.loads((squad / 'dev-v1.1.Super_Bowl_50.json').read_text()), predictions)
    assert abs(rescored["f1"] - max(f1s)) < 1e-9
    _check_export(tmp_path / "export", out_dir / "model.ckpt-best", tmp_path)
    # Predict-only: no --train_file, weights from the latest checkpoint in output_dir; it ends.
    (out_dir / "predictions.json").unlink()
    again = _run([*common, *SMALL, f"--output_dir={out_dir}", "--do_predict",
                  f"--predict_file={squad / 'dev-v1.1.Super_Bowl_50.json'}"], timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "Reusing cached SQuAD features" in again.stderr
    assert json.loads((out_dir / "predictions.json").read_text()) == predictions
    # Predict-only into an empty output_dir: the weights come from --init_checkpoint.
    fine_tuned = str(out_dir / "model.ckpt-best")  # what the predictions above came from
    elsewhere = tmp_path / "from_init"
    elsewhere.mkdir()
    earlier = "exact_match = 1.0\nf1 = 2.0\n" + "=" * 50 + "\n"  # an earlier run's block: kept, as the README says
    (elsewhere / "eval_results.txt").write_text(earlier)
    from_init = _run([*common, *SMALL, f"--output_dir={elsewhere}", "--do_predict",
                      f"--init_checkpoint={fine_tuned}",
                      f"--predict_feature_file={out_dir / 'predict.tf_record'}",
                      f"--predict_file={squad / 'dev-v1.1.Super_Bowl_50.json'}"], timeout=180)
    assert from_init.returncode == 0, from_init.stderr[-3000:]
    assert "Predicting with loaded" in from_init.stderr and fine_tuned in from_init.stderr
    assert not list(elsewhere.glob("model.ckpt*"))
    assert json.loads((elsewhere / "predictions.json").read_text()) == predictions
    assert _summary_line(from_init.stdout, "eval_results") == str(elsewhere / "eval_results.txt")
    text = (elsewhere / "eval_results.txt").read_text()
    assert text.startswith(earlier) and text.endswith("=" * 50 + "\n") and text.count("=" * 50) == 2
    assert float(text[len(earlier):].split("\nf1 = ")[1].split("\n")[0]) == pytest.approx(max(f1s), abs=1e-9)


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
    # Each checkpoint's block: the tuned thresholds under their comment; the best by original_f1.
    results = (out_dir / "eval_results.txt").read_text()
    first = results.split("=" * 50 + "\n")[0]
    head, tuned = first.split("# tuned on this data")
    assert "HasAns_exact = " in head and "null_score_diff_threshold = 0.0" in head
    assert "best_f1_thresh = " in tuned and "\nbest_f1 = " not in head and "best original_f1 = " in tuned
    assert "best perf happened at step: " in results and (out_dir / "model.ckpt-best.index").exists()


def _small_dev(shared, tmp_path, version_2: bool) -> pathlib.Path:
    """About 60 questions of a shipped dev file (for 2.0 mostly answerable ones, so that answering
    beats the all-null baseline that would tie every model's original_f1)."""
    name = "dev-v2.0.first5articles.json" if version_2 else "dev-v1.1.Super_Bowl_50.json"
    dev = json.loads(shared("data", "squad", name).read_text())
    paragraphs = []
    for paragraph in dev["data"][0]["paragraphs"][:12]:
        qas = [q for q in paragraph["qas"] if not q.get("is_impossible")] or paragraph["qas"][:1]
        paragraphs.append(dict(paragraph, qas=qas[:5]))
    path = tmp_path / name
    path.write_text(json.dumps(dict(dev, data=[dict(dev["data"][0], paragraphs=paragraphs)])))
    return path


@pytest.mark.parametrize("version_2", [False, True], ids=["v1_by_f1", "v2_by_original_f1"])
def test_best_checkpoint_is_the_best_scored_one_not_the_latest(common, shared, tmp_path, version_2):
    """Three checkpoints whose best is the middle one: model.ckpt-best holds that step's weights
    (not the latest's), chosen by f1 (1.1) or original_f1 (2.0, the original's re-thresholded F1)."""
    import numpy as np

    from albert_tf import AlbertConfig
    from albert_tf.keras import keras
    from albert_tf.squad.heads import build_squad_model
    from albert_tf.weights import save_model_checkpoint

    key = "original_f1" if version_2 else "f1"
    models = []
    for seed in (1, 2, 3):  # three different random models
        keras.utils.set_random_seed(seed)
        models.append(build_squad_model(AlbertConfig(**TINY), version_2, 3, 3))
    flags = [*common, *SMALL, "--do_predict", f"--predict_file={_small_dev(shared, tmp_path, version_2)}",
             f"--predict_feature_file={tmp_path / 'predict.tf_record'}"]
    if version_2:
        flags += ["--version_2_with_negative", "--start_n_top=3", "--end_n_top=3"]

    def score(order, folder):
        for step, index in enumerate(order, start=1):
            save_model_checkpoint(models[index], str(folder / f"model.ckpt-{step}"))
        run = _run([*flags, f"--output_dir={folder}"], timeout=300)
        assert run.returncode == 0, run.stderr[-3000:]
        blocks = (folder / "eval_results.txt").read_text().split("=" * 50 + "\n")[:-1]
        parsed = [dict(line.split(" = ") for line in block.splitlines() if " = " in line) for block in blocks]
        return [float(b[key]) for b in parsed], [float(b["best " + key]) for b in parsed]

    scores, _ = score([0, 1, 2], tmp_path / "scratch")
    assert len(set(scores)) == 3, scores  # distinct, so "the best" is one checkpoint
    worst, middle, best = sorted(range(3), key=lambda i: scores[i])
    order = [worst, best, middle]  # the best is step 2; the last step is not the best
    values, best_lines = score(order, tmp_path / "run")
    assert values == [scores[i] for i in order]
    assert best_lines == [values[0], values[1], values[1]]
    folder = tmp_path / "run"
    assert int((folder / "best_trial.txt").read_text().split(":")[1]) == 2
    kept = tf.train.load_checkpoint(str(folder / "model.ckpt-best"))
    names = [n for n in kept.get_variable_to_shape_map() if n.startswith("model/")]
    assert names
    for step, same in ((2, True), (3, False)):
        other = tf.train.load_checkpoint(str(folder / f"model.ckpt-{step}"))
        equal = all(np.array_equal(kept.get_tensor(n), other.get_tensor(n)) for n in names)
        assert equal is same, step


def _check_export(export_dir, checkpoint, tmp_path):
    """The SavedModel and the TFLite file of --export_dir, reloaded, give the Keras model's logits."""
    import numpy as np
    import tensorflow as tf
    from ai_edge_litert.interpreter import Interpreter  # LiteRT: tf.lite.Interpreter is deprecated

    from albert_tf import AlbertConfig
    from albert_tf.squad.heads import SquadV1Model
    from albert_tf.weights import load_checkpoint

    model = SquadV1Model(AlbertConfig(**TINY))
    load_checkpoint(model, str(checkpoint))
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 30000, size=(1, 128)).astype(np.int32)
    mask = (np.arange(128) < 90).astype(np.int32)[None]
    feats = {"input_ids": ids * mask, "input_mask": mask,
             "segment_ids": (np.arange(128) >= 20).astype(np.int32)[None] * mask}
    want = {k: v.numpy() for k, v in model(feats, training=False).items()}
    (saved,) = (export_dir / "saved_model").iterdir()
    served = tf.saved_model.load(str(saved)).signatures["serving_default"](
        **{k: tf.constant(v) for k, v in feats.items()})
    interpreter = Interpreter(model_path=str(export_dir / "albert_model.tflite"))
    lite = interpreter.get_signature_runner("serving_default")(**feats)
    for name in ("start_logits", "end_logits"):
        assert served[name].shape == (1, 128)
        assert np.abs(served[name].numpy() - want[name]).max() <= 1e-4, name
        assert np.abs(lite[name] - want[name]).max() <= 1e-4, name


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
    train = f"--train_file={squad / 'train-v1.1.University_of_Notre_Dame.json'}"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "q-broken"}]}]}]}))
    past_end = tmp_path / "past_end.json"  # starts inside the context, ends past it: was an IndexError
    past_end.write_text(json.dumps({"data": [{"paragraphs": [{"context": "A short context.", "qas": [
        {"id": "q-past-end", "question": "What?",
         "answers": [{"text": "a long answer text", "answer_start": 14}]}]}]}]}))
    shifted = tmp_path / "shifted.json"  # trained on the span at answer_start ("A sho"), silently
    shifted.write_text(json.dumps({"data": [{"paragraphs": [{"context": "A short context.", "qas": [
        {"id": "q-shifted", "question": "What?", "answers": [{"text": "short", "answer_start": 0}]}]}]}]}))
    no_questions = tmp_path / "no_questions.json"  # named the internal cache (train), a KeyError (predict)
    no_questions.write_text(json.dumps({"version": "1.1", "data": []}))
    users_export = tmp_path / "users_export"  # a folder holding someone else's albert_model.tflite
    users_export.mkdir()
    (users_export / "albert_model.tflite").write_bytes(b"TFL3 not ours")
    cases = [
        ([f"--output_dir={tmp_path / 'a'}", "--do_predict", dev, "--max_seq_length=67",
          "--max_query_length=64"], "--max_seq_length (67) must be greater than --max_query_length (64) + 3"),
        ([f"--output_dir={tmp_path / 'b'}", "--do_predict", f"--predict_file={tmp_path / 'none.json'}"],
         "none.json: file not found"),
        ([f"--output_dir={tmp_path / 'c'}", dev], "at least one of --do_train, --do_predict or --export_dir"),
        ([f"--output_dir={tmp_path / 'g'}", "--do_predict", dev, "--version_2_with_negative",
          f"--export_dir={tmp_path / 'x'}"], "--export_dir exports the SQuAD 1.1 span model"),
        ([f"--output_dir={tmp_path / 'h'}", f"--export_dir={users_export}"],
         f"{users_export / 'albert_model.tflite'} is not a SQuAD span model from this export"),
        ([f"--output_dir={tmp_path / 'd'}", "--max_seq_length=256", "--do_predict", dev],
         "--max_seq_length=256 exceeds max_position_embeddings (128)"),
        ([f"--output_dir={tmp_path / 'e'}", "--do_predict", dev],
         "needs a fine-tuned checkpoint: none in --output_dir"),
        ([f"--output_dir={tmp_path / 'f'}", "--do_train", f"--train_file={bad}"], "'q-broken'"),
        # max(1, ...) of the step count trained one step and ended well
        ([f"--output_dir={tmp_path / 'epochs0'}", "--do_train", train, "--num_train_epochs=0"],
         "--num_train_epochs must be > 0, got 0.0"),
        ([f"--output_dir={tmp_path / 'epochs_neg'}", "--do_train", train, "--num_train_epochs=-2"],
         "--num_train_epochs must be > 0, got -2.0"),
        ([f"--output_dir={tmp_path / 'lr_neg'}", "--do_train", train, "--learning_rate=-5e-5"],
         "--learning_rate must be >= 0, got -5e-05"),
        ([f"--output_dir={tmp_path / 'warmup_neg'}", "--do_train", train, "--warmup_proportion=-0.1"],
         "--warmup_proportion must be >= 0, got -0.1"),
        ([f"--output_dir={tmp_path / 'train_batch_0'}", "--do_train", train, "--train_batch_size=0"],
         "--train_batch_size must be >= 1, got 0"),
        ([f"--output_dir={tmp_path / 'save_0'}", "--do_train", train, "--save_checkpoints_steps=0"],
         "--save_checkpoints_steps must be >= 1, got 0"),
        ([f"--output_dir={tmp_path / 'warmup_long'}", "--do_train", train, "--warmup_proportion=1.5",
          "--max_seq_length=256"], "--max_seq_length=256 exceeds max_position_embeddings (128)"),
        # 2.0's flags on a 1.1 run: ignored (while --mask_padding_positions on 2.0 was refused)
        ([f"--output_dir={tmp_path / 'v2_flags_on_v1'}", "--do_train", train, "--start_n_top=3", "--end_n_top=2",
          "--null_score_diff_threshold=5"], "--start_n_top, --end_n_top, --null_score_diff_threshold are for "
                                            "SQuAD 2.0 (--version_2_with_negative); this run is SQuAD 1.1"),
        ([f"--output_dir={tmp_path / 'v2_dropout'}", "--do_train", train, "--version_2_with_negative",
          "--dropout_prob=1"], "--dropout_prob must be in [0, 1), got 1.0"),
        ([f"--output_dir={tmp_path / 'past_end'}", "--do_train", f"--train_file={past_end}"],
         f"{past_end}: question id 'q-past-end': answer text (18 characters from answer_start 14) runs past "
         f"the end of its context (length 16)"),
        ([f"--output_dir={tmp_path / 'shifted'}", "--do_train", f"--train_file={shifted}"],
         f"{shifted}: question id 'q-shifted': answer text 'short' is not at answer_start 0: the context has "
         f"'A sho' there"),
        ([f"--output_dir={tmp_path / 'empty_train'}", "--do_train", f"--train_file={no_questions}"],
         f"SQuAD file {no_questions} holds no questions"),
        ([f"--output_dir={tmp_path / 'empty_predict'}", "--do_predict", f"--predict_file={no_questions}"],
         f"SQuAD file {no_questions} holds no questions"),
        ([f"--output_dir={tmp_path / 'empty_predict_after_training'}", "--do_train", train, "--do_predict",
          f"--predict_file={no_questions}"], f"SQuAD file {no_questions} holds no questions"),
        # opened only after the train and predict features were written into --output_dir
        ([f"--output_dir={tmp_path / 'init_typo'}", "--do_train", train, "--do_predict", dev,
          f"--init_checkpoint={tmp_path / 'model.ckpt-bset'}"],
         f"--init_checkpoint: checkpoint not found: {tmp_path / 'model.ckpt-bset'}"),
    ]
    argvs = [[*common, "--max_seq_length=128", *args] for args, _ in cases]
    run = subprocess.run([sys.executable, "-c", _ERRORS_SCRIPT, json.dumps(argvs)],
                         capture_output=True, text=True, timeout=180, cwd=REPO)
    outputs = run.stderr.split("RC=")
    assert len(outputs) == len(cases) + 1, run.stderr[-3000:]
    for (args, message), before, after in zip(cases, outputs[:-1], outputs[1:]):
        assert after.startswith("1") and message in before, (args, before[-1500:])
        errors = [line for line in before.splitlines() if "run_squad.py: error:" in line]
        assert len(errors) == 1 and message in errors[0] and "Traceback" not in before, (args, before[-1500:])
        output_dir = pathlib.Path(args[0].split("=", 1)[1])
        assert not output_dir.exists(), (args, list(output_dir.iterdir()))
    assert (users_export / "albert_model.tflite").read_bytes() == b"TFL3 not ours"
    # accepted, as the original, with a warning (case 'warmup_long', stopped by its length)
    warned = [before for (args, _), before in zip(cases, outputs) if "--warmup_proportion=1.5" in args]
    assert "--warmup_proportion=1.5 is above 1" in warned[0] and "is above 1" not in outputs[0]


def test_a_file_of_the_other_squad_version_is_accepted_with_one_warning(common, shared, tmp_path, driver_cases):
    """The file's version (is_impossible, or its version key) against --version_2_with_negative: silent before,
    as in the original. These runs stop at the config's vocabulary size, after both files were read."""
    squad = shared("data", "squad")
    v1_train, v2_dev = squad / "train-v1.1.University_of_Notre_Dame.json", squad / "dev-v2.0.first5articles.json"
    v1_dev = squad / "dev-v1.1.Super_Bowl_50.json"
    unlabelled = tmp_path / "unlabelled.json"  # a file to predict carries no answers: its version is unknown
    unlabelled.write_text(json.dumps({"data": [{"paragraphs": [{"context": "c", "qas": [
        {"id": "q1", "question": "q?"}]}]}]}))
    config = tmp_path / "vocab_1000.json"
    config.write_text(json.dumps({**TINY, "vocab_size": 1000}))
    v2 = json.loads(v2_dev.read_text())
    qas = [qa for article in v2["data"] for p in article["paragraphs"] for qa in p["qas"]]
    impossible = sum(bool(qa.get("is_impossible")) for qa in qas)
    base = [*common, f"--albert_config_file={config}", f"--output_dir={tmp_path / 'out'}", "--max_seq_length=128"]
    results = driver_cases("run_squad", {
        "v2 files, v1 flag": [*base, "--do_train", f"--train_file={v2_dev}", "--do_predict",
                              f"--predict_file={v2_dev}"],
        "v1 files, v2 flag": [*base, "--version_2_with_negative", "--do_train", f"--train_file={v1_train}",
                              "--do_predict", f"--predict_file={v1_dev}"],
        "matching": [*base, "--do_train", f"--train_file={v1_train}", "--do_predict", f"--predict_file={v1_dev}"],
        "unlabelled under v2": [*base, "--version_2_with_negative", "--do_predict", f"--predict_file={unlabelled}"],
    })
    for result in results.values():  # stopped by the vocabulary size (1000 against the model's 30000)
        assert result["code"] == 1 and "30000" in result["stderr"], result

    def version_warnings(name):
        return [w for w in results[name]["warnings"] if "--version_2_with_negative" in w]

    assert version_warnings("v2 files, v1 flag") == [
        f"--train_file={v2_dev} is SQuAD 2.0 ({impossible} of {len(qas)} questions unanswerable) but "
        f"--version_2_with_negative is not set: the SQuAD 1.1 head learns its unanswerable questions as answers "
        f"at [CLS]",
        f"--predict_file={v2_dev} is SQuAD 2.0 ({impossible} of {len(qas)} questions unanswerable) but "
        f"--version_2_with_negative is not set: the SQuAD 1.1 head answers every question"]
    assert version_warnings("v1 files, v2 flag") == [
        f"--{flag}={path} is SQuAD 1.1 (no question is unanswerable) but --version_2_with_negative is set: the "
        f"SQuAD 2.0 head is used on it" for flag, path in (("train_file", v1_train), ("predict_file", v1_dev))]
    assert version_warnings("matching") == [] and version_warnings("unlabelled under v2") == []
    assert 0 < impossible < len(qas)



def _tf1_checkpoint(prefix, step: int | None) -> None:
    """What the original's Estimator saved (TF1 names, global_step) or, without a step, a release's."""
    with tf.Graph().as_default():
        tf.compat.v1.Variable([1.0], name="bert/embeddings/LayerNorm/beta")
        if step is not None:
            tf.compat.v1.train.get_or_create_global_step().assign(step)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            tf.compat.v1.train.Saver().save(session, str(prefix), global_step=step, write_meta_graph=False)


@pytest.mark.parametrize("folder_kind", ["original_run", "release"])
def test_a_refused_folder_gets_no_training_features(common, shared, tmp_path, folder_kind):
    """Training in the original's run folder (its checkpoints cannot be resumed) or scoring into a release's
    folder (its model.ckpt-best would be replaced) is refused, but only after the task was made, which built
    the training feature cache (train.tf_record and its .json, minutes on all of SQuAD) into that folder.
    Now nothing there changes."""
    squad = shared("data", "squad")
    folder = tmp_path / folder_kind
    folder.mkdir()
    if folder_kind == "original_run":
        _tf1_checkpoint(folder / "model.ckpt", 4)
        extra, error = [], f"{folder / 'model.ckpt-4'} was written by the original (TF1) code"
    else:
        _tf1_checkpoint(folder / "model.ckpt-best", None)
        extra = ["--do_predict", f"--predict_file={squad / 'dev-v1.1.Super_Bowl_50.json'}"]
        error = f"{folder / 'model.ckpt-best'} is not from an evaluation in this folder"
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    run = _run([*common, *SMALL, f"--output_dir={folder}", "--do_train", "--num_train_epochs=0.1",
                f"--train_file={squad / 'train-v1.1.University_of_Notre_Dame.json'}", *extra])
    assert run.returncode == 1, run.stderr[-3000:]
    assert run.stderr.strip().splitlines()[-1].startswith(f"run_squad.py: error: {error}"), run.stderr[-3000:]
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_an_init_checkpoint_of_another_config_is_one_line_before_any_work(common, shared, tmp_path, driver_cases,
                                                                         misfit_init_checkpoints):
    """Weights that do not fit --albert_config_file were first read after the training features were built
    into --output_dir, and their error was a line per weight (25 for a larger model). Now one line, the
    first weight and the config flag, before anything is written (a predict-only run's too)."""
    squad = shared("data", "squad")
    config = tmp_path / "albert_config.json"
    misfits = misfit_init_checkpoints(TINY, tmp_path / "weights", config)
    train = ["--do_train", f"--train_file={squad / 'train-v1.1.University_of_Notre_Dame.json'}",
             "--num_train_epochs=0.01"]
    cases = {name: [*common, *SMALL, f"--output_dir={tmp_path / name}", *train, f"--init_checkpoint={prefix}"]
             for name, (prefix, _) in misfits.items()}
    cases["predict only"] = [*common, *SMALL, f"--output_dir={tmp_path / 'predict only'}", "--do_predict",
                             f"--predict_file={squad / 'dev-v1.1.Super_Bowl_50.json'}",
                             f"--init_checkpoint={misfits['larger'][0]}"]
    results = driver_cases("run_squad", cases)
    for name in cases:
        message = misfits["larger" if name == "predict only" else name][1]
        assert results[name]["code"] == 1, (name, results[name])
        assert results[name]["stderr"] == f"run_squad.py: error: {message}\n", name
        assert not (tmp_path / name).exists(), name


def test_a_feature_file_another_run_holds_is_refused_in_one_line(common, shared, tmp_path):
    """--train_feature_file outside --output_dir, held by another live run (two runs sharing one feature file,
    a common habit with the original): this run stops with one line naming the cache and the holder, before
    writing the cache or anything in its --output_dir. It built the cache under the other run before."""
    import socket

    from albert_tf.processes import process_start_ticks

    squad = shared("data", "squad")
    features = tmp_path / "features"
    features.mkdir()
    cache = features / "train.tf_record"
    holder = subprocess.Popen(["sleep", "300"])  # stands in for the other run's live process
    try:
        record = {"host": socket.gethostname(), "pid": holder.pid, "start_ticks": process_start_ticks(holder.pid),
                  "started": "2026-01-01T00:00:00+00:00"}
        (features / "train.tf_record.lock").write_text(json.dumps(record) + "\n")
        run = _run([*common, *SMALL, f"--output_dir={tmp_path / 'out'}", "--do_train", "--num_train_epochs=0.1",
                    f"--train_file={squad / 'train-v1.1.University_of_Notre_Dame.json'}",
                    f"--train_feature_file={cache}"])
    finally:
        holder.kill()
        holder.wait()
    assert run.returncode == 1, run.stderr[-3000:]
    errors = [line for line in run.stderr.splitlines() if "run_squad.py: error:" in line]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert f"the feature cache {cache} is in use by another run (host {socket.gethostname()}, pid {holder.pid}," \
           in errors[0], errors[0]
    assert sorted(p.name for p in features.iterdir()) == ["train.tf_record.lock"]  # the holder's, untouched
    assert json.loads((features / "train.tf_record.lock").read_text()) == record
    assert not (tmp_path / "out").exists()
