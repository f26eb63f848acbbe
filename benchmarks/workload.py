"""The pretraining-step workload several benchmarks time (``pretraining_step.py``,
``profile_step.py``, ``step_memory.py``; ``finetune.py`` and ``matmul_ceiling.py`` reuse parts):
its FLOP count, synthetic records, the Trainer it runs through, its flags, and Hugging Face's
training step as its Trainer runs it."""
from __future__ import annotations

import argparse
import os

# --xla: the loop's enable_xla as a user writes it (albert_tf.training.xla reads it): "on" is what
# --enable_xla gets (the loop runs bf16 on CPU without XLA), "force" compiles whatever the precision.
XLA_SETTINGS = ("off", "on", "force")


def encoder_forward_flop(embedding: int, hidden: int, layers: int, intermediate: int, batch: int, seq: int) -> int:
    """Matmul FLOP of one encoder forward pass: the E->H projection, and per layer Q/K/V/output
    (4 H*H), scores and context (2 S*H per token) and the FFN (2 H*I)."""
    tokens = batch * seq
    per_layer = 2 * tokens * (4 * hidden * hidden + 2 * hidden * intermediate) + 2 * 2 * batch * seq * seq * hidden
    return 2 * tokens * embedding * hidden + layers * per_layer


def step_gflop(vocab: int, embedding: int, hidden: int, layers: int, intermediate: int,
               batch: int, seq: int, predictions: int) -> float:
    """Matmul GFLOP of one training step: forward x 3 (backward computes 2 matmuls per
    forward matmul).  Counts the encoder (`encoder_forward_flop`), the pooler, and the MLM
    head on the gathered positions (H->E dense, E->V logits).  Elementwise ops,
    softmax and LayerNorm are left out (a few percent)."""
    forward = encoder_forward_flop(embedding, hidden, layers, intermediate, batch, seq)
    forward += 2 * batch * hidden * hidden + 2 * batch * hidden * 2  # pooler, SOP
    forward += 2 * batch * predictions * (hidden * embedding + embedding * vocab)
    return 3 * forward / 1e9


def classifier_step_gflop(embedding: int, hidden: int, layers: int, intermediate: int, batch: int,
                          width: int, labels: int = 2) -> float:
    """Matmul GFLOP of one fine-tuning step (forward x 3) on a batch cut to ``width`` positions:
    the encoder (`encoder_forward_flop`), the pooler and the classifier."""
    forward = encoder_forward_flop(embedding, hidden, layers, intermediate, batch, width)
    forward += 2 * batch * hidden * (hidden + labels)
    return 3 * forward / 1e9


def synthetic_records(path: str, count: int, seq: int, predictions: int, vocab: int, seed: int) -> None:
    """Full-length random pretraining instances, in the project's TFRecord format."""
    import random

    import tensorflow as tf

    from albert_tf.pretraining_data.features import ExampleSerializer

    rng = random.Random(seed)
    serializer = ExampleSerializer(seq, predictions, vocab)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(count):
            tokens = [rng.randrange(5, vocab) for _ in range(seq)]
            first = rng.randrange(seq // 4, 3 * seq // 4)
            segments = [0] * first + [1] * (seq - first)
            positions = sorted(rng.sample(range(1, seq - 1), predictions))
            ids = [rng.randrange(5, vocab) for _ in range(predictions)]
            writer.write(serializer.serialize_instance(
                tokens, segments, [1] * seq, positions, ids, rng.randrange(2)))


def build_trainer(args, tmp: str):
    """The Trainer that ours is timed through, on synthetic data in `tmp`; returns
    (trainer, policy name).  Shared with ``profile_step.py``."""
    import tensorflow as tf

    from albert_tf import AlbertConfig
    from albert_tf.pretraining import pretraining_task
    from albert_tf.training import TrainConfig, Trainer, create_optimizer, set_mixed_precision
    from albert_tf.training.xla import parse_xla_setting

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    policy = set_mixed_precision("bf16" if args.precision == "bf16" else "none")
    config = AlbertConfig.preset("base", 2)
    data = os.path.join(tmp, "synthetic.tfrecord")
    synthetic_records(data, 256, args.seq_length, args.max_predictions, config.vocab_size, args.seed)
    task = pretraining_task(config, data, args.seq_length, args.max_predictions,
                            args.batch_size, args.batch_size, args.seed)
    # Boundaries (log / save) far away: each train() call is one loop of exactly the
    # steps asked for, and the Trainer's own examples/s covers just that loop.
    train_config = TrainConfig(
        output_dir=os.path.join(tmp, "out"), num_train_steps=1, train_batch_size=args.batch_size,
        steps_per_loop=1, save_checkpoints_steps=10**9, keep_checkpoint_max=1, log_steps=10**9,
        enable_xla=parse_xla_setting(args.xla), seed=args.seed, handle_signals=False)
    strategy = tf.distribute.OneDeviceStrategy("/cpu:0")

    def optimizer_fn():  # the recipe's LAMB and schedule (run_pretraining.py defaults)
        return create_optimizer(0.00176, 125000, 3125, "lamb")

    return Trainer(task, strategy, optimizer_fn, train_config), policy


def add_step_flags(parser: argparse.ArgumentParser) -> None:
    """The workload flags of the scripts that run ``build_trainer``'s step outside this one's
    driver (``profile_step.py``, ``step_memory.py``): threads, batch, sequence, predictions, seed."""
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--max_predictions", type=int, default=20)
    parser.add_argument("--seed", type=int, default=12345)


def train_more(trainer, steps: int) -> float:
    """Runs `steps` more steps in one loop; returns seconds per step (Trainer-measured)."""
    trainer.config.num_train_steps = int(trainer.global_step.numpy()) + steps
    trainer.config.steps_per_loop = steps
    return 1.0 / trainer.train().logs["steps_per_second"]


def hf_train_step(model, optimizer, batch: dict, autocast) -> None:
    """One Hugging Face training step as its Trainer runs it: forward (under ``autocast()``),
    backward, clip to norm 1.0, update, clear the gradients."""
    import torch

    with autocast():
        loss = model(**batch).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)

