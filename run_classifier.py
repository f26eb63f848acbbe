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
<export_dir>/<unix time>. The work itself is in albert_tf.glue.runner.
"""
from __future__ import annotations

from albert_tf.startup import quiet_startup  # first: hides TensorFlow's start-up lines
quiet_startup()

import math

from absl import app, flags, logging

from albert_tf.cli import reports_errors
from albert_tf.training.optimizers import OPTIMIZERS

FLAGS = flags.FLAGS

# ---- the original's flags (names and defaults) ----
flags.DEFINE_string("data_dir", None, "The input data dir: holds <TASK>/{train,dev,test}.tsv as GLUE "
                    "distributes them (diagnostic/diagnostic.tsv for AX).")
flags.DEFINE_string("albert_config_file", None, "The albert_config.json of the pre-trained model.")
flags.DEFINE_string("task_name", None, "The GLUE task: cola, mnli, mismnli, mrpc, rte, sst-2, sts-b, qqp, "
                    "qnli, wnli, or ax (predict only). Case-insensitive.")
flags.DEFINE_string("vocab_file", None, "WordPiece vocabulary (only for models without --spm_model_file).")
flags.DEFINE_string("spm_model_file", None, "The SentencePiece model the ALBERT model was trained with.")
flags.DEFINE_string("output_dir", None, "Where checkpoints and result files are written.")
flags.DEFINE_string("cached_dir", None, "Where feature TFRecords are cached (default <output_dir>/"
                    "cached_features). They are rebuilt when the data file, tokenizer model, "
                    "lower-casing, max_seq_length or task changes.")
flags.DEFINE_string("init_checkpoint", None, "Initial checkpoint: Google's TF1 ALBERT checkpoint or one of "
                    "this project's (prefix or directory).")
flags.DEFINE_string("albert_hub_module_handle", None, "A TF-Hub ALBERT module, as a local directory (its "
                    "variables are used like --init_checkpoint; --albert_config_file is still needed).")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input text (uncased models).")
flags.DEFINE_integer("max_seq_length", 512, "Maximum total input length in tokens after tokenization; "
                     "longer pairs are truncated, shorter ones padded.")
flags.DEFINE_bool("do_train", False, "Whether to run training.")
flags.DEFINE_bool("do_eval", False, "Whether to evaluate (every checkpoint) on the dev set.")
flags.DEFINE_bool("do_predict", False, "Whether to predict the test set.")
flags.DEFINE_integer("train_batch_size", 32, "Total batch size for training (all replicas).")
flags.DEFINE_integer("eval_batch_size", 8, "Batch size for eval.")
flags.DEFINE_integer("predict_batch_size", 8, "Batch size for predict.")
flags.DEFINE_float("learning_rate", 5e-5, "The initial learning rate.")
flags.DEFINE_integer("train_step", 1000, "Total number of training steps.")
flags.DEFINE_integer("warmup_step", 0, "Steps of linear learning-rate warmup.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "How often to save (and, with --do_eval, evaluate) "
                     "a checkpoint.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "How many recent checkpoints to keep (model.ckpt-best is "
                     "kept apart).")
flags.DEFINE_integer("iterations_per_loop", 1000, "Training steps per tf.function call.")
flags.DEFINE_enum("optimizer", "adamw", list(OPTIMIZERS), "Optimizer: adamw or lamb.")
flags.DEFINE_string("export_dir", None, "If set, export a SavedModel (serialized tf.Example and raw-text "
                    "signatures) of the best (else latest) checkpoint under this directory.")
flags.DEFINE_float("threshold_to_export", float("nan"), "A decision threshold on the positive class's "
                   "probability, served with the exported model's predictions (binary tasks only).")

REQUIRED = ("data_dir", "task_name", "output_dir", "albert_config_file")


def define_shared_flags() -> None:
    """--distribution_strategy, --mixed_precision, --enable_xla, TPU flags, ... (shared)."""
    from albert_tf.training import define_flags

    define_flags()


def _job_from_flags():
    from albert_tf.config import AlbertConfig
    from albert_tf.glue import features
    from albert_tf.glue.processors import get_task_spec
    from albert_tf.glue.runner import GlueJob
    from albert_tf.tokenization import FullTokenizer
    from albert_tf.vocab_check import check_tokenizer

    missing = [f"--{name}" for name in REQUIRED if not getattr(FLAGS, name)]
    if missing:
        raise ValueError(f"missing required flag(s): {', '.join(missing)}")
    get_task_spec(FLAGS.task_name)  # an unknown task lists the known ones
    if not FLAGS.spm_model_file and not FLAGS.vocab_file:
        raise ValueError("set --spm_model_file (SentencePiece model) or --vocab_file (WordPiece vocab)")
    config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
    check_tokenizer(FLAGS.spm_model_file, FLAGS.vocab_file, config.vocab_size, FLAGS.albert_config_file)
    if FLAGS.max_seq_length > config.max_position_embeddings:
        raise ValueError(
            f"Cannot use sequence length {FLAGS.max_seq_length} because the ALBERT model was only "
            f"trained up to sequence length {config.max_position_embeddings} (--max_seq_length)")
    init_checkpoint = FLAGS.init_checkpoint
    if FLAGS.albert_hub_module_handle:
        if "://" in FLAGS.albert_hub_module_handle:
            raise ValueError("--albert_hub_module_handle must be a local module directory (download and "
                             "unpack the module first)")
        init_checkpoint = init_checkpoint or FLAGS.albert_hub_module_handle
    threshold = FLAGS.threshold_to_export
    return GlueJob(
        task_name=FLAGS.task_name,
        data_dir=FLAGS.data_dir,
        output_dir=FLAGS.output_dir,
        albert_config=config,
        tokenizer=FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.spm_model_file),
        tokenizer_id=features.tokenizer_fingerprint(FLAGS.spm_model_file, FLAGS.vocab_file,
                                                    FLAGS.do_lower_case),
        spm_model_file=FLAGS.spm_model_file,
        do_lower_case=FLAGS.do_lower_case,
        cached_dir=FLAGS.cached_dir,
        init_checkpoint=init_checkpoint,
        max_seq_length=FLAGS.max_seq_length,
        train_batch_size=FLAGS.train_batch_size,
        eval_batch_size=FLAGS.eval_batch_size,
        predict_batch_size=FLAGS.predict_batch_size,
        learning_rate=FLAGS.learning_rate,
        train_step=FLAGS.train_step,
        warmup_step=FLAGS.warmup_step,
        save_checkpoints_steps=FLAGS.save_checkpoints_steps,
        keep_checkpoint_max=FLAGS.keep_checkpoint_max,
        iterations_per_loop=FLAGS.iterations_per_loop,
        optimizer=FLAGS.optimizer,
        seed=FLAGS.seed,
        log_steps=FLAGS.log_steps,
        gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
        enable_xla=FLAGS.enable_xla,
        export_dir=FLAGS.export_dir,
        threshold_to_export=None if math.isnan(threshold) else threshold,
    )


@reports_errors
def main(argv) -> int:
    del argv
    from albert_tf.glue.runner import run_job
    from albert_tf.training import strategy_from_flags

    logging.set_verbosity(logging.INFO)
    job = _job_from_flags()
    strategy = strategy_from_flags(FLAGS)
    produced = run_job(job, strategy, FLAGS.do_train, FLAGS.do_eval, FLAGS.do_predict)
    for name, value in produced.items():
        logging.info("%s: %s", name, value)
    return 0


define_shared_flags()


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
