"""ALBERT pretraining (masked LM + sentence order) with the original's flags.

One device, several GPUs (--distribution_strategy=mirrored), several machines
(multi_worker_mirrored + TF_CONFIG) or a TPU (--use_tpu). A rerun of the same
command resumes from the latest checkpoint in --output_dir.
"""
from __future__ import annotations

from albert_tf.startup import quiet_startup  # first: hides TensorFlow's start-up lines
quiet_startup()

import os

from absl import app, flags

from albert_tf.cli import reports_errors
from albert_tf.training.optimizers import OPTIMIZERS
from albert_tf.training import distribution

FLAGS = flags.FLAGS
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the model to train.")
flags.DEFINE_string("input_file", None, "TFRecord files from create_pretraining_data.py: a glob or comma list.")
flags.DEFINE_string("output_dir", None, "Where checkpoints, summaries and eval_results.txt go.")
flags.DEFINE_string("init_checkpoint", None, "Starting checkpoint (Google TF1, TF-Hub module dir or ours); "
                    "used only when output_dir holds no checkpoint yet.")
flags.DEFINE_integer("max_seq_length", 512, "Sequence length of the TFRecords.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked positions per sequence in the TFRecords.")
flags.DEFINE_bool("do_train", True, "Whether to train.")
flags.DEFINE_bool("do_eval", False, "Whether to evaluate every saved checkpoint (best kept as model.ckpt-best).")
flags.DEFINE_integer("train_batch_size", 4096, "Global batch size of one update.")
flags.DEFINE_integer("eval_batch_size", 64, "Global eval batch size.")
flags.DEFINE_enum("optimizer", "lamb", list(OPTIMIZERS), "The optimizer.")
flags.DEFINE_float("learning_rate", 0.00176, "Peak learning rate.")
flags.DEFINE_float("poly_power", 1.0, "Power of the polynomial decay.")
flags.DEFINE_integer("num_train_steps", 125000, "Number of training steps.")
flags.DEFINE_integer("num_warmup_steps", 3125, "Number of warmup steps.")
flags.DEFINE_integer("start_warmup_step", 0, "Step at which warmup starts.")
flags.DEFINE_integer("save_checkpoints_steps", 5000, "Save a checkpoint every this many steps.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "How many checkpoints to keep.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per host call (one tf.function call).")
flags.DEFINE_integer("max_eval_steps", 100, "Eval batches per checkpoint.")
flags.DEFINE_bool("init_from_group0", False, "Initialize every group from group_0 of --init_checkpoint.")
distribution.define_flags()
for _name in ("albert_config_file", "output_dir"):
    flags.mark_flag_as_required(_name)


def _check_flags() -> None:
    if not FLAGS.do_train and not FLAGS.do_eval:
        raise ValueError("at least one of --do_train or --do_eval must be True")
    if FLAGS.do_train and not FLAGS.input_file:
        raise ValueError("--do_train needs --input_file (TFRecords from create_pretraining_data.py)")
    if FLAGS.do_eval and not FLAGS.input_file:
        raise ValueError("--do_eval needs --input_file")


@reports_errors
def main(argv) -> int:
    del argv
    import tensorflow as tf

    from albert_tf import AlbertConfig
    from albert_tf.pretraining import eval_summary, pretraining_task
    from albert_tf.training import BestCheckpointKeeper, TrainConfig, Trainer, create_optimizer, write_eval_results
    from albert_tf.training.checkpointing import all_checkpoints
    from albert_tf.training.data import expand_file_patterns
    from albert_tf.vocab_check import check_pretraining_data

    _check_flags()
    config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
    if FLAGS.input_file:
        check_pretraining_data(expand_file_patterns(FLAGS.input_file), config.vocab_size, FLAGS.albert_config_file)
    strategy = distribution.strategy_from_flags()
    task = pretraining_task(
        config, FLAGS.input_file, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
        FLAGS.train_batch_size, FLAGS.eval_batch_size, FLAGS.seed, FLAGS.init_checkpoint,
        FLAGS.init_from_group0, use_one_hot_embeddings=isinstance(strategy, tf.distribute.TPUStrategy))
    train_config = TrainConfig(
        output_dir=FLAGS.output_dir, num_train_steps=FLAGS.num_train_steps,
        train_batch_size=FLAGS.train_batch_size, steps_per_loop=FLAGS.iterations_per_loop,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps, keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        log_steps=FLAGS.log_steps, gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
        enable_xla=FLAGS.enable_xla, seed=FLAGS.seed)

    def optimizer_fn():
        return create_optimizer(FLAGS.learning_rate, FLAGS.num_train_steps, FLAGS.num_warmup_steps,
                                FLAGS.optimizer, FLAGS.poly_power, FLAGS.start_warmup_step)

    trainer = Trainer(task, strategy, optimizer_fn, train_config)
    if FLAGS.do_train:
        result = trainer.train()
        print(f"training finished at step {result.global_step}; checkpoint {result.checkpoint_path}")
    if FLAGS.do_eval:
        keeper = BestCheckpointKeeper(FLAGS.output_dir, "masked_lm_accuracy")
        checkpoints = all_checkpoints(FLAGS.output_dir)
        if not checkpoints:
            raise ValueError(f"--do_eval: no checkpoint in {FLAGS.output_dir} to evaluate")
        results_path = os.path.join(FLAGS.output_dir, "eval_results.txt")
        for path in checkpoints:
            results = eval_summary(trainer.evaluate(FLAGS.max_eval_steps, checkpoint_path=path))
            if trainer.worker.is_chief:
                keeper.update(path, results)
                write_eval_results(results_path, results, append=path != checkpoints[0])
            print(f"eval {os.path.basename(path)}: " + ", ".join(f"{k} = {v:.6g}" for k, v in results.items()))
        if trainer.worker.is_chief:
            print(f"eval results in {results_path}; best checkpoint {keeper.best_prefix}")
    return 0


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
