"""run_classifier.py end to end in a subprocess (train, eval every checkpoint, predict, export);
the SavedModel is then reloaded here, in another process than the one that wrote it."""
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.glue import features
from albert_tf.glue.processors import get_processor

REPO = pathlib.Path(__file__).resolve().parents[2]
SEQ = 32


def run_driver(*args, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run([sys.executable, str(REPO / "run_classifier.py"), *args], capture_output=True,
                          text=True, env=env, timeout=timeout)


def eval_blocks(path):
    """eval_results.txt as a list of {key: value} per evaluated checkpoint."""
    blocks, current = [], {}
    for line in pathlib.Path(path).read_text().splitlines():
        if line.startswith("====="):
            blocks.append(current)
            current = {}
        else:
            key, value = line.split(" = ")
            current[key] = float(value)
    return blocks


EVAL_BATCH = 5


def _common(task, data_dir, config, spm, out, steps):
    return [f"--task_name={task}", f"--data_dir={data_dir}", f"--albert_config_file={config}",
            f"--spm_model_file={spm}", f"--output_dir={out}", "--do_train", "--do_eval", "--do_predict",
            f"--max_seq_length={SEQ}", "--train_batch_size=16", f"--eval_batch_size={EVAL_BATCH}",
            f"--predict_batch_size={EVAL_BATCH}",
            f"--train_step={steps}", f"--save_checkpoints_steps={steps // 2}", "--keep_checkpoint_max=1",
            "--learning_rate=1e-3", f"--warmup_step={steps // 10}", f"--log_steps={steps // 2}",
            f"--iterations_per_loop={steps}", f"--export_dir={out}/export"]


def _serving_inputs(task, data_dir, spm):
    """The test examples as the exported signatures take them (serialized features, raw text)."""
    from albert_tf.tokenization import FullTokenizer

    processor = get_processor(task)
    examples = processor.get_test_examples(data_dir)
    tok = FullTokenizer(spm_model_file=spm, do_lower_case=True)
    serialized = [features.to_tf_example(features.convert_example(e, processor.spec, SEQ, tok),
                                         processor.spec.is_regression).SerializeToString() for e in examples]
    return examples, tf.constant(serialized), tf.constant([e.text_a for e in examples]), \
        tf.constant([e.text_b for e in examples])


def _load_export(out):
    import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

    (version,) = os.listdir(out / "export")
    return tf.saved_model.load(str(out / "export" / version))


def _check_best(out, key, steps):
    half = steps // 2
    blocks = eval_blocks(out / "eval_results.txt")
    assert [b["global_step"] for b in blocks] == [half, steps]  # each checkpoint, despite keep_checkpoint_max=1
    values = [b[key] for b in blocks]
    best_index = int(np.argmax(values))  # first of equals wins: later ones must be strictly better
    assert (out / "best_trial.txt").read_text() == f"{steps}:{(best_index + 1) * half}:{values[best_index]}"
    assert [b["best"] for b in blocks] == [values[0], max(values)]
    assert (out / "model.ckpt-best.index").exists() and not (out / f"model.ckpt-{half}.index").exists()
    assert os.listdir(out / "eval")  # TensorBoard eval log
    return blocks


def test_mrpc_train_eval_predict_export(glue_slices, tiny_config_file, spm_model, tmp_path):
    """Also the learning test: MRPC's dev file here is the 48-row training slice, and a tiny
    model trained from scratch must fit it clearly above the majority class."""
    out = tmp_path / "out"
    proc = run_driver(*_common("MRPC", glue_slices, tiny_config_file, spm_model, out, steps=60),
                      "--threshold_to_export=0.3")
    assert proc.returncode == 0, proc.stderr[-4000:]
    blocks = _check_best(out, "eval_accuracy", steps=60)
    for block in blocks:
        assert block["num_examples"] == 48  # 48 dev rows in batches of 5: nothing dropped
        assert {"eval_accuracy", "eval_loss", "f1", "loss", "global_step"} <= set(block)  # the Estimator's keys too
        assert block["loss"] == block["eval_loss"]
    labels = [e.label for e in get_processor("mrpc").get_dev_examples(glue_slices)]
    majority = max(labels.count("0"), labels.count("1")) / len(labels)
    assert majority < 0.7 and blocks[-1]["eval_accuracy"] >= 0.9

    probs = np.loadtxt(out / "test_results.tsv", delimiter="\t", ndmin=2)
    assert probs.shape == (12, 2)
    np.testing.assert_allclose(probs.sum(1), 1.0, atol=1e-5)
    submit = (out / "submit_results.tsv").read_text().splitlines()
    assert submit[0] == "index\tprediction"
    assert submit[1:] == [f"{i}\t{int(np.argmax(p))}" for i, p in enumerate(probs)]

    examples, serialized, text_a, text_b = _serving_inputs("mrpc", glue_slices, spm_model)
    loaded = _load_export(out)
    by_example = loaded.signatures["serving_default"](examples=serialized)
    by_text = loaded.signatures["serving_text"](text_a=text_a, text_b=text_b)
    # The exported best model = the Keras model that wrote test_results.tsv.
    np.testing.assert_allclose(by_example["probabilities"].numpy(), probs, atol=1e-5)
    np.testing.assert_allclose(by_text["probabilities"].numpy(), probs, atol=1e-5)
    assert float(by_example["threshold"]) == pytest.approx(0.3)
    np.testing.assert_array_equal(by_text["thresholded_predictions"].numpy(), (probs[:, 1] >= 0.3).astype(np.int32))
    served = by_example["probabilities"].numpy()  # the original's predictions: the most probable class
    np.testing.assert_array_equal(by_example["predictions"].numpy(), np.argmax(served, axis=1))

    # --serving_precision=bfloat16, exporting the best checkpoint without training: matmuls in
    # bf16 in the saved graph, probabilities within bf16's rounding of the float32 model's.
    proc = run_driver("--task_name=MRPC", f"--data_dir={glue_slices}", f"--albert_config_file={tiny_config_file}",
                      f"--spm_model_file={spm_model}", f"--output_dir={out}", f"--max_seq_length={SEQ}",
                      f"--export_dir={out}/export_bf16", "--serving_precision=bfloat16")
    assert proc.returncode == 0, proc.stderr[-4000:]
    (version,) = (out / "export_bf16").iterdir()
    assert _has_bf16_matmul(version)
    bf16 = tf.saved_model.load(str(version)).signatures["serving_text"](text_a=text_a, text_b=text_b)
    difference = np.abs(bf16["probabilities"].numpy() - probs).max()
    assert 0 < difference <= 0.02, difference


def _has_bf16_matmul(export) -> bool:
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((export / "saved_model.pb").read_bytes())
    return any(node.op == "MatMul" and node.attr["T"].type == tf.bfloat16.as_datatype_enum
               for function in saved.meta_graphs[0].graph_def.library.function for node in function.node_def)


def test_stsb_train_eval_predict_export(glue_slices, tiny_config_file, spm_model, tmp_path):
    out = tmp_path / "out"
    proc = run_driver(*_common("STS-B", glue_slices, tiny_config_file, spm_model, out, steps=20))
    assert proc.returncode == 0, proc.stderr[-4000:]
    blocks = _check_best(out, "pearson", steps=20)
    for block in blocks:
        assert {"pearson", "spearman", "MSE", "eval_loss"} <= set(block) and "eval_accuracy" not in block
        assert block["num_examples"] == 24

    scores = np.loadtxt(out / "test_results.tsv")
    assert scores.shape == (12,)
    submit = (out / "submit_results.tsv").read_text().splitlines()
    assert [line.split("\t")[0] for line in submit[1:]] == [str(i) for i in range(12)]
    np.testing.assert_allclose([float(line.split("\t")[1]) for line in submit[1:]], scores, rtol=1e-6)

    examples, serialized, text_a, text_b = _serving_inputs("sts-b", glue_slices, spm_model)
    loaded = _load_export(out)
    np.testing.assert_allclose(loaded.signatures["serving_default"](examples=serialized)["score"].numpy(),
                               scores, atol=1e-5)
    np.testing.assert_allclose(loaded.signatures["serving_text"](text_a=text_a, text_b=text_b)["score"].numpy(),
                               scores, atol=1e-5)

    # The best checkpoint's dev metrics, recomputed here from the exported (best) model's dev
    # scores with the textbook formulas, not with albert_tf.glue.metrics.
    dev = get_processor("sts-b").get_dev_examples(glue_slices)
    gold = np.array([float(e.label) for e in dev])
    # In batches of --eval_batch_size, as the driver evaluated them: with oneDNN (on by default on
    # AVX-512 CPUs) a matmul's rounding depends on its row count; all 24 in one batch gave Pearson
    # 0.44838 against the driver's 0.44928 on an AVX512 EPYC.
    def scores_of(batch):
        return loaded.signatures["serving_text"](text_a=tf.constant([e.text_a for e in batch]),
                                                 text_b=tf.constant([e.text_b for e in batch]))["score"].numpy()

    dev_scores = np.concatenate([scores_of(dev[i:i + EVAL_BATCH])
                                 for i in range(0, len(dev), EVAL_BATCH)]).astype(np.float64)
    dx, dy = dev_scores - dev_scores.mean(), gold - gold.mean()
    pearson = (dx * dy).sum() / np.sqrt((dx * dx).sum() * (dy * dy).sum())
    mse = ((dev_scores - gold) ** 2).mean()
    best = max(blocks, key=lambda b: b["pearson"])
    assert best["pearson"] == pytest.approx(pearson, abs=1e-5)
    assert best["MSE"] == pytest.approx(mse, rel=1e-5)
    assert best["eval_loss"] == pytest.approx(mse, rel=1e-5)
    assert best["loss"] == pytest.approx(mse, rel=1e-5)  # the original Estimator's key, the model's loss


def test_errors_are_one_clear_line_and_exit_1(glue_slices, tiny_config_file, spm_model, tmp_path, driver_errors,
                                             random_tf1_checkpoint):
    import json

    from albert_tf import AlbertConfig

    base = [f"--data_dir={glue_slices}", f"--albert_config_file={tiny_config_file}",
            f"--spm_model_file={spm_model}", f"--output_dir={tmp_path / 'out'}", "--max_seq_length=32"]
    bad_dir = tmp_path / "bad"
    (bad_dir / "RTE").mkdir(parents=True)
    # A WordPiece vocab of the config's size: it would train, and fail only at the export, after training.
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (tmp_path / "vocab.txt").write_text("\n".join(specials + [f"w{i}" for i in range(30000 - 5)]) + "\n")
    (bad_dir / "RTE" / "dev.tsv").write_text("index\tsentence1\tsentence2\tlabel\n0\ta\tb\tmaybe\n")
    # Weights the flag check finds (it looks for the prefix's .index; the fit check reads it: an empty one is
    # refused as damaged, before any work, where it was found after the features were cached).
    release = tmp_path / "release"
    release.mkdir()
    (release / "model.ckpt-best.index").write_bytes(b"")
    fits = tmp_path / "fits" / "model.ckpt"  # weights of the config, for the runs stopped by the data
    fits.parent.mkdir()
    random_tf1_checkpoint(AlbertConfig(**json.loads(tiny_config_file.read_text())), fits)
    (tmp_path / "no_state").mkdir()
    cases = {
        "unknown task": ["--task_name=SST2", "--do_train", *base],
        "too long": ["--task_name=MRPC", "--do_train", *base, "--max_seq_length=128"],
        "no train split": ["--task_name=AX", "--do_train", *base],
        "no weights": ["--task_name=MRPC", "--do_predict", *base],
        "missing flag": ["--task_name=MRPC", "--do_train", *base[:3]],
        "bad label": ["--task_name=RTE", "--do_eval", *base, f"--data_dir={bad_dir}", f"--init_checkpoint={fits}"],
        "padded and buckets": ["--task_name=MRPC", "--do_train", *base, "--pad_to_max_length",
                               "--seq_length_buckets=16,32"],
        "wordpiece export": ["--task_name=MRPC", "--do_train", base[0], base[1], base[3], base[4],
                             f"--vocab_file={tmp_path / 'vocab.txt'}", f"--export_dir={tmp_path / 'export'}"],
        # trained by gradient ascent (or not at all) and ended well
        "negative learning rate": ["--task_name=MRPC", "--do_train", *base, "--learning_rate=-1"],
        # refused at the export, after the whole training
        "threshold on regression": ["--task_name=STS-B", "--do_train", *base, f"--export_dir={tmp_path / 'export'}",
                                    "--threshold_to_export=0.5"],
        "threshold on 3 labels": ["--task_name=MNLI", "--do_train", *base, f"--export_dir={tmp_path / 'export'}",
                                  "--threshold_to_export=0.5"],
        # a traceback in the pair truncation (2), or training on inputs without text (pair 3, single 2)
        "pair seq 2": ["--task_name=MRPC", "--do_train", *base, "--max_seq_length=2"],
        "pair seq 4": ["--task_name=MRPC", "--do_train", *base, "--max_seq_length=4"],
        "single seq 2": ["--task_name=CoLA", "--do_train", *base, "--max_seq_length=2"],
        # checked by the loop after the train split was cached, naming its fields
        "train batch 0": ["--task_name=MRPC", "--do_train", *base, "--train_batch_size=0"],
        "train step 0": ["--task_name=MRPC", "--do_train", *base, "--train_step=0"],
        "warmup negative": ["--task_name=MRPC", "--do_train", *base, "--warmup_step=-5"],
        "save every 0": ["--task_name=MRPC", "--do_train", *base, "--save_checkpoints_steps=0"],
        "eval batch 0": ["--task_name=MRPC", "--do_eval", *base, "--eval_batch_size=0"],
        # an eval-only run builds the same loop: refused by it after the dev split was cached
        "eval-only train batch 0": ["--task_name=MRPC", "--do_eval", *base, "--train_batch_size=0",
                                    f"--init_checkpoint={release / 'model.ckpt-best'}"],
        "predict batch -1": ["--task_name=MRPC", "--do_predict", *base, "--predict_batch_size=-1"],
        # the weights were first opened after the train and dev splits were cached
        "init typo": ["--task_name=MRPC", "--do_train", "--do_eval", *base,
                      f"--init_checkpoint={release / 'model.ckpt-bset'}"],
        "init folder without state": ["--task_name=MRPC", "--do_train", *base,
                                      f"--init_checkpoint={tmp_path / 'no_state'}"],
        "init index file": ["--task_name=MRPC", "--do_train", *base,
                            f"--init_checkpoint={release / 'model.ckpt-best.index'}"],
        "hub missing": ["--task_name=MRPC", "--do_train", *base, f"--albert_hub_module_handle={tmp_path / 'hub'}"],
        "init empty index": ["--task_name=MRPC", "--do_train", *base,
                             f"--init_checkpoint={release / 'model.ckpt-best'}"],
        # trained and ended well, none of them read
        "custom flags on GLUE": ["--task_name=MRPC", "--do_train", *base, "--train_file=/nonexistent.tsv",
                                 "--text_columns=foo", "--label_column=bar", "--regression", "--key_metric=f1"],
        # accepted, as the original, with a warning; stopped here by the length
        "warmup longer": ["--task_name=MRPC", "--do_train", *base, "--warmup_step=100", "--train_step=4",
                          "--max_seq_length=128"],
        # accepted, as the original, with a warning (every capital is <unk>); stopped here by the length
        "cased run, uncased model": ["--task_name=MRPC", "--do_train", *base, "--do_lower_case=false",
                                     "--max_seq_length=128"],
    }
    results = driver_errors(cases)
    expected = {
        "unknown task": "known tasks: cola, mnli, mismnli, mrpc, rte, sst-2, sts-b, qqp, qnli, wnli, ax",
        "too long": "sequence length 128",
        "no train split": "task 'ax' has no 'train' split",
        "no weights": "no weights to use",
        "missing flag": "missing required flag(s): --output_dir",
        "bad label": f"{bad_dir / 'RTE' / 'dev.tsv'}:2: unknown label 'maybe'",
        "padded and buckets": "--pad_to_max_length keeps every row at --max_seq_length, so --seq_length_buckets "
                              "would be ignored",
        "wordpiece export": "a WordPiece --vocab_file cannot be exported",  # before training, not after it
        "negative learning rate": "--learning_rate must be >= 0, got -1.0",
        "threshold on regression": "--threshold_to_export applies to binary tasks only; sts-b has a regression output",
        "threshold on 3 labels": "--threshold_to_export applies to binary tasks only; mnli has 3 labels",
        "pair seq 2": "--max_seq_length=2 is too small for mrpc, a pair task: [CLS] a [SEP] b [SEP] with a token of "
                      "each text needs at least 5",
        "pair seq 4": "--max_seq_length=4 is too small for mrpc, a pair task",
        "custom flags on GLUE": "--train_file, --text_columns, --label_column, --regression, --key_metric are for "
                                "--task_name=custom (your own files); --task_name=MRPC reads GLUE's files under "
                                "--data_dir",
        "train batch 0": "--train_batch_size must be >= 1, got 0",
        "train step 0": "--train_step must be >= 1, got 0",
        "warmup negative": "--warmup_step must be >= 0, got -5",
        "save every 0": "--save_checkpoints_steps must be >= 1, got 0",
        "eval batch 0": "--eval_batch_size must be >= 1, got 0",
        "eval-only train batch 0": "--train_batch_size must be >= 1, got 0",
        "predict batch -1": "--predict_batch_size must be >= 1, got -1",
        "init typo": f"--init_checkpoint: checkpoint not found: {release / 'model.ckpt-bset'} (expected "
                     f"{release / 'model.ckpt-bset'}.index, or a directory)",
        "init folder without state": f"--init_checkpoint: no checkpoint found in directory {tmp_path / 'no_state'}",
        "init index file": f"--init_checkpoint: {release / 'model.ckpt-best.index'} is one of a checkpoint's files: "
                           f"give its prefix {release / 'model.ckpt-best'}",
        "hub missing": f"--albert_hub_module_handle: checkpoint not found: {tmp_path / 'hub'}",
        "init empty index": f"--init_checkpoint: checkpoint {release / 'model.ckpt-best'} is damaged: "
                            f"{release / 'model.ckpt-best.index'} is damaged (",
        "single seq 2": "--max_seq_length=2 is too small for cola, a single-sentence task: [CLS] text [SEP] with a "
                        "token of text needs at least 3",
    }
    for name, text in expected.items():
        assert results[name]["code"] == 1, name
        assert text in results[name]["stderr"], (name, results[name]["stderr"])
        assert results[name]["stderr"].startswith("run_classifier.py: error: ")
        assert len(results[name]["stderr"].strip().splitlines()) == 1, (name, results[name]["stderr"])
    assert not (tmp_path / "out").exists() and not (tmp_path / "export").exists()
    warmup = "--warmup_step=100 is longer than --train_step=4: the learning rate never reaches --learning_rate"
    assert warmup in results["warmup longer"]["warnings"] and results["warmup longer"]["code"] == 1
    assert not any("is longer than" in w for w in results["too long"]["warnings"])
    uncased = (f"--do_lower_case=false but --spm_model_file={spm_model} has no piece with an upper-case letter "
               f"(an uncased model): every capital letter becomes <unk>")
    assert [w for w in results["cased run, uncased model"]["warnings"] if uncased in w] != []
    assert results["cased run, uncased model"]["code"] == 1
    assert not any("--do_lower_case" in w for w in results["too long"]["warnings"])


def test_an_init_checkpoint_of_another_config_is_one_line_before_any_work(glue_slices, tiny_config_file, spm_model,
                                                                         tmp_path, driver_errors,
                                                                         misfit_init_checkpoints):
    """Weights that do not fit --albert_config_file were first read after the train and dev features were
    cached into --output_dir, and their error was a line per weight (25 for a larger model). Now one line,
    the first weight and the config flag, before anything is written (an eval-only run's too)."""
    import json

    misfits = misfit_init_checkpoints(json.loads(tiny_config_file.read_text()), tmp_path / "weights",
                                      tiny_config_file)
    base = [f"--data_dir={glue_slices}", f"--albert_config_file={tiny_config_file}", f"--spm_model_file={spm_model}",
            "--max_seq_length=32", "--task_name=MRPC"]
    cases = {name: [*base, f"--output_dir={tmp_path / name}", "--do_train", "--do_eval",
                    f"--init_checkpoint={prefix}"] for name, (prefix, _) in misfits.items()}
    cases["eval only"] = [*base, f"--output_dir={tmp_path / 'eval only'}", "--do_eval",
                          f"--init_checkpoint={misfits['larger'][0]}"]
    results = driver_errors(cases)
    for name in cases:
        message = misfits["larger" if name == "eval only" else name][1]
        assert results[name]["code"] == 1, (name, results[name])
        assert results[name]["stderr"] == f"run_classifier.py: error: {message}\n", name
        assert not (tmp_path / name).exists(), name


def test_a_train_only_run_keeps_every_checkpoint_for_the_later_eval_run(tmp_path, glue_slices, tiny_config_file,
                                                                      spm_model):
    """The original's run_glue.sh trains (--nodo_eval), then scores every checkpoint in a second run; its
    drivers kept them all whatever --keep_checkpoint_max said. A train-only run keeps them all too (an
    explicit --keep_checkpoint_max is obeyed), and the eval-only run scores each of them."""
    def flags(out, *extra):
        return ["--task_name=MRPC", f"--data_dir={glue_slices}", f"--albert_config_file={tiny_config_file}",
                f"--spm_model_file={spm_model}", f"--output_dir={out}", f"--max_seq_length={SEQ}",
                "--train_batch_size=8", f"--eval_batch_size={EVAL_BATCH}", "--train_step=7",
                "--save_checkpoints_steps=1", "--learning_rate=1e-3", "--warmup_step=0", *extra]

    out = tmp_path / "train_then_eval"
    done = run_driver(*flags(out, "--do_train", "--nodo_eval", "--nodo_predict"))
    assert done.returncode == 0, done.stderr[-3000:]
    steps = lambda folder: sorted(int(m.group(1)) for p in folder.iterdir()  # noqa: E731
                                  if (m := re.fullmatch(r"model\.ckpt-(\d+)\.index", p.name)))
    assert steps(out) == list(range(1, 8))  # 7 > the flag's default, 5
    assert done.stdout.splitlines() == ["run_classifier.py: done", f"  checkpoint: {out / 'model.ckpt-7'}"]
    done = run_driver(*flags(out, "--nodo_train", "--do_eval", "--nodo_predict"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(eval_blocks(out / "eval_results.txt")) == 7

    explicit = tmp_path / "explicit"
    done = run_driver(*flags(explicit, "--do_train", "--nodo_eval", "--nodo_predict", "--keep_checkpoint_max=2"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert steps(explicit) == [6, 7]


def test_notext_signature_exports_a_wordpiece_model_without_tensorflow_text(tmp_path, glue_slices, tiny_config_file,
                                                                          random_tf1_checkpoint, saved_model_ops,
                                                                          tensorflow_text_ops):
    """--notext_signature: the export holds serving_default (tf.Examples) alone and no tensorflow-text op,
    so stock TF Serving loads it, and a WordPiece --vocab_file model, which serving_text cannot tokenize,
    is exported too (it was refused)."""
    from albert_tf import AlbertConfig

    config = AlbertConfig.from_json_file(str(tiny_config_file))
    head = {"output_weights": np.full([2, config.hidden_size], 0.1, np.float32),  # a fine-tuned checkpoint's head
            "output_bias": np.zeros([2], np.float32)}
    random_tf1_checkpoint(config, tmp_path / "model.ckpt", extra=head)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    (tmp_path / "vocab.txt").write_text("\n".join(specials + [f"w{i}" for i in range(30000 - 5)]) + "\n")
    proc = run_driver("--task_name=MRPC", f"--data_dir={glue_slices}", f"--albert_config_file={tiny_config_file}",
                      f"--vocab_file={tmp_path / 'vocab.txt'}", f"--output_dir={tmp_path / 'out'}",
                      f"--max_seq_length={SEQ}", f"--init_checkpoint={tmp_path / 'model.ckpt'}",
                      f"--export_dir={tmp_path / 'export'}", "--notext_signature")
    assert proc.returncode == 0, proc.stderr[-4000:]
    (version,) = (tmp_path / "export").iterdir()
    assert saved_model_ops(version) & tensorflow_text_ops == set()
    assert "ParseExample" in " ".join(saved_model_ops(version))  # the tf.Example signature is there
    loaded = tf.saved_model.load(str(version))
    assert sorted(loaded.signatures) == ["serving_default"]
    example = features.to_tf_example(features.InputFeatures([2, 7, 3], [1, 1, 1], [0, 0, 0], 0), False)
    out = loaded.signatures["serving_default"](examples=tf.constant([example.SerializeToString()]))
    assert out["probabilities"].shape == (1, 2)


def _from_mnli_flags(task, data_dir, config, spm, out, *stages):
    return [f"--task_name={task}", f"--data_dir={data_dir}", f"--albert_config_file={config}",
            f"--spm_model_file={spm}", f"--output_dir={out}", f"--max_seq_length={SEQ}", "--train_batch_size=2",
            "--eval_batch_size=8", "--train_step=2", "--save_checkpoints_steps=1", "--learning_rate=1e-3",
            "--warmup_step=0", *stages]


def test_mrpc_and_stsb_fine_tune_from_an_mnli_model(glue_dir, glue_slices, tiny_config_file, spm_model, tmp_path,
                                                    driver_cases):
    """The paper fine-tunes RTE, MRPC and STS-B from an MNLI model: --init_checkpoint=<MNLI's
    model.ckpt-best>, whose head has 3 labels, was refused after the features were cached ("the number of
    labels differs"). Its head now starts fresh with one warning line, and its encoder is loaded."""
    import json

    from albert_tf import AlbertConfig
    from albert_tf.glue.heads import build_classifier
    from albert_tf.weights import fine_tuning_init

    mnli, best = tmp_path / "mnli", tmp_path / "mnli" / "model.ckpt-best"
    results = driver_cases("run_classifier", {
        "mnli": _from_mnli_flags("MNLI", glue_dir, tiny_config_file, spm_model, mnli, "--do_train", "--do_eval"),
        **{task: _from_mnli_flags(task, glue_slices, tiny_config_file, spm_model, tmp_path / task, "--do_train",
                                  "--do_eval", f"--init_checkpoint={best}") for task in ("MRPC", "STS-B")}})
    assert results["mnli"]["code"] == 0, results["mnli"]
    assert not any("head" in w for w in results["mnli"]["warnings"])
    H = json.loads(tiny_config_file.read_text())["hidden_size"]
    for task, labels in (("MRPC", 2), ("STS-B", 1)):
        assert results[task]["code"] == 0, (task, results[task])
        assert len(eval_blocks(tmp_path / task / "eval_results.txt")) == 2, task
        about_the_head = [w for w in results[task]["warnings"] if "head" in w]
        assert len(about_the_head) == 1, (task, results[task]["warnings"])
        for part in (f"--init_checkpoint {best}:", f"has 3 labels, this task {labels}",
                     f"output_weights [3, {H}] for [{labels}, {H}]", f"output_bias [3] for [{labels}]",
                     "it starts fresh"):
            assert part in about_the_head[0], (task, part, about_the_head[0])

    # The encoder after init is MNLI's: compared with MNLI's model as TensorFlow's own object-based restore
    # reads it, whose weights are checked against the tensors tf.train.load_checkpoint reads.
    config = AlbertConfig.from_json_file(str(tiny_config_file))
    reference = build_classifier(config, "mnli")
    status = tf.train.Checkpoint(model=reference).read(str(best))
    status.expect_partial()
    status.assert_existing_objects_matched()
    reader = tf.train.load_checkpoint(str(best))
    stored = [reader.get_tensor(k) for k in reader.get_variable_to_shape_map() if k.startswith("model/encoder/")
              and k.endswith("/.ATTRIBUTES/VARIABLE_VALUE") and "OPTIMIZER_SLOT" not in k]
    assert len(stored) == len(reference.encoder.weights)
    for variable in reference.encoder.weights:
        assert any(t.shape == tuple(variable.shape) and np.array_equal(t, variable.numpy()) for t in stored)
    for task in ("mrpc", "sts-b"):
        model = build_classifier(config, task)
        fine_tuning_init(str(best))(model)
        for ours, theirs in zip(model.encoder.weights, reference.encoder.weights, strict=True):
            np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
        assert model.classifier.output_weights.shape[0] == (2 if task == "mrpc" else 1)


def test_evaluating_an_output_dir_whose_checkpoints_have_another_head_is_still_refused(glue_dir, glue_slices,
                                                                                    tiny_config_file, spm_model,
                                                                                    tmp_path, driver_cases):
    """Only --init_checkpoint's head may differ: a run's own checkpoints (run_glue.sh's eval-only and predict
    runs, resuming) must hold this task's head, so MRPC on an MNLI run's --output_dir is still refused."""
    out = tmp_path / "mnli"
    results = driver_cases("run_classifier", {
        "mnli": _from_mnli_flags("MNLI", glue_dir, tiny_config_file, spm_model, out, "--do_train", "--nodo_eval"),
        "eval only": _from_mnli_flags("MRPC", glue_slices, tiny_config_file, spm_model, out, "--do_eval"),
        "predict only": _from_mnli_flags("MRPC", glue_slices, tiny_config_file, spm_model, out, "--do_predict"),
        "resume": [*_from_mnli_flags("MRPC", glue_slices, tiny_config_file, spm_model, out, "--do_train"),
                   "--train_step=4"]})
    assert results["mnli"]["code"] == 0, results["mnli"]
    for name in ("eval only", "predict only", "resume"):
        assert results[name]["code"] == 1, (name, results[name])
        assert "the number of labels differs (the checkpoint's head has 3, this task 2)" in results[name]["stderr"], \
            (name, results[name]["stderr"])
        assert not any("starts fresh" in w for w in results[name]["warnings"]), name


def _checkpoint_steps(folder):
    return sorted(int(m.group(1)) for p in folder.iterdir() if (m := re.fullmatch(r"model\.ckpt-(\d+)\.index", p.name)))


def test_resuming_needs_no_init_checkpoint(glue_slices, tiny_config_file, spm_model, tmp_path, driver_cases,
                                           random_tf1_checkpoint, misfit_init_checkpoints):
    """An interrupted run re-run with the same command resumes from its own last checkpoint: --init_checkpoint
    is not read then, so one that is gone (scratch cleaned), damaged or of another config must not refuse the run
    (it did, before any work: the flag checks read it whatever --output_dir held). One warning says it is unused."""
    import json
    import shutil

    from albert_tf import AlbertConfig

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    init = scratch / "model.ckpt"
    random_tf1_checkpoint(AlbertConfig.from_json_file(str(tiny_config_file)), init)

    def command(out, init_checkpoint, *stages):
        return _from_mnli_flags("MRPC", glue_slices, tiny_config_file, spm_model, out, "--train_step=4",
                                f"--init_checkpoint={init_checkpoint}", *(stages or ("--do_train", "--nodo_eval")))

    first = tmp_path / "first"
    assert driver_cases("run_classifier", {"first": command(first, init)})["first"]["code"] == 0
    assert _checkpoint_steps(first) == [1, 2, 3, 4]
    damaged = scratch / "damaged" / "model.ckpt"
    damaged.parent.mkdir()
    (scratch / "damaged" / "model.ckpt.index").write_bytes(b"")
    misfit, _ = misfit_init_checkpoints(json.loads(tiny_config_file.read_text()), scratch / "misfit",
                                        tiny_config_file)["larger"]
    inits = {"gone": scratch / "gone" / "model.ckpt", "damaged": damaged, "other config": misfit}
    kept = {}
    for name in inits:  # killed after step 2's save: steps 3 and 4 never written
        shutil.copytree(first, tmp_path / name)
        for path in (tmp_path / name).glob("model.ckpt-[34].*"):
            path.unlink()
        kept[name] = {p.name: p.read_bytes() for p in (tmp_path / name).glob("model.ckpt-[12].*")}
    cases = {name: command(tmp_path / name, inits[name]) for name in inits}
    # run_glue.sh's second run: evaluates and predicts with the run's own checkpoints
    cases["eval and predict"] = command(first, inits["other config"], "--nodo_train", "--do_eval", "--do_predict")
    results = driver_cases("run_classifier", cases)
    for name in inits:
        out = tmp_path / name
        assert results[name]["code"] == 0, (name, results[name])
        assert _checkpoint_steps(out) == [1, 2, 3, 4], name
        assert {p: (out / p).read_bytes() for p in kept[name]} == kept[name], name  # resumed, not started over
        about_init = [w for w in results[name]["warnings"] if str(inits[name]) in w]
        assert len(about_init) == 1, (name, results[name]["warnings"])
        assert "not used" in about_init[0] and str(out / "model.ckpt-2") in about_init[0], (name, about_init)
    assert results["eval and predict"]["code"] == 0, results["eval and predict"]
    about_init = [w for w in results["eval and predict"]["warnings"] if str(inits["other config"]) in w]
    assert len(about_init) == 1 and "is not used" in about_init[0], results["eval and predict"]["warnings"]
    assert len(eval_blocks(first / "eval_results.txt")) == 4
    assert (first / "test_results.tsv").exists()


def test_evaluating_or_predicting_with_an_init_checkpoint_of_another_head_is_refused(glue_slices, tiny_config_file,
                                                                                    spm_model, tmp_path,
                                                                                    driver_errors,
                                                                                    random_tf1_checkpoint):
    """Without --do_train, --init_checkpoint is the model that scores: an MNLI one (3 labels) cannot score MRPC
    (2), nothing was trained. Its head does not start fresh (that is for training): one line names the flag and
    the head."""
    from albert_tf import AlbertConfig

    config = AlbertConfig.from_json_file(str(tiny_config_file))
    mnli = tmp_path / "mnli" / "model.ckpt-best"
    mnli.parent.mkdir()
    random_tf1_checkpoint(config, mnli, extra={"output_weights": np.full([3, config.hidden_size], 0.1, np.float32),
                                               "output_bias": np.zeros([3], np.float32)})
    base = [f"--data_dir={glue_slices}", f"--albert_config_file={tiny_config_file}", f"--spm_model_file={spm_model}",
            "--max_seq_length=32", "--task_name=MRPC", f"--init_checkpoint={mnli}"]
    cases = {"eval only": [*base, f"--output_dir={tmp_path / 'eval'}", "--do_eval"],
             "predict only": [*base, f"--output_dir={tmp_path / 'predict'}", "--do_predict"]}
    results = driver_errors(cases)
    for name in cases:
        assert results[name]["code"] == 1, (name, results[name])
        stderr = results[name]["stderr"]
        assert len(stderr.splitlines()) == 1 and stderr.startswith("run_classifier.py: error: "), (name, stderr)
        assert "--init_checkpoint" in stderr and str(mnli) in stderr, (name, stderr)
        assert "head has 3 labels, this task (mrpc) 2" in stderr and "nothing was trained" in stderr, (name, stderr)
        assert not (tmp_path / name.split()[0]).exists(), name  # before any work (the features were cached)
        assert not any("starts fresh" in w for w in results[name]["warnings"]), name
    # A pretrained checkpoint has no head at all: one line too, before any work
    pretrained = tmp_path / "pretrained" / "model.ckpt"
    pretrained.parent.mkdir()
    random_tf1_checkpoint(config, pretrained)
    result = driver_errors({"pretrained": [*base[:-1], f"--init_checkpoint={pretrained}",
                                           f"--output_dir={tmp_path / 'scored'}", "--do_predict"]})["pretrained"]
    assert result["code"] == 1 and not (tmp_path / "scored").exists(), result
    assert result["stderr"] == (f"run_classifier.py: error: --init_checkpoint: checkpoint {pretrained} does not fit "
                                f"the model (2 variables): output_weights: expected shape [2, {config.hidden_size}], "
                                f"missing; the checkpoint has no head for this task (a "
                                f"pretrained checkpoint has none): train first (--do_train), or give a fine-tuned "
                                f"checkpoint ...\n"), result["stderr"]


_FIT_CHECK_MEMORY = r"""
import json, resource, sys
from absl import flags
from albert_tf.drivers import run_classifier  # noqa: F401  (its flags)
from albert_tf.config import AlbertConfig
from albert_tf.drivers.finetuning import check_weights_fit, unused_weights_flag
init, config_file, out = sys.argv[1:]
flags.FLAGS(["run_classifier.py", f"--init_checkpoint={init}", f"--albert_config_file={config_file}",
             f"--output_dir={out}", "--do_train"])
config = AlbertConfig.from_json_file(config_file)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    check_weights_fit(flags.FLAGS, config, unused_weights_flag(flags.FLAGS))
    error = None
except ValueError as e:
    error = str(e)
print(json.dumps({"grew_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before, "error": error}))
"""


def test_weights_from_a_hub_module_handle_are_named_by_that_flag(glue_slices, tiny_config_file, spm_model, tmp_path,
                                                                  driver_errors, random_tf1_checkpoint):
    """The weights a run starts from may come from --albert_hub_module_handle (init_checkpoint_from_flags): the
    refusal of their head named --init_checkpoint, a flag the user never gave."""
    from albert_tf import AlbertConfig

    config = AlbertConfig.from_json_file(str(tiny_config_file))
    mnli = tmp_path / "mnli" / "model.ckpt-best"
    mnli.parent.mkdir()
    random_tf1_checkpoint(config, mnli, extra={"output_weights": np.full([3, config.hidden_size], 0.1, np.float32),
                                               "output_bias": np.zeros([3], np.float32)})
    result = driver_errors({"hub": [f"--data_dir={glue_slices}", f"--albert_config_file={tiny_config_file}",
                                    f"--spm_model_file={spm_model}", "--max_seq_length=32", "--task_name=MRPC",
                                    f"--albert_hub_module_handle={mnli}", f"--output_dir={tmp_path / 'out'}",
                                    "--do_predict"]})["hub"]
    assert result["code"] == 1, result
    assert result["stderr"].startswith(f"run_classifier.py: error: --albert_hub_module_handle={mnli}: its task head "
                                       f"has 3 labels, this task (mrpc) 2"), result["stderr"]
    assert "--init_checkpoint" not in result["stderr"]


def test_a_nan_loss_from_hub_module_weights_names_that_flag(glue_slices, tiny_config_file, spm_model, tmp_path,
                                                            driver_errors, random_tf1_checkpoint):
    """A NaN loss before the first checkpoint said "check --init_checkpoint" whatever flag gave the weights: now
    the flag the user gave (--albert_hub_module_handle here; NaN pooler weights make the first loss NaN)."""
    from albert_tf import AlbertConfig

    config = AlbertConfig.from_json_file(str(tiny_config_file))
    hub = tmp_path / "hub" / "model.ckpt"
    hub.parent.mkdir()
    random_tf1_checkpoint(config, hub, extra={"bert/pooler/dense/kernel": np.full([config.hidden_size] * 2, np.nan,
                                                                                  np.float32)})
    result = driver_errors({"nan": [f"--data_dir={glue_slices}", f"--albert_config_file={tiny_config_file}",
                                    f"--spm_model_file={spm_model}", "--max_seq_length=32", "--task_name=MRPC",
                                    f"--albert_hub_module_handle={hub}", f"--output_dir={tmp_path / 'out'}",
                                    "--do_train", "--train_step=2", "--warmup_step=0", "--train_batch_size=2"]})["nan"]
    assert result["code"] == 1, result
    assert result["stderr"].startswith("run_classifier.py: error: loss nan (or its gradient) is NaN/Inf at step 1;"), \
        result["stderr"]
    assert result["stderr"].endswith("there is no checkpoint yet, so a rerun starts again from step 0: lower "
                                     "--learning_rate, check --albert_hub_module_handle and the input data.\n"), \
        result["stderr"]


def test_the_fit_check_allocates_no_weights(tmp_path, tiny_config_file, random_tf1_checkpoint, tf1_shapes):
    """check_weights_fit compares the checkpoint's index with the model's variable names and shapes: it made an
    eager AlbertModel for them, every weight allocated and initialised (0.9 GB for ALBERT xxlarge) to be thrown
    away. Checked on xxlarge's config against a tiny checkpoint: the same refusal, and the process's peak memory
    grows by less than half the weights' bytes."""
    import json

    from albert_tf import AlbertConfig

    xxlarge = {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 4096, "num_hidden_layers": 12,
               "num_attention_heads": 64, "intermediate_size": 16384, "max_position_embeddings": 512,
               "type_vocab_size": 2}
    (tmp_path / "xxlarge.json").write_text(json.dumps(xxlarge))
    tiny = AlbertConfig.from_json_file(str(tiny_config_file))
    random_tf1_checkpoint(tiny, tmp_path / "model.ckpt")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", _FIT_CHECK_MEMORY, str(tmp_path / "model.ckpt"),
                           str(tmp_path / "xxlarge.json"), str(tmp_path / "out")], capture_output=True, text=True,
                          env=env, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    word = "bert/embeddings/word_embeddings"
    expected, found = tf1_shapes(AlbertConfig(**xxlarge))[word], tf1_shapes(tiny)[word]
    assert result["error"].startswith(f"--init_checkpoint: checkpoint {tmp_path / 'model.ckpt'} does not fit the "
                                      f"model (25 variables): {word}: expected shape {expected}, found shape "
                                      f"{found}"), result["error"]
    weights_kb = sum(int(np.prod(s)) for n, s in tf1_shapes(AlbertConfig(**xxlarge)).items()
                     if n.startswith("bert/")) * 4 / 1024
    assert weights_kb > 800_000  # the encoder's float32 weights: 0.9 GB
    assert result["grew_kb"] < weights_kb / 2, (result["grew_kb"], weights_kb)
    assert "never used" not in proc.stderr  # a graph's unused assert op would be logged as an error
