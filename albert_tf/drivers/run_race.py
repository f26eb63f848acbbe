"""Fine-tunes and evaluates ALBERT on RACE (multiple-choice reading comprehension).

The original's flags, defaults and files, plus the project's distribution, precision
and XLA flags. Example:

    python run_race.py --data_dir=$RACE_DIR --albert_config_file=$ALBERT/albert_config.json \\
      --spm_model_file=$ALBERT/30k-clean.model --init_checkpoint=$ALBERT/model.ckpt-best \\
      --output_dir=out/race --max_seq_length=512 --max_qa_length=128 --train_batch_size=32 \\
      --learning_rate=1e-5 --train_step=12000 --warmup_step=1000 --save_checkpoints_steps=100

--data_dir holds RACE/{train,dev,test}/{middle,high}/*.txt. Writes into --output_dir:
the cached records (train/eval/predict.tf_record unless --train_file/--eval_file/
--predict_file say where), model.ckpt-<step> checkpoints, eval_results.txt (each
checkpoint's dev accuracy, overall and per level, and loss), model.ckpt-best +
best_trial.txt; with --do_predict, predict_results.txt and test_predictions.jsonl for
the test split. The task is albert_tf.race.task.RaceTask; the work is
albert_tf.finetuning's runner.
"""
from __future__ import annotations

from absl import flags

from albert_tf.cli import entry_point, require_flags
from albert_tf.drivers.finetuning import (albert_config_from_flags, check_stage_flags, define_model_flags,
                                          define_stage_flags, finetuning_main, job_from_flags, unused_weights_flag)
from albert_tf.training.flags import define_flags

FLAGS = flags.FLAGS

# ---- the original's flags (names and defaults) ----
flags.DEFINE_string("data_dir", None, "The input data dir: holds RACE/{train,dev,test}/{middle,high}/*.txt.")
flags.DEFINE_string("task_name", "race", "The task (RACE is the only one this driver runs).")
flags.DEFINE_string("train_file", None, "Where the cached training records go (default "
                    "<output_dir>/train.tf_record); rebuilt when the data, tokenizer or lengths change.")
flags.DEFINE_string("eval_file", None, "Where the cached dev records go (default <output_dir>/eval.tf_record).")
flags.DEFINE_string("predict_file", None, "Where the cached test records go (default "
                    "<output_dir>/predict.tf_record).")
flags.DEFINE_string("output_dir", None, "Where checkpoints, records and result files are written.")
define_model_flags(512, "Tokens per choice ([CLS] article [SEP] question+option [SEP]); the article is "
                   "cut from its end.")
define_stage_flags(do_train=True, do_eval=True, do_predict=False, learning_rate=1e-5, train_step=12000,
                   warmup_step=1000)
flags.DEFINE_float("dropout_prob", 0.1, "Dropout on each choice's pooled output before its score.")
flags.DEFINE_integer("max_qa_length", 128, "Question+option tokens kept (its last ones, where the option is).")
flags.DEFINE_integer("num_keep_checkpoint", 5, "How many recent checkpoints to keep (model.ckpt-best is "
                     "kept apart).")
flags.DEFINE_bool("high_only", False, "Use only the high-school questions.")
flags.DEFINE_bool("middle_only", False, "Use only the middle-school questions.")
# The shared loop reads --keep_checkpoint_max: here it is the original's --num_keep_checkpoint.
flags.DEFINE_alias("keep_checkpoint_max", "num_keep_checkpoint")

REQUIRED = ("data_dir", "spm_model_file", "albert_config_file", "output_dir")


def task_and_job_from_flags():
    """The RACE task and the run's job, from the flags (checked)."""
    from albert_tf.fileio import is_dir
    from albert_tf.race.data import levels_to_read
    from albert_tf.race.features import check_lengths
    from albert_tf.race.task import RaceTask
    from albert_tf.tokenization import FullTokenizer, tokenizer_fingerprint

    levels_to_read(FLAGS.high_only, FLAGS.middle_only)  # both set: one line before any work
    require_flags(FLAGS, *REQUIRED)
    unused = unused_weights_flag(FLAGS)  # once a run (it looks into --output_dir): the checks and the job follow it
    check_stage_flags(FLAGS, unused)
    if FLAGS.task_name.lower() != "race":
        raise ValueError(f"--task_name={FLAGS.task_name}: run_race.py runs RACE only")
    if not is_dir(FLAGS.data_dir):
        raise ValueError(f"--data_dir={FLAGS.data_dir}: no such directory (expected one holding "
                         f"RACE/{{train,dev,test}}/{{middle,high}}/*.txt)")
    config = albert_config_from_flags(FLAGS, FLAGS.spm_model_file, FLAGS.vocab_file, unused)
    check_lengths(FLAGS.max_seq_length, FLAGS.max_qa_length)
    job = job_from_flags(FLAGS, config, unused, num_train_steps=FLAGS.train_step, warmup_steps=FLAGS.warmup_step,
                         do_eval=FLAGS.do_eval, eval_batch_size=FLAGS.eval_batch_size)
    task = RaceTask(
        data_dir=FLAGS.data_dir,
        output_dir=job.output_dir,
        tokenizer=FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.spm_model_file),
        tokenizer_id=tokenizer_fingerprint(FLAGS.spm_model_file, FLAGS.vocab_file, FLAGS.do_lower_case),
        max_seq_length=FLAGS.max_seq_length,
        max_qa_length=FLAGS.max_qa_length,
        dropout_prob=FLAGS.dropout_prob,
        high_only=FLAGS.high_only,
        middle_only=FLAGS.middle_only,
        record_files={"train": FLAGS.train_file, "dev": FLAGS.eval_file, "test": FLAGS.predict_file},
    )
    return task, job


main = finetuning_main(task_and_job_from_flags)


# Shared flags with the original run_race's defaults: a checkpoint every 100 steps, 1000 steps per loop.
define_flags(save_checkpoints_steps=100, iterations_per_loop=1000)


run = entry_point(main)


if __name__ == "__main__":
    run()
