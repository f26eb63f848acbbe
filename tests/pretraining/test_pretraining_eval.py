"""run_pretraining.py --do_eval keeps as model.ckpt-best the checkpoint with the highest
masked_lm_accuracy in eval_results.txt.

The checkpoints are made here rather than trained, so that their accuracies are known
and the best is neither the first nor the last evaluated: the same random weights, with
the MLM output bias pushing every prediction to one piece id — one never masked in the
data (step 10, accuracy 0), the label of half the masked positions (step 20, 0.5) or
of a quarter of them (step 30, 0.25).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig, AlbertPretrainer

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SEQ, PRED, EXAMPLES = 16, 4, 16
TINY = {"vocab_size": 50, "embedding_size": 8, "hidden_size": 16, "num_hidden_layers": 1,
        "num_attention_heads": 2, "intermediate_size": 16, "max_position_embeddings": SEQ,
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
HALF, QUARTER, NEVER = 7, 8, 49  # piece ids of 1/2, 1/4 and none of the masked labels


def _write_records(path: str) -> None:
    """Pretraining Examples (Google's feature names) whose masked labels are 7, 7, 8, other."""
    rng = np.random.default_rng(0)

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(EXAMPLES):
            labels = [HALF, HALF, QUARTER, int(rng.integers(10, 40))]
            feature = {
                "input_ids": ints(rng.integers(1, 40, SEQ)), "input_mask": ints([1] * SEQ),
                "segment_ids": ints([0] * (SEQ // 2) + [1] * (SEQ // 2)), "token_boundary": ints([1] * SEQ),
                "masked_lm_positions": ints(rng.choice(np.arange(1, SEQ), PRED, replace=False)),
                "masked_lm_ids": ints(labels),
                "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0] * PRED)),
                "next_sentence_labels": ints([int(rng.integers(0, 2))]),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pretraining_eval")
    records = str(folder / "eval.tfrecord")
    _write_records(records)
    config_path = folder / "albert_config.json"
    config_path.write_text(json.dumps(TINY))
    output_dir = folder / "run"
    model = AlbertPretrainer(AlbertConfig.from_dict(TINY))
    model(model.dummy_inputs())
    for step, label in ((10, NEVER), (20, HALF), (30, QUARTER)):
        model.masked_lm.output_bias.assign(100.0 * np.eye(TINY["vocab_size"], dtype=np.float32)[label])
        tf.train.Checkpoint(model=model, global_step=tf.Variable(step, dtype=tf.int64)).write(
            str(output_dir / f"model.ckpt-{step}"))
    # The state file run_pretraining.py reads its checkpoint list from.
    (output_dir / "checkpoint").write_text(
        'model_checkpoint_path: "model.ckpt-30"\n'
        + "".join(f'all_model_checkpoint_paths: "model.ckpt-{s}"\n' for s in (10, 20, 30)))

    done = subprocess.run(
        [sys.executable, os.path.join(REPO, "run_pretraining.py"), f"--albert_config_file={config_path}",
         f"--input_file={records}", f"--output_dir={output_dir}", "--do_train=false", "--do_eval",
         f"--max_seq_length={SEQ}", f"--max_predictions_per_seq={PRED}", "--eval_batch_size=8",
         "--max_eval_steps=100"],
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    assert done.returncode == 0, done.stderr[-3000:]
    (folder / "stdout.txt").write_text(done.stdout)
    return output_dir


def _eval_blocks(path):
    """eval_results.txt: one block of sorted `key = value` lines per evaluated checkpoint."""
    blocks = []
    for line in path.read_text().splitlines():
        key, value = line.split(" = ")
        if key == "global_step":
            blocks.append({})
        blocks[-1][key] = float(value)
    return blocks


def test_best_checkpoint_has_the_highest_masked_lm_accuracy(evaluated):
    blocks = _eval_blocks(evaluated / "eval_results.txt")
    assert [b["global_step"] for b in blocks] == [10, 20, 30]
    accuracies = [b["masked_lm_accuracy"] for b in blocks]
    assert accuracies == pytest.approx([0.0, 0.5, 0.25], abs=1e-6)  # as constructed
    best_step = int(blocks[int(np.argmax(accuracies))]["global_step"])
    assert best_step == 20

    best = tf.train.load_checkpoint(str(evaluated / "model.ckpt-best"))
    source = tf.train.load_checkpoint(str(evaluated / f"model.ckpt-{best_step}"))
    names = sorted(best.get_variable_to_shape_map())
    assert names == sorted(source.get_variable_to_shape_map())
    for name in names:
        np.testing.assert_array_equal(best.get_tensor(name), source.get_tensor(name), err_msg=name)
    assert best.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == best_step
    last, step, value = (evaluated / "best_trial.txt").read_text().split(":")
    assert (int(last), int(step)) == (30, 20) and float(value) == pytest.approx(max(accuracies))


def test_each_eval_line_prints_the_digits_eval_results_txt_has(evaluated):
    """The original logged str(result[key]) of its float32 metrics: each checkpoint's line shows the
    text of its eval_results.txt block, not fewer digits (10.8456 for 10.845612)."""
    printed = [line.split(": ", 1) for line in (evaluated.parent / "stdout.txt").read_text().splitlines()
               if line.startswith("eval model.ckpt-")]
    assert [name for name, _ in printed] == ["eval model.ckpt-10", "eval model.ckpt-20", "eval model.ckpt-30"]
    blocks = []
    for line in (evaluated / "eval_results.txt").read_text().splitlines():
        key, value = line.split(" = ")
        if key == "global_step":
            blocks.append({})
        blocks[-1][key] = value
    for (_, values), block in zip(printed, blocks):
        assert dict(pair.split(" = ") for pair in values.split(", ")) == block
        assert all(text == str(np.float32(text)) for key, text in block.items() if key != "global_step")


_EVAL_ON_A_TOPOLOGY = r'''
import json, sys
import numpy as np
import tensorflow as tf
from albert_tf.training.distribution import create_strategy
mode, records, batch, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
strategy = create_strategy("mirrored", num_gpus=2) if mode == "mirrored" else create_strategy("one_device")
from albert_tf.config import AlbertConfig
from albert_tf.pretraining import eval_summary, pretraining_task
from albert_tf.training import TrainConfig, Trainer, create_optimizer
config = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=16, max_position_embeddings=16)
tf.random.set_seed(1)
task = pretraining_task(config, records, 16, 4, 4, batch, 1)
trainer = Trainer(task, strategy, lambda: create_optimizer(1e-3, 10, 0),
                  TrainConfig(output_dir=out, num_train_steps=1, train_batch_size=4))
print("RESULTS " + json.dumps(eval_summary(trainer.evaluate(100))))
'''


def test_every_eval_record_counts_the_same_on_every_topology(tmp_path):
    """12 records with unevenly weighted masked positions, eval batch 8: one device, 2 mirrored replicas
    (per-replica batches of 4, a last group on the host), and one device with a batch of all 12 give the
    same results. The original's TPU eval dropped the last partial batch (4 records here) and its `loss`
    was the batches' mean, which depends on the batching."""
    rng = np.random.default_rng(0)
    records = tmp_path / "eval.tfrecord"

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

    with tf.io.TFRecordWriter(str(records)) as writer:
        for i in range(12):
            real = 1 if (i // 4) % 2 == 0 else 4  # masked positions per record: 1 or 4
            feature = {"input_ids": ints(rng.integers(5, 40, SEQ)), "input_mask": ints([1] * SEQ),
                       "segment_ids": ints([0] * SEQ), "token_boundary": ints([1] * SEQ),
                       "masked_lm_positions": ints([1, 2, 3, 4]), "masked_lm_ids": ints(rng.integers(5, 40, PRED)),
                       "masked_lm_weights": tf.train.Feature(float_list=tf.train.FloatList(
                           value=[1.0] * real + [0.0] * (PRED - real))),
                       "next_sentence_labels": ints([i % 2])}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    script = tmp_path / "evaluate.py"
    script.write_text(_EVAL_ON_A_TOPOLOGY)
    env = dict(os.environ, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    results = {}
    for mode, batch in (("one_device", 8), ("mirrored", 8), ("one_device", 12)):
        done = subprocess.run([sys.executable, str(script), mode, str(records), str(batch),
                               str(tmp_path / f"{mode}{batch}")], capture_output=True, text=True, env=env,
                              timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        (line,) = [line for line in done.stdout.splitlines() if line.startswith("RESULTS ")]
        results[(mode, batch)] = json.loads(line[len("RESULTS "):])
    whole = results[("one_device", 12)]
    assert set(whole) == {"global_step", "loss", "masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy",
                          "sentence_order_loss"}
    assert whole["loss"] == pytest.approx(whole["masked_lm_loss"] + whole["sentence_order_loss"], abs=1e-9)
    for key in whole:
        for run in (("one_device", 8), ("mirrored", 8)):
            assert results[run][key] == pytest.approx(whole[key], abs=1e-6), (run, key)
