"""Fine-tunes ALBERT on SQuAD 1.1 or 2.0 and predicts, with the original's flags.

  python run_squad.py --albert_config_file=albert_base/albert_config.json \
      --spm_model_file=albert_base/30k-clean.model --init_checkpoint=albert_base/model.ckpt-best \
      --train_file=train-v1.1.json --predict_file=dev-v1.1.json \
      --do_train --do_predict --output_dir=out/squad1

``--version_2_with_negative`` selects SQuAD 2.0 (the original's run_squad_v2.py:
XLNet-style head with a start/end beam and an answer verifier); without it,
SQuAD 1.1 (run_squad_v1.py: linear start/end head).

Differences from the original, on purpose:
- predicting never needs --train_file, and a predict-only run predicts once with
  the latest checkpoint in --output_dir (else --init_checkpoint) and exits;
- every question of --predict_file gets an answer (no "MISMATCH DETECTED" drops);
- 2.0: the null threshold is --null_score_diff_threshold (default 0), not tuned on
  the predicted data; eval_results.txt reports that threshold's scores, and the
  best thresholds on this data only under a comment saying they are tuned on it;
- features are cached as TFRecords + JSON (no pickle) and rebuilt when the data,
  the SentencePiece model or a feature setting changes;
- training runs on albert_tf's loop: --distribution_strategy, --mixed_precision,
  --enable_xla, exact resume from --output_dir.
"""
from __future__ import annotations

from albert_tf.startup import quiet_startup  # first: hides TensorFlow's start-up lines
quiet_startup()

import os

from absl import app, flags

from albert_tf.cli import reports_errors
from albert_tf.training.optimizers import OPTIMIZERS

FLAGS = flags.FLAGS

flags.DEFINE_string("albert_config_file", None, "albert_config.json of the pre-trained model.")
flags.DEFINE_string("vocab_file", None, "Kept for compatibility; SQuAD uses --spm_model_file.")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model (e.g. 30k-clean.model).")
flags.DEFINE_string("output_dir", None, "Checkpoints, cached features and prediction files go here.")
flags.DEFINE_string("train_file", None, "SQuAD json for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD json to answer, e.g. dev-v1.1.json.")
flags.DEFINE_string("train_feature_file", None,
                    "Cached training features (TFRecord); default <output_dir>/train.tf_record.")
flags.DEFINE_string("predict_feature_file", None,
                    "Cached prediction features (TFRecord); default <output_dir>/predict.tf_record.")
flags.DEFINE_string("predict_feature_left_file", None,
                    "JSON side file of the prediction features (what post-processing needs); "
                    "default <predict_feature_file>.json.")
flags.DEFINE_string("init_checkpoint", None,
                    "Checkpoint to start from (Google TF1 or albert_tf format).")
flags.DEFINE_string("albert_hub_module_handle", None, "Not supported; use --init_checkpoint.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case the input (uncased models).")
flags.DEFINE_integer("max_seq_length", 384, "Tokens per window, after SentencePiece.")
flags.DEFINE_integer("doc_stride", 128, "Pieces between the starts of consecutive context windows.")
flags.DEFINE_integer("max_query_length", 64, "Question pieces kept (longer questions are cut).")
flags.DEFINE_bool("do_train", False, "Fine-tune on --train_file.")
flags.DEFINE_bool("do_predict", False, "Answer the questions of --predict_file.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch size.")
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch size.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate of AdamW.")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training questions.")
flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of the steps with linear warmup.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many steps.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in --output_dir.")
flags.DEFINE_integer("iterations_per_loop", 1000, "Steps per call of the compiled training loop.")
flags.DEFINE_enum("optimizer", "adamw", list(OPTIMIZERS), "Optimizer (the original used AdamW).")
flags.DEFINE_integer("n_best_size", 20, "Answers kept per question in nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in pieces.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
flags.DEFINE_integer("start_n_top", 5, "2.0: beam size for answer starts.")
flags.DEFINE_integer("end_n_top", 5, "2.0: beam size for answer ends per start.")
flags.DEFINE_float("dropout_prob", 0.1, "2.0: dropout in the answer verifier.")
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "2.0: answer \"\" when the question's null score (min cls_logits over its "
                   "windows, see null_odds.json) exceeds this.")


def _validate(config) -> list[str]:
    f = FLAGS
    problems = []
    if not f.do_train and not f.do_predict:
        problems.append("at least one of --do_train or --do_predict must be set")
    if f.do_train and not f.train_file:
        problems.append("--do_train needs --train_file")
    if f.do_predict and not f.predict_file:
        problems.append("--do_predict needs --predict_file")
    for name in ("train_file", "predict_file"):
        path = getattr(f, name)
        wanted = f.do_train if name == "train_file" else f.do_predict
        if wanted and path and not os.path.isfile(path):
            problems.append(f"--{name}={path}: file not found")
    if not f.spm_model_file:
        problems.append("--spm_model_file is required (SQuAD alignment works on SentencePiece pieces)")
    elif not os.path.isfile(f.spm_model_file):
        problems.append(f"--spm_model_file={f.spm_model_file}: file not found")
    if f.albert_hub_module_handle:
        problems.append("--albert_hub_module_handle is not supported: pass the module's "
                        "variables/variables as --init_checkpoint")
    if f.max_seq_length > config.max_position_embeddings:
        problems.append(f"--max_seq_length={f.max_seq_length} exceeds max_position_embeddings "
                        f"({config.max_position_embeddings}) of --albert_config_file")
    if f.max_seq_length <= f.max_query_length + 3:
        problems.append(f"--max_seq_length ({f.max_seq_length}) must be greater than "
                        f"--max_query_length ({f.max_query_length}) + 3")
    for name in ("doc_stride", "train_batch_size", "predict_batch_size", "n_best_size",
                 "max_answer_length", "start_n_top", "end_n_top"):
        if getattr(f, name) < 1:
            problems.append(f"--{name} must be >= 1, got {getattr(f, name)}")
    if f.version_2_with_negative and max(f.start_n_top, f.end_n_top) > f.max_seq_length:
        problems.append("--start_n_top/--end_n_top cannot exceed --max_seq_length")
    return problems


@reports_errors
def main(argv) -> int:
    del argv
    from albert_tf.config import AlbertConfig
    from albert_tf.squad import pipeline
    from albert_tf.training import strategy_from_flags
    from albert_tf.vocab_check import check_tokenizer

    f = FLAGS
    if not f.albert_config_file or not f.output_dir:
        raise ValueError("--albert_config_file and --output_dir are required")
    config = AlbertConfig.from_json_file(f.albert_config_file)
    problems = _validate(config)
    if problems:
        raise ValueError("; ".join(problems))
    check_tokenizer(f.spm_model_file, None, config.vocab_size, f.albert_config_file)
    os.makedirs(f.output_dir, exist_ok=True)
    settings = pipeline.SquadSettings(
        spm_model_file=f.spm_model_file, version_2=f.version_2_with_negative,
        do_lower_case=f.do_lower_case, max_seq_length=f.max_seq_length,
        doc_stride=f.doc_stride, max_query_length=f.max_query_length,
        n_best_size=f.n_best_size, max_answer_length=f.max_answer_length,
        start_n_top=f.start_n_top, end_n_top=f.end_n_top, dropout_prob=f.dropout_prob,
        null_score_diff_threshold=f.null_score_diff_threshold)
    strategy = strategy_from_flags()
    model = None
    if f.do_train:
        trainer = pipeline.train(
            config, settings, strategy, f.train_file,
            f.train_feature_file or os.path.join(f.output_dir, "train.tf_record"),
            f.output_dir, train_batch_size=f.train_batch_size, learning_rate=f.learning_rate,
            num_train_epochs=f.num_train_epochs, warmup_proportion=f.warmup_proportion,
            optimizer=f.optimizer, init_checkpoint=f.init_checkpoint,
            train_config_overrides=dict(
                steps_per_loop=f.iterations_per_loop,
                save_checkpoints_steps=f.save_checkpoints_steps,
                keep_checkpoint_max=f.keep_checkpoint_max, log_steps=f.log_steps,
                gradient_accumulation_steps=f.gradient_accumulation_steps,
                enable_xla=f.enable_xla, seed=f.seed))
        model = trainer.model
    if f.do_predict:
        if model is None:
            source = pipeline.predict_weights_source(f.output_dir, f.init_checkpoint)
            model = pipeline.load_for_prediction(config, settings, strategy, source)
        _, metrics = pipeline.predict(
            model, settings, f.predict_file,
            f.predict_feature_file or os.path.join(f.output_dir, "predict.tf_record"),
            f.output_dir, f.predict_batch_size, f.predict_feature_left_file)
        if metrics is not None:
            print(pipeline.postprocess.format_eval_results(metrics), end="")
    return 0


def _define_shared_flags() -> None:
    from albert_tf.training import define_flags
    define_flags()  # --distribution_strategy, --mixed_precision, --enable_xla, TPU flags, --seed, ...


_define_shared_flags()


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
