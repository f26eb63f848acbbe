"""A tiny model trained through albert_tf.training's loop, for the loop's tests.

Used two ways: imported by conftest.py (in-process runs), and run as a script in a
subprocess (resume after SIGKILL, SIGTERM, MirroredStrategy, MultiWorkerMirroredStrategy):

    python tests/training/toy_driver.py --input_file=DATA --output_dir=OUT [--dump=weights.npz]

Variable names contain `LayerNorm`, `bias` and `kernel` like ALBERT's, so the
optimizer's exclusions are exercised.  Test hooks: --hang_at_step (block forever once
that step's checkpoint is written, for a SIGKILL), --slow_step_seconds (sleep in every
step, for a SIGTERM mid-loop), --nan_at_step (make the loss NaN from that step on),
--die_in_save=STEP:POINT (SIGKILL itself while saving checkpoint STEP, see ``die_in_save``).
Errors end the run as in the real drivers (``albert_tf.cli``: one line, exit 1).
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np
import tensorflow as tf

SEQ_LEN = 8
VOCAB = 32


def write_toy_data(path: str, num_examples: int, seed: int = 0) -> None:
    """TFRecords of (input_ids[8], label, weight); label = parity of the ids' sum."""
    rng = np.random.default_rng(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(num_examples):
            ids = rng.integers(1, VOCAB, SEQ_LEN)
            feature = {
                "input_ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids.tolist())),
                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(ids.sum() % 2)])),
                "weight": tf.train.Feature(float_list=tf.train.FloatList(value=[float(rng.integers(1, 3))])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def parse_example(serialized):
    spec = {
        "input_ids": tf.io.FixedLenFeature([SEQ_LEN], tf.int64),
        "label": tf.io.FixedLenFeature([], tf.int64),
        "weight": tf.io.FixedLenFeature([], tf.float32),
    }
    example = tf.io.parse_single_example(serialized, spec)
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}


def build_model(dropout: float):
    from albert_tf.keras import keras
    from albert_tf.training import StatelessDropout

    init = lambda s: keras.initializers.TruncatedNormal(stddev=0.2, seed=s)  # noqa: E731

    class ToyModel(keras.Model):
        def __init__(self):
            super().__init__(name="toy")
            self.embeddings = keras.layers.Embedding(VOCAB, 8, embeddings_initializer=init(1),
                                                     name="word_embeddings")
            self.dense = keras.layers.Dense(16, activation="tanh", kernel_initializer=init(2), name="dense")
            self.norm = keras.layers.LayerNormalization(epsilon=1e-12, name="LayerNorm")
            self.drop = StatelessDropout(dropout)
            self.out = keras.layers.Dense(2, kernel_initializer=init(3), bias_initializer="ones", name="output")

        def call(self, input_ids, training=False):
            x = self.embeddings(input_ids)
            x = self.drop(self.norm(self.dense(x)), training=training)
            x = self.drop(x, training=training)  # a second application: another mask
            return self.out(tf.reduce_mean(x, axis=1))

    return ToyModel()


def make_task(input_file: str, train_batch_size: int, eval_batch_size: int = 5, dropout: float = 0.1,
              seed: int = 1, hooks: dict | None = None, eval_file: str | None = None):
    from albert_tf.training import Task, make_tfrecord_dataset

    hooks = hooks or {}

    def loss_fn(model, features, training):
        logits = tf.cast(model(features["input_ids"], training=training), tf.float32)
        labels = features["label"]
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        loss = tf.reduce_mean(per_example)
        if training and "nan_at_step" in hooks:
            step = hooks["trainer"].global_step.read_value()
            loss = loss * tf.where(step >= hooks["nan_at_step"], float("nan"), 1.0)
        if training and ("slow_step_seconds" in hooks or "hang_at_step" in hooks):
            step = hooks["trainer"].global_step.read_value()

            def pause(step_value):
                print(f"STEP {int(step_value) + 1}", file=sys.stderr, flush=True)
                if "hang_at_step" in hooks and int(step_value) >= hooks["hang_at_step"]:
                    print(f"HANGING at step {int(step_value)}", file=sys.stderr, flush=True)
                    time.sleep(3600)
                time.sleep(hooks.get("slow_step_seconds", 0.0))
                return np.float32(0.0)

            loss = loss + tf.numpy_function(pause, [step], tf.float32, stateful=True)
        correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
        weight = features["weight"]
        metrics = {
            "accuracy": (tf.reduce_sum(correct), tf.cast(tf.size(correct), tf.float32)),
            "weighted_accuracy": (tf.reduce_sum(weight * correct), tf.reduce_sum(weight)),
            "mean_logit": tf.reduce_mean(logits),
        }
        return loss, metrics

    def train_dataset_fn(ctx):
        return make_tfrecord_dataset(
            input_file, parse_example, ctx.get_per_replica_batch_size(train_batch_size), is_training=True,
            input_context=ctx, seed=seed, shuffle_buffer_size=16, shard_mode="records")

    def eval_dataset_fn(ctx):
        return make_tfrecord_dataset(
            eval_file or input_file, parse_example, eval_batch_size, is_training=False, input_context=ctx,
            drop_remainder=False)

    return Task(build_model=lambda: build_model(dropout), loss_fn=loss_fn,
                train_dataset_fn=train_dataset_fn, eval_dataset_fn=eval_dataset_fn)


def weights_by_name(model) -> dict[str, np.ndarray]:
    return {v.name: v.numpy() for v in model.variables}


# The loop settings of a toy run; flags of the same names override them.
DEFAULTS = dict(num_train_steps=12, train_batch_size=8, steps_per_loop=1000, save_checkpoints_steps=4,
                keep_checkpoint_max=5, log_steps=100, gradient_accumulation_steps=1, enable_xla=False,
                seed=12345, dropout=0.1, learning_rate=0.05, optimizer="lamb")


def make_trainer(strategy, input_file: str, output_dir: str, eval_file: str | None = None,
                 hooks: dict | None = None, **options):
    """The Trainer of a toy run (the same in-process and in the subprocess driver)."""
    from albert_tf.training import TrainConfig, Trainer, create_optimizer

    o = {**DEFAULTS, **options}
    hooks = {} if hooks is None else hooks
    task = make_task(input_file, o["train_batch_size"], dropout=o["dropout"], hooks=hooks, eval_file=eval_file)
    config = TrainConfig(
        output_dir=output_dir, num_train_steps=o["num_train_steps"], train_batch_size=o["train_batch_size"],
        steps_per_loop=o["steps_per_loop"], save_checkpoints_steps=o["save_checkpoints_steps"],
        keep_checkpoint_max=o["keep_checkpoint_max"], log_steps=o["log_steps"],
        gradient_accumulation_steps=o["gradient_accumulation_steps"], enable_xla=o["enable_xla"],
        seed=o["seed"])
    trainer = Trainer(
        task, strategy,
        lambda: create_optimizer(o["learning_rate"], o["num_train_steps"], 2, optimizer=o["optimizer"]),
        config)
    hooks["trainer"] = trainer
    return trainer


SAVE_POINTS = ("before_index", "before_state_file", "input_state", "input_data", "worker_model", "after_barrier",
               "pruning")


def die_in_save(step: int, point: str, worker_index: int) -> None:
    """Fault injection at the checkpoint writer: SIGKILL this process while saving ``model.ckpt-<step>``
    before_index: its data shards are in place, its index is not; before_state_file: all its files are
    in place, the state file does not name it yet; input_state: this worker's input position lacks its index;
    input_data: it has no file yet; worker_model: a non-chief worker's part of writing the model (while the
    chief writes its copy); after_barrier: every worker has written its part, a non-chief one is pruning;
    pruning: the state file names it, and the first file of an older checkpoint ``keep_checkpoint_max`` drops
    is deleted (the chief)."""
    import os
    import signal

    from albert_tf.training import checkpoint_policy
    from albert_tf.weights import files

    name = f"{files.CHECKPOINT_BASENAME}-{step}"
    index = {"before_index": f"{name}.index", "input_state": f"{name}.input-{worker_index}.index",
             "input_data": f"{name}.input-{worker_index}.data-00000-of-00001"}.get(point)

    def die():
        print(f"DYING in save {step} at {point}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    policy = checkpoint_policy.CheckpointPolicy
    if point == "worker_model":  # the first Checkpoint.write into its scratch folder during save `step`
        write, save = tf.train.Checkpoint.write, policy._write

        def dying_write(self, file_prefix, options=None):
            if f".tmp-worker{worker_index}" in file_prefix and files.step_of(saving[0]) == step:
                die()
            return write(self, file_prefix, options)

        def recording_save(self, prefix, *args):
            saving[:] = [prefix]
            return save(self, prefix, *args)

        saving = [""]
        tf.train.Checkpoint.write, policy._write = dying_write, recording_save
    elif point == "after_barrier":
        prune = policy._prune_own_input_states

        def dying_prune(self):
            if tf.io.gfile.exists(files.checkpoint_prefix(self.output_dir, step) + f".input-{worker_index}.index"):
                die()
            return prune(self)

        policy._prune_own_input_states = dying_prune
    elif point == "pruning":
        update, remove = files.update_state_file, tf.io.gfile.remove
        pruning = [False]

        def removing(path):
            remove(path)
            if pruning[0]:
                die()

        def updating(output_dir, path, keep):
            pruning[0] = path.endswith(name)
            return update(output_dir, path, keep)

        files.update_state_file, tf.io.gfile.remove = updating, removing
    elif index is not None:
        rename = tf.io.gfile.rename

        def renaming(src, dst, overwrite=False):
            if dst.endswith(index):
                die()
            return rename(src, dst, overwrite)

        tf.io.gfile.rename = renaming
    else:
        update = files.update_state_file

        def updating(output_dir, path, keep):
            if path.endswith(name):
                die()
            return update(output_dir, path, keep)

        files.update_state_file = updating


def main(argv):
    del argv
    from absl import flags

    from albert_tf.training import strategy_from_flags

    f = flags.FLAGS
    strategy = strategy_from_flags(f)
    hooks = {}
    for name in ("hang_at_step", "nan_at_step"):
        if getattr(f, name) is not None:
            hooks[name] = getattr(f, name)
    if f.slow_step_seconds:
        hooks["slow_step_seconds"] = f.slow_step_seconds
    if f.die_in_save:
        step, point = f.die_in_save.split(":")
        die_in_save(int(step), point, f.task_index_for_faults)
    trainer = make_trainer(strategy, f.input_file, f.output_dir, eval_file=f.eval_file, hooks=hooks,
                           **{name: getattr(f, name) for name in DEFAULTS})
    if f.sigterm_in_save_hook is not None:  # SIGTERM while a checkpoint's save hooks run (its evaluation)
        def signal_during_hook(path, step=f.sigterm_in_save_hook):
            if path.endswith(f"model.ckpt-{step}"):
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.5)  # the hook goes on after the signal (the handler runs in between)
                print(f"HOOK DONE after SIGTERM at {path}", file=sys.stderr, flush=True)

        trainer.add_save_hook(signal_during_hook)
    result = trainer.train()
    if f.dump:
        results = trainer.evaluate() if f.eval_at_end else {}
        if trainer.worker.is_chief:
            arrays = weights_by_name(trainer.model)
            arrays["__global_step__"] = np.array(result.global_step)
            np.savez(f.dump, **arrays)
            with open(f.dump + ".json", "w") as out:
                json.dump({"eval": results, "logs": result.logs}, out)
    print(f"DONE step {result.global_step}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    from absl import app, flags

    from albert_tf.training import define_flags

    define_flags(save_checkpoints_steps=DEFAULTS["save_checkpoints_steps"])
    flags.DEFINE_string("input_file", None, "TFRecords.")
    flags.DEFINE_string("output_dir", None, "Checkpoints.")
    for _name, _default in DEFAULTS.items():
        if _name in flags.FLAGS:
            continue  # defined by define_flags()
        _kind = {bool: "bool", int: "integer", float: "float", str: "string"}[type(_default)]
        getattr(flags, f"DEFINE_{_kind}")(_name, _default, "See DEFAULTS.")
    flags.DEFINE_integer("hang_at_step", None, "")
    flags.DEFINE_integer("nan_at_step", None, "")
    flags.DEFINE_float("slow_step_seconds", 0.0, "")
    flags.DEFINE_string("die_in_save", None, "STEP:POINT, POINT one of " + ", ".join(SAVE_POINTS))
    flags.DEFINE_integer("task_index_for_faults", 0, "This worker's index (for --die_in_save=STEP:input_state).")
    flags.DEFINE_integer("sigterm_in_save_hook", None, "Send this process SIGTERM in the save hook of this step.")
    flags.DEFINE_string("dump", None, "Write final weights (npz) and logs (json) here.")
    flags.DEFINE_bool("eval_at_end", False, "")
    flags.DEFINE_string("eval_file", None, "TFRecords for --eval_at_end (default: --input_file).")
    flags.mark_flags_as_required(["input_file", "output_dir"])
    from albert_tf.cli import reports_errors

    app.run(reports_errors(main))
