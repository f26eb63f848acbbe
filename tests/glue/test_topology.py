"""GLUE fine-tuning keeps one-device semantics: 2 mirrored replicas with dropout on give the
one-device run's weights and eval results (and the logs show each run's replica count)."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import tensorflow as tf

from .conftest import TINY_CONFIG

REPO = pathlib.Path(__file__).resolve().parents[2]


def _train(out, config, data_dir, spm, *extra):
    done = subprocess.run(
        [sys.executable, str(REPO / "run_classifier.py"), "--task_name=mrpc", f"--data_dir={data_dir}",
         f"--albert_config_file={config}", f"--spm_model_file={spm}", f"--output_dir={out}", "--do_train",
         "--do_eval", "--max_seq_length=32", "--train_batch_size=8", "--eval_batch_size=8", "--train_step=6",
         "--save_checkpoints_steps=6", "--learning_rate=1e-3", "--seed=3", *extra],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    reader = tf.train.load_checkpoint(str(out / "model.ckpt-6"))
    weights = {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()
               if k.startswith("model/") and "OPTIMIZER_SLOT" not in k}
    results = dict(line.split(" = ") for line in (out / "eval_results.txt").read_text().splitlines()
                   if " = " in line)
    topology = [line for line in done.stderr.splitlines() if "Topology: " in line]
    lengths = [line for line in done.stderr.splitlines() if "Batch lengths: " in line]
    return weights, {k: float(v) for k, v in results.items()}, topology + lengths


def test_mirrored_matches_one_device_with_dropout(glue_slices, spm_model, tmp_path):
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps({**TINY_CONFIG, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}))
    single, single_eval, single_log = _train(tmp_path / "one", config, glue_slices, spm_model)
    mirrored, mirrored_eval, mirrored_log = _train(tmp_path / "two", config, glue_slices, spm_model,
                                                   "--distribution_strategy=mirrored", "--num_gpus=2")
    single_log, mirrored_log = ([line for line in log if "Topology: " in line] for log in (single_log, mirrored_log))
    assert len(single_log) == len(mirrored_log) == 1
    assert single_log[0].endswith("Topology: 1 worker(s), 1 replica(s) in sync, 1 micro-batch(es) per replica per step")
    assert mirrored_log[0].endswith("Topology: 1 worker(s), 2 replica(s) in sync, 1 micro-batch(es) per replica "
                                    "per step")
    assert set(single) == set(mirrored) and single
    worst = max(float(np.abs(single[k] - mirrored[k]).max()) for k in single)
    assert worst <= 1e-5, worst
    assert single_eval.keys() == mirrored_eval.keys()
    for key in single_eval:
        assert abs(single_eval[key] - mirrored_eval[key]) <= 1e-5, key


def _predictions(out):
    return np.loadtxt(out / "test_results.tsv", delimiter="\t", ndmin=2)


def test_batches_at_their_length_give_the_padded_numbers(glue_slices, spm_model, tmp_path):
    """Batches cut to their longest row (CPU) or to a static bucket (XLA), on one device and on 2 mirrored
    replicas, with dropout on: the weights, the eval results and the predictions of padding every row to
    --max_seq_length (with XLA too, for the XLA runs), within 1e-5."""
    config = tmp_path / "albert_config.json"
    config.write_text(json.dumps({**TINY_CONFIG, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1}))
    xla = ("--enable_xla=force",)
    references = {flags: _train(tmp_path / f"padded{len(flags)}", config, glue_slices, spm_model,
                                "--pad_to_max_length", "--do_predict", *flags) + (tmp_path / f"padded{len(flags)}",)
                  for flags in ((), xla)}
    runs = {
        "longest row, one device": ((), ("--seq_length_multiple=4",)),
        "longest row, 2 replicas": ((), ("--seq_length_multiple=4", "--distribution_strategy=mirrored",
                                         "--num_gpus=2")),
        "buckets under XLA, one device": (xla, ("--seq_length_buckets=16,24,32",)),
        "buckets under XLA, 2 replicas": (xla, ("--seq_length_buckets=16,24,32", "--distribution_strategy=mirrored",
                                                "--num_gpus=2")),
    }
    for name, (reference, flags) in runs.items():
        padded, padded_eval, _, padded_out = references[reference]
        out = tmp_path / name.replace(" ", "_").replace(",", "")
        weights, results, log = _train(out, config, glue_slices, spm_model, "--do_predict", *reference, *flags)
        assert f"{2 if 'replicas' in name else 1} replica(s) in sync" in log[0], (name, log)
        assert ("buckets 16, 24, 32" if "XLA" in name else "longest row rounded up to a multiple of 4") in log[1], log
        worst = max(float(np.abs(padded[k] - weights[k]).max()) for k in padded)
        assert worst <= 1e-5, (name, worst)
        assert results.keys() == padded_eval.keys()
        for key in results:
            assert abs(results[key] - padded_eval[key]) <= 1e-5, (name, key)
        np.testing.assert_allclose(_predictions(out), _predictions(padded_out), atol=1e-5, err_msg=name)
