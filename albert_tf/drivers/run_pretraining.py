"""ALBERT pretraining (masked LM + sentence order) with the original's flags.

One device, several GPUs (--distribution_strategy=mirrored), several machines
(multi_worker_mirrored + TF_CONFIG) or a TPU (--use_tpu). A rerun of the same
command resumes from the latest checkpoint in --output_dir.
"""
from __future__ import annotations

from absl import flags

from albert_tf.cli import closing_summary, entry_point, reports_errors, require_flags
from albert_tf.training.flags import (count_flag_problems, define_flags, training_flag_problems,
                                      warn_if_warmup_outlasts_training)
from albert_tf.training.optimizers import OPTIMIZERS

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
flags.DEFINE_integer("max_eval_steps", 100, "Eval batches per checkpoint.")
flags.DEFINE_bool("init_from_group0", False, "Initialize every group from group_0 of --init_checkpoint.")
flags.DEFINE_float("masked_lm_budget", 0, "If > 0, online masking: every example is masked anew in the input "
                   "pipeline (fresh masks each epoch), with this share of tokens masked as "
                   "create_pretraining_data.py's --masked_lm_prob (0.15 = its statistics). 0: the records' masks.")
flags.DEFINE_string("spm_model_file", None, "With --masked_lm_budget: the SentencePiece model the records were made "
                    "with, for its [MASK] id (without it, the id is read from the records' own masks).")
flags.DEFINE_string("vocab_file", None, "With --masked_lm_budget: the WordPiece vocab the records were made with, "
                    "for its [MASK] id (as --spm_model_file).")
define_flags(save_checkpoints_steps=5000)  # the original pretraining's interval
REQUIRED = ("albert_config_file", "output_dir")


def _check_flags() -> None:
    if not FLAGS.do_train and not FLAGS.do_eval:
        raise ValueError("at least one of --do_train or --do_eval must be True")
    if FLAGS.do_train and not FLAGS.input_file:
        raise ValueError("--do_train needs --input_file (TFRecords from create_pretraining_data.py)")
    if FLAGS.do_eval and not FLAGS.input_file:
        raise ValueError("--do_eval needs --input_file")
    # The training flags are checked in every mode: an eval-only run builds the same loop (its batch and
    # step settings) and optimizer, which refused a bad value only after the records were read.
    problems = training_flag_problems(FLAGS)
    if FLAGS.do_train:
        warn_if_warmup_outlasts_training(FLAGS)
    if FLAGS.do_eval:  # zero batches scored wrote NaN results
        problems += count_flag_problems(FLAGS, "eval_batch_size", "max_eval_steps")
    if problems:
        raise ValueError("; ".join(problems))
    if not 0 <= FLAGS.masked_lm_budget < 1:
        raise ValueError(f"--masked_lm_budget={FLAGS.masked_lm_budget}: expected a share of tokens in [0, 1) "
                         f"(0.15 as create_pretraining_data.py), or 0 for the records' own masks")
    if not FLAGS.masked_lm_budget and (FLAGS.spm_model_file or FLAGS.vocab_file):
        raise ValueError("--spm_model_file and --vocab_file give online masking its [MASK] id: they need "
                         "--masked_lm_budget > 0 (with 0 the records' own masks are used)")


def _online_mask_id(vocab_size: int) -> int | None:
    """The [MASK] id of --spm_model_file / --vocab_file, or None to read it from the records."""
    if not (FLAGS.spm_model_file or FLAGS.vocab_file):
        return None
    from albert_tf.tokenization import FullTokenizer
    from albert_tf.vocab_check import check_tokenizer

    # The drivers' one check that a tokenizer is the model's: then its [MASK] id is inside the embeddings.
    check_tokenizer(FLAGS.spm_model_file, FLAGS.vocab_file, vocab_size, FLAGS.albert_config_file)
    tokenizer = FullTokenizer(vocab_file=FLAGS.vocab_file, spm_model_file=FLAGS.spm_model_file)
    if "[MASK]" not in tokenizer.vocab:
        raise ValueError(f"{FLAGS.spm_model_file or FLAGS.vocab_file} has no [MASK] token")
    return tokenizer.vocab["[MASK]"]


@reports_errors
def main(argv) -> int:
    del argv
    from albert_tf import AlbertConfig
    from albert_tf.training import strategy_from_flags
    from albert_tf.vocab_check import check_pretraining_data
    from albert_tf.pretraining import check_first_records, pretraining_files
    from albert_tf.fileio import absolute
    from albert_tf.training.distribution import JOB_MESSAGES, ending_together, worker_info
    from albert_tf.run_lock import output_dir_lock
    from albert_tf.training.checkpoint_policy import refuse_resuming_the_original

    require_flags(FLAGS, *REQUIRED)
    _check_flags()
    config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
    if FLAGS.input_file:
        input_files = pretraining_files(FLAGS.input_file)
        check_pretraining_data(input_files, config.vocab_size, FLAGS.albert_config_file,
                               {"max_seq_length": FLAGS.max_seq_length,
                                "max_predictions_per_seq": FLAGS.max_predictions_per_seq})
    if FLAGS.do_train:  # before evaluating the folder's checkpoints: a refused run writes nothing there
        refuse_resuming_the_original(FLAGS.output_dir)
    strategy = strategy_from_flags()
    if FLAGS.input_file:  # reads with tf.data: after the strategy, which must split the CPU before any tensor
        check_first_records(input_files, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq)
    worker = worker_info(strategy)
    # The run lock before the first write (the evaluation of checkpoints left by an earlier run).
    with ending_together(strategy), output_dir_lock(absolute(FLAGS.output_dir), worker.num_workers,
                                                    worker.worker_index, FLAGS.take_over_run_lock, JOB_MESSAGES):
        _train_and_evaluate(config, strategy)
    return 0


def _train_and_evaluate(config, strategy) -> None:
    from albert_tf.pretraining import checkpoint_evaluator, pretraining_task
    from albert_tf.training import Trainer, create_optimizer, one_hot_embeddings, train_config_from_flags
    from albert_tf.weights.files import known_checkpoints

    task = pretraining_task(
        config, FLAGS.input_file, FLAGS.max_seq_length, FLAGS.max_predictions_per_seq,
        FLAGS.train_batch_size, FLAGS.eval_batch_size, FLAGS.seed, FLAGS.init_checkpoint,
        FLAGS.init_from_group0, use_one_hot_embeddings=one_hot_embeddings(strategy),
        masked_lm_budget=FLAGS.masked_lm_budget,
        mask_id=_online_mask_id(config.vocab_size) if FLAGS.masked_lm_budget else None)

    def optimizer_fn():
        return create_optimizer(FLAGS.learning_rate, FLAGS.num_train_steps, FLAGS.num_warmup_steps,
                                FLAGS.optimizer, FLAGS.poly_power, FLAGS.start_warmup_step)

    trainer = Trainer(task, strategy, optimizer_fn, train_config_from_flags(FLAGS))
    evaluator, produced = None, {}
    if FLAGS.do_eval:
        # Each checkpoint is evaluated once: those an earlier run left, then each one as it is saved.
        evaluator = checkpoint_evaluator(trainer, FLAGS.max_eval_steps)
        if not FLAGS.do_train and not known_checkpoints(FLAGS.output_dir):
            raise ValueError(f"--do_eval: no checkpoint in {FLAGS.output_dir} to evaluate")
        evaluator.evaluate_pending(trainer.is_scheduled_save if FLAGS.do_train else None,
                                   eval_only=not FLAGS.do_train)
    if FLAGS.do_train:
        if evaluator is not None:
            trainer.add_save_hook(evaluator.after_save)
        result = trainer.train()
        produced.update(global_step=result.global_step, checkpoint=result.checkpoint_path)
    if evaluator is not None and trainer.worker.is_chief:
        produced.update(eval_results=evaluator.results_path, best_checkpoint=evaluator.keeper.best_prefix)
    if produced:
        print(closing_summary("run_pretraining.py", produced), flush=True)
    return 0


run = entry_point(main)


if __name__ == "__main__":
    run()
