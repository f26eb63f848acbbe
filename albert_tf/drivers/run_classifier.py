"""Fine-tunes, evaluates, predicts and exports ALBERT on a GLUE task.

The original's flags and files (ALBERT_SPEC §8) plus the project's distribution,
precision and XLA flags. Examples:

    python run_classifier.py --task_name=MRPC --data_dir=$GLUE_DIR \\
      --albert_config_file=$ALBERT/albert_config.json --spm_model_file=$ALBERT/30k-clean.model \\
      --init_checkpoint=$ALBERT/model.ckpt-best --output_dir=out/MRPC \\
      --do_train --do_eval --do_predict --max_seq_length=512 --train_batch_size=32 \\
      --learning_rate=2e-5 --train_step=800 --warmup_step=200 --save_checkpoints_steps=100

    # the diagnostic set with the best MNLI model
    python run_classifier.py --task_name=AX --do_predict --init_checkpoint=out/MNLI/model.ckpt-best ...

Writes into --output_dir: model.ckpt-<step> checkpoints, eval_results.txt,
model.ckpt-best + best_trial.txt, test_results.tsv, submit_results.tsv, TensorBoard
logs (train: output_dir, eval: output_dir/eval); with --export_dir a SavedModel in
<export_dir>/<unix time>. The task is albert_tf.glue.task.GlueTask; the work is
albert_tf.finetuning's runner.
"""
from __future__ import annotations

import dataclasses
import math

from absl import flags, logging

from albert_tf.cli import entry_point, require_flags
from albert_tf.drivers.finetuning import (albert_config_from_flags, check_stage_flags, define_model_flags,
                                          define_serving_precision_flag, define_stage_flags,
                                          define_text_signature_flag, finetuning_main,
                                          job_from_flags, refuse_flags_of_another_mode, unused_weights_flag)
from albert_tf.glue import custom
from albert_tf.glue.processors import PREDICT_ONLY, TASK_NAMES
from albert_tf.training.flags import define_flags
from albert_tf.versions import version_base_problem

FLAGS = flags.FLAGS

# ---- the original's flags (names and defaults) ----
flags.DEFINE_string("data_dir", None, "The input data dir: holds <TASK>/{train,dev,test}.tsv as GLUE "
                    "distributes them (diagnostic/diagnostic.tsv for AX).")
flags.DEFINE_string("task_name", None, f"The GLUE task: {', '.join(TASK_NAMES)} (case-insensitive; "
                    f"{', '.join(PREDICT_ONLY)}: predict only), or '{custom.TASK_NAME}' for your own data "
                    f"(--train_file, --dev_file, --test_file, --text_columns, --label_column).")
flags.DEFINE_string("output_dir", None, "Where checkpoints and result files are written.")
flags.DEFINE_string("cached_dir", None, "Where feature TFRecords are cached (default <output_dir>/"
                    "cached_features). They are rebuilt when the data file, tokenizer model, "
                    "lower-casing, max_seq_length or task changes.")
define_model_flags(512, "Maximum total input length in tokens after tokenization; longer pairs are "
                   "truncated, shorter ones padded.")
define_stage_flags(do_train=False, do_eval=False, do_predict=False, learning_rate=5e-5, train_step=1000,
                   warmup_step=0)
# ---- --task_name=custom: a user's own labelled text ----
flags.DEFINE_string("train_file", None, "custom: the training file (TSV, CSV or JSON Lines); its labels are the "
                    "task's.")
flags.DEFINE_string("dev_file", None, "custom: the file every checkpoint is evaluated on (--do_eval).")
flags.DEFINE_string("test_file", None, "custom: the file to predict (--do_predict); labels optional.")
flags.DEFINE_list("text_columns", None, "custom: the column holding the text, or two columns for a pair.")
flags.DEFINE_string("label_column", "label", "custom: the column holding the label.")
flags.DEFINE_enum("file_format", None, ["tsv", "csv", "jsonl"], "custom: the files' format (default: by "
                  "extension: .tsv, .csv, .jsonl/.json).")
flags.DEFINE_bool("regression", False, "custom: the labels are scores (default: detected when they are numbers "
                  "with fractions).")
flags.DEFINE_enum("key_metric", None, list(custom.KEY_METRICS), "custom: the metric that chooses model.ckpt-best "
                  "(default accuracy; pearson for a regression).")
# What only --task_name=custom reads (a GLUE task's files and labels are fixed).
CUSTOM_ONLY_FLAGS = ("train_file", "dev_file", "test_file", "text_columns", "label_column", "file_format",
                     "regression", "key_metric")
flags.DEFINE_string("positive_label", None, "The label F1 and Matthews correlation score as the positive class "
                    "(tasks with two labels). Default: 1 for GLUE tasks (the original's); for custom data the "
                    "label the other one negates (duplicate/not_duplicate), else the one named 1, true, yes, pos "
                    "or positive, else the one that sorts second. Logged at the start of the run.")
flags.DEFINE_string("export_dir", None, "If set, export a SavedModel (serialized tf.Example and raw-text "
                    "signatures) of the best (else latest) checkpoint under this directory.")
flags.DEFINE_float("threshold_to_export", float("nan"), "A decision threshold on the positive class's "
                   "probability, exported as `threshold` with `thresholded_predictions` beside the "
                   "argmax `predictions` (binary tasks only).")
define_serving_precision_flag()
define_text_signature_flag("serving_text", "serving_default, on serialized tf.Examples of ids, stays; a WordPiece "
                           "--vocab_file can then be exported too")

REQUIRED = ("task_name", "output_dir", "albert_config_file")


def task_and_job_from_flags():
    """The GLUE task and the run's job, from the flags (checked)."""
    from albert_tf.glue.export import check_threshold
    from albert_tf.glue.features import check_max_seq_length
    from albert_tf.glue.processors import GlueProcessor, get_processor
    from albert_tf.glue.task import GlueTask, features_dir
    from albert_tf.tokenization import FullTokenizer, tokenizer_fingerprint

    require_flags(FLAGS, *REQUIRED)
    unused = unused_weights_flag(FLAGS)  # once a run (it looks into --output_dir): the checks and the job follow it
    check_stage_flags(FLAGS, unused)
    if FLAGS.task_name.strip().lower() == custom.TASK_NAME:
        processor = custom_processor_from_flags()
    else:
        processor = get_processor(FLAGS.task_name, FLAGS.do_lower_case)  # an unknown task lists the known ones
        refuse_flags_of_another_mode(FLAGS, CUSTOM_ONLY_FLAGS, f"--task_name={custom.TASK_NAME} (your own files)",
                                     f"--task_name={FLAGS.task_name} reads GLUE's files under --data_dir")
        require_flags(FLAGS, "data_dir")
        if FLAGS.positive_label is not None:
            processor = GlueProcessor(dataclasses.replace(processor.spec, positive_label=FLAGS.positive_label),
                                      FLAGS.do_lower_case)
    log_positive_class(processor.spec)
    threshold = None if math.isnan(FLAGS.threshold_to_export) else FLAGS.threshold_to_export
    check_threshold(processor.spec, threshold)  # before training, not at the export after it
    check_max_seq_length(processor.spec, FLAGS.max_seq_length)
    if not FLAGS.spm_model_file and not FLAGS.vocab_file:
        raise ValueError("set --spm_model_file (SentencePiece model) or --vocab_file (WordPiece vocab)")
    if FLAGS.export_dir and FLAGS.text_signature and not FLAGS.spm_model_file:  # before training, not after it
        raise ValueError("--export_dir: the raw-text signature needs --spm_model_file (SentencePiece model); "
                         "a WordPiece --vocab_file cannot be exported with it (--notext_signature exports without it)")
    if FLAGS.export_dir:  # a file or a read-only place there failed after training and prediction
        problem = version_base_problem("export_dir", FLAGS.export_dir)
        if problem:
            raise ValueError(problem)
    config = albert_config_from_flags(FLAGS, FLAGS.spm_model_file, FLAGS.vocab_file, unused)
    job = job_from_flags(FLAGS, config, unused, num_train_steps=FLAGS.train_step, warmup_steps=FLAGS.warmup_step,
                         do_eval=FLAGS.do_eval, eval_batch_size=FLAGS.eval_batch_size, export_dir=FLAGS.export_dir)
    task = GlueTask(
        processor=processor,
        data_dir=FLAGS.data_dir or "",
        features_dir=features_dir(job.output_dir, FLAGS.cached_dir),
        tokenizer=FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.spm_model_file),
        tokenizer_id=tokenizer_fingerprint(FLAGS.spm_model_file, FLAGS.vocab_file, FLAGS.do_lower_case),
        max_seq_length=FLAGS.max_seq_length,
        spm_model_file=FLAGS.spm_model_file,
        do_lower_case=FLAGS.do_lower_case,
        threshold_to_export=threshold,
        serving_precision=FLAGS.serving_precision,
        text_signature=FLAGS.text_signature,
    )
    return task, job


def custom_processor_from_flags() -> custom.CustomProcessor:
    """The reader of --task_name=custom's files, its labels found in the training file (else labels.txt)."""
    import os

    from albert_tf.fileio import absolute

    require_flags(FLAGS, "text_columns")
    files = {"train": FLAGS.train_file, "dev": FLAGS.dev_file, "test": FLAGS.test_file}
    saved = [FLAGS.output_dir] + ([os.path.dirname(absolute(FLAGS.init_checkpoint))]
                                  if FLAGS.init_checkpoint else [])
    labels = custom.discover_labels(FLAGS.train_file, FLAGS.file_format, FLAGS.label_column, FLAGS.regression,
                                    saved)
    return custom.CustomProcessor(files, FLAGS.text_columns, FLAGS.label_column, labels, FLAGS.key_metric,
                                  FLAGS.file_format, FLAGS.positive_label)


def log_positive_class(spec) -> None:
    """Says which class F1 and Matthews correlation score, and why (binary tasks that report them)."""
    if spec.labels is None or len(spec.labels) != 2 or not {"f1", "matthew_corr"} & set(spec.metrics):
        return
    if FLAGS.positive_label is not None:
        why = "--positive_label"
    elif spec.name == custom.TASK_NAME:
        why = custom.default_positive_label(spec.labels)[1]
    else:
        why = "class 1, as the original"
    logging.info("F1 and Matthews correlation score %r as the positive class (%s)", spec.labels[spec.positive_id],
                 why)


main = finetuning_main(task_and_job_from_flags)


define_flags()  # --distribution_strategy, --mixed_precision, --enable_xla, TPU flags, --seed, loop flags


run = entry_point(main)


if __name__ == "__main__":
    run()
