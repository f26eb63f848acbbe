"""A new task is data + head + metrics: sentence-pair similarity over a TSV this test writes, defined
here through albert_tf's public interface only (README "Adding a task"), and run end to end by the one
fine-tuning runner: train, evaluate every checkpoint, keep the best, predict."""
import csv
import dataclasses
import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import AlbertConfig
from albert_tf.data import datasets
from albert_tf.data.feature_cache import cached_records
from albert_tf.data.records import SEQUENCE, RecordSchema
from albert_tf.finetuning import FineTuningJob, FineTuningTask, PredictContext, Split, run
from albert_tf.keras import keras
from albert_tf.modeling.encoder import AlbertModel, TaskModel
from albert_tf.modeling.heads import OutputProjection
from albert_tf.modeling.models import build
from albert_tf.training import TrainConfig, create_optimizer
from albert_tf.training.results import ResultsLayout
from albert_tf.weights.kinds import ModelKind, register, unregister
from albert_tf.weights.names import projection_names

# ---- 1. Data: the examples of a split and their records ----
SCHEMA = RecordSchema("similarity", 1, (
    ("input_ids", "int64", SEQUENCE),
    ("input_mask", "int64", SEQUENCE),
    ("segment_ids", "int64", SEQUENCE),
    ("score", "float32", None),
))
WORDS = ["red", "green", "blue", "cat", "dog", "bird", "runs", "sleeps", "sings", "big", "small", "old"]
VOCAB = {word: i + 4 for i, word in enumerate(WORDS)}  # 0 padding, 2 [CLS], 3 [SEP]


def read_pairs(path):
    with open(path, newline="", encoding="utf-8") as f:
        return [(row["sentence1"], row["sentence2"], float(row["score"])) for row in csv.DictReader(f, delimiter="\t")]


def encode(a, b, seq):
    ids = [2, *(VOCAB[w] for w in a.split()), 3, *(VOCAB[w] for w in b.split()), 3]
    segments = [0] * (len(a.split()) + 2) + [1] * (len(b.split()) + 1)
    pad = [0] * (seq - len(ids))
    return {"input_ids": ids + pad, "input_mask": [1] * len(ids) + pad, "segment_ids": segments + pad}


# ---- 2. The head: a score from the pooled output, and its model kind (how its weights are named) ----
@keras.saving.register_keras_serializable(package="albert_tf_tests")
class SimilarityModel(TaskModel):
    def __init__(self, encoder, **kwargs):
        super().__init__(encoder, **kwargs)
        self.scorer = OutputProjection(1, self.config.initializer_range, name="scorer")

    def call(self, inputs, training=None):
        pooled = self.encoder(inputs, training=training)["pooled_output"]
        return {"score": tf.squeeze(self.scorer(pooled), -1)}


SIMILARITY = ModelKind("similarity", SimilarityModel, build=lambda config: build(SimilarityModel(AlbertModel(config))),
                       tf1_head_names=lambda model: projection_names("cls/similarity", model.scorer),
                       tf1_marker="cls/similarity/output_weights", tf2_marker="/scorer/output_weights/",
                       description="sentence-pair similarity of a test")


# ---- 3. The task: data, model, loss, outputs, metrics, files ----
@dataclasses.dataclass
class SimilarityTask(FineTuningTask):
    data_dir: str
    cache_dir: str
    max_seq_length: int = 16

    key_metric = "pearson"
    results_layout = ResultsLayout(sort_keys=True, best_line=True, separator="=" * 50)

    def load_split(self, split):
        path = os.path.join(self.data_dir, f"{split}.tsv")

        def build(write):
            for a, b, score in read_pairs(path):
                write(SCHEMA.serialize({**encode(a, b, self.max_seq_length), "score": score},
                                       max_seq_length=self.max_seq_length))
            return {}

        cached = cached_records(os.path.join(self.cache_dir, f"{split}.tf_record"), SCHEMA,
                                {"split": split, "max_seq_length": self.max_seq_length}, build)
        return Split(split, cached, lambda: read_pairs(path))

    def build_model(self, encoder):
        return SimilarityModel(encoder)

    def loss(self, model, batch, training):
        return tf.reduce_mean(tf.square(model(batch, training=training)["score"] - batch["score"])), {}

    def outputs(self, model, batch):
        return {"score": model(batch, training=False)["score"], "gold": batch["score"]}

    def metrics(self, split, outputs, step):
        return {"pearson": float(np.corrcoef(outputs["score"], outputs["gold"])[0, 1]),
                "eval_loss": float(np.mean((outputs["score"] - outputs["gold"]) ** 2)), "global_step": step}

    def write_predictions(self, output_dir, split, outputs, context: PredictContext):
        path = os.path.join(output_dir, "similarity.tsv")
        with open(path, "w") as f:
            f.writelines(f"{a}\t{b}\t{score:.6f}\n" for (a, b, _), score in zip(split.examples, outputs["score"]))
        return {"predictions": path}


# ---- the run ----
CONFIG = AlbertConfig(vocab_size=len(WORDS) + 4, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=32, max_position_embeddings=16,
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _write_split(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.writer(f, delimiter="\t")
        writer.writerow(["sentence1", "sentence2", "score"])
        writer.writerows(rows)


@pytest.fixture
def pairs_dir(tmp_path):
    """Pairs whose score is the share of the first sentence's words found in the second (first sentences
    use the first half of the words, so what the second one adds is told by its words alone)."""
    rng = np.random.default_rng(0)
    for split, n in (("train", 96), ("dev", 32), ("test", 10)):
        rows = []
        for _ in range(n):
            a = rng.choice(WORDS[:6], 3, replace=False)
            shared = int(rng.integers(0, 4))
            b = [*a[:shared], *rng.choice(WORDS[6:], 3 - shared, replace=False)]
            rows.append([" ".join(a), " ".join(rng.permutation(b)), shared / 3])
        _write_split(tmp_path / f"{split}.tsv", rows)
    return tmp_path


@pytest.fixture
def similarity_kind():
    register(SIMILARITY)
    yield SIMILARITY
    unregister(SIMILARITY.name)


def test_a_task_defined_here_runs_end_to_end(pairs_dir, tmp_path, similarity_kind):
    output_dir = str(tmp_path / "out")
    task = SimilarityTask(str(pairs_dir), str(tmp_path / "cache"))
    job = FineTuningJob(output_dir=output_dir, albert_config=CONFIG, do_train=True, do_eval=True, do_predict=True,
                        train=TrainConfig(output_dir=output_dir, num_train_steps=40, train_batch_size=16,
                                          steps_per_loop=10, save_checkpoints_steps=10, keep_checkpoint_max=0,
                                          log_steps=10, seed=3),
                        optimizer_fn=lambda: create_optimizer(1e-3, 40, 4, "adamw"), eval_batch_size=12,
                        predict_batch_size=4)
    produced = run(task, job, tf.distribute.OneDeviceStrategy("/cpu:0"))

    # Every checkpoint was evaluated once, in step order.
    blocks = [dict(line.split(" = ") for line in block.strip().splitlines() if " = " in line)
              for block in open(produced["eval_results"]).read().split("=" * 50) if block.strip()]
    assert [int(b["global_step"]) for b in blocks] == [10, 20, 30, 40]
    pearsons = [float(b["pearson"]) for b in blocks]
    assert pearsons[-1] > 0.8, pearsons  # it learned the task (measured: 0.54, 0.92, 0.93, 0.95)
    # The best by the key metric was kept, and it is that step's checkpoint.
    best_step = 10 * (1 + int(np.argmax(pearsons)))
    assert open(os.path.join(output_dir, "best_trial.txt")).read().split(":")[1] == str(best_step)
    best = tf.train.load_checkpoint(os.path.join(output_dir, "model.ckpt-best"))
    same_step = tf.train.load_checkpoint(os.path.join(output_dir, f"model.ckpt-{best_step}"))
    for name in best.get_variable_to_shape_map():
        if name.startswith("model/"):
            np.testing.assert_array_equal(best.get_tensor(name), same_step.get_tensor(name))
    # Predictions come from model.ckpt-best, one per test row, in file order; recomputed here from the
    # best weights and our own encoding of the rows.
    assert produced["weights"] == os.path.join(output_dir, "model.ckpt-best")
    lines = open(produced["predictions"]).read().splitlines()
    rows = read_pairs(pairs_dir / "test.tsv")
    assert [line.split("\t")[:2] for line in lines] == [[a, b] for a, b, _ in rows]
    from albert_tf.weights import load_checkpoint

    model = SimilarityModel(AlbertModel(CONFIG))
    model(model.dummy_inputs(seq_length=16))
    load_checkpoint(model, produced["weights"])
    inputs = [encode(a, b, 16) for a, b, _ in rows]
    expected = model({k: tf.constant([x[k] for x in inputs]) for k in SCHEMA.names[:3]}, training=False)["score"]
    np.testing.assert_allclose([float(line.split("\t")[2]) for line in lines], expected.numpy(), atol=1e-5)
    # The records are read back through the data floor, padded per the schema.
    split = task.load_split("dev")
    assert split.cached.reused and split.cached.num_records == 32
    assert sum(int(b[datasets.IS_REAL].numpy().sum()) for b in datasets.eval_dataset(split.cached, 12)) == 32
