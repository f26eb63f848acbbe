"""Fine-tunes ALBERT on SQuAD 1.1 or 2.0 and predicts, with the original's flags.

  python run_squad.py --albert_config_file=albert_base/albert_config.json \
      --spm_model_file=albert_base/30k-clean.model --init_checkpoint=albert_base/model.ckpt-best \
      --train_file=train-v1.1.json --predict_file=dev-v1.1.json \
      --do_train --do_predict --output_dir=out/squad1

``--version_2_with_negative`` selects SQuAD 2.0 (the original's run_squad_v2.py:
XLNet-style head with a start/end beam and an answer verifier); without it,
SQuAD 1.1 (run_squad_v1.py: linear start/end head).

Model selection, as the original's: with --do_predict and a predict file that has
answers, every checkpoint in --output_dir is scored (F1; 2.0: original_f1, the
original's "f1": predictions made again at the best null threshold), the best is kept
as model.ckpt-best (best_trial.txt) and the prediction files come from it;
eval_results.txt has one block per checkpoint (sorted keys, "best f1 = ...", 2.0:
"best original_f1 = ...", a rule) and ends with the best's results and "best perf
happened at step: N". Without answers, or without checkpoints in --output_dir, the
latest checkpoint (else --init_checkpoint) answers once.

--export_dir (1.1, as run_squad_v1.py): <export_dir>/saved_model/<time>/ (int32
input_ids, input_mask, segment_ids [1, max_seq_length] -> start_logits, end_logits)
and <export_dir>/albert_model.tflite, from model.ckpt-best (else the latest
checkpoint, else --init_checkpoint).

Differences from the original, on purpose:
- predicting never needs --train_file, and a predict-only run scores the checkpoints
  there are and exits (it does not wait for new ones);
- with training, each checkpoint is scored as it is saved (so --keep_checkpoint_max
  pruning never deletes an unscored one), and a rerun scores only new checkpoints;
- every question of --predict_file gets an answer (no "MISMATCH DETECTED" drops);
- 2.0: the null threshold is --null_score_diff_threshold (default 0), not tuned on
  the predicted data; eval_results.txt reports that threshold's scores, and the
  best thresholds on this data only under a comment saying they are tuned on it;
- features are cached as TFRecords + JSON (no pickle) and rebuilt when the data,
  the SentencePiece model or a feature setting changes; feature-file flags naming
  files this tool did not write (the original's TFRecord and pickle) are refused;
- rare answers (README, "SQuAD"): whitespace-only spans skipped, 1.1 questions
  without a valid n-best span searched over the whole grid;
- training runs on albert_tf's loop: --distribution_strategy, --mixed_precision,
  --enable_xla, exact resume from --output_dir.
"""
from __future__ import annotations

import os

from absl import flags, logging

from albert_tf.cli import entry_point, reports_errors, require_flags
from albert_tf.drivers.finetuning import (albert_config_from_flags, define_model_flags, define_serving_precision_flag,
                                          define_stage_flags, job_from_flags, refuse_flags_of_another_mode,
                                          run_and_report, stage_flag_problems, unused_weights_flag)
from albert_tf.fileio import absolute, is_dir, is_file
from albert_tf.training.flags import define_flags

FLAGS = flags.FLAGS

define_model_flags(384, "Tokens per window, after SentencePiece.")
define_stage_flags(do_train=False, do_eval=None, do_predict=False, learning_rate=5e-5)
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
flags.DEFINE_integer("doc_stride", 128, "Pieces between the starts of consecutive context windows.")
flags.DEFINE_integer("max_query_length", 64, "Question pieces kept (longer questions are cut).")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training questions.")
flags.DEFINE_float("warmup_proportion", 0.1, "Fraction of the steps with linear warmup.")
flags.DEFINE_integer("n_best_size", 20, "Answers kept per question in nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in pieces.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: questions may have no answer.")
flags.DEFINE_integer("start_n_top", 5, "2.0: beam size for answer starts.")
flags.DEFINE_integer("end_n_top", 5, "2.0: beam size for answer ends per start.")
flags.DEFINE_float("dropout_prob", 0.1, "2.0: dropout in the answer verifier.")
flags.DEFINE_bool("mask_padding_positions", False, "1.1, a departure from the original: leave padding positions "
                  "out of the span head's softmax (as 2.0 does), so batches are cut to their longest row. Other "
                  "losses and answers than the original's (README, 'Batches at their length'); default: the "
                  "original's head, scoring every position of the window, on padded batches.")
flags.DEFINE_bool("use_einsum", True, "Accepted for compatibility, no effect: the original chose tf.einsum or "
                  "reshape+matmul for dense layers (TFLite needed the latter); this port's layers convert "
                  "to TFLite either way.")
flags.DEFINE_string("export_dir", None, "1.1: export a SavedModel (saved_model/<time>/) and albert_model.tflite "
                    "of model.ckpt-best (else the latest checkpoint) here.")
define_serving_precision_flag()  # the SavedModel's; the TFLite file stays float32
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "2.0: answer \"\" when the question's null score (min cls_logits over its "
                   "windows, see null_odds.json) exceeds this.")


def _validate(config, unused: str | None) -> list[str]:
    f = FLAGS
    problems = []
    if not f.do_train and not f.do_predict and not f.export_dir:
        problems.append("at least one of --do_train, --do_predict or --export_dir must be set")
    if f.export_dir and f.version_2_with_negative:
        problems.append("--export_dir exports the SQuAD 1.1 span model (run_squad_v1.py's); "
                        "not available with --version_2_with_negative")
    if f.export_dir:
        from albert_tf.squad.export import check_export_dir

        problems.extend(check_export_dir(f.export_dir))
    if f.do_train and not f.train_file:
        problems.append("--do_train needs --train_file")
    if f.do_train and not f.num_train_epochs > 0:  # the step count's max(1, ...) would hide it: 1 step
        problems.append(f"--num_train_epochs must be > 0, got {f.num_train_epochs}")
    if f.do_train and not f.warmup_proportion >= 0:
        problems.append(f"--warmup_proportion must be >= 0, got {f.warmup_proportion}")
    problems.extend(stage_flag_problems(f, unused))
    if f.do_predict and not f.predict_file:
        problems.append("--do_predict needs --predict_file")
    for name in ("train_file", "predict_file"):
        path = getattr(f, name)
        wanted = f.do_train if name == "train_file" else f.do_predict
        if wanted and path and not is_file(path):
            problems.append(f"--{name}={path}: " + ("is a folder; expected a file" if is_dir(path)
                                                      else "file not found"))
    if not f.spm_model_file:
        problems.append("--spm_model_file is required (SQuAD alignment works on SentencePiece pieces)")
    elif not is_file(f.spm_model_file):
        problems.append(f"--spm_model_file={f.spm_model_file}: file not found")
    if f.max_seq_length > config.max_position_embeddings:
        problems.append(f"--max_seq_length={f.max_seq_length} exceeds max_position_embeddings "
                        f"({config.max_position_embeddings}) of --albert_config_file")
    if f.max_seq_length <= f.max_query_length + 3:
        problems.append(f"--max_seq_length ({f.max_seq_length}) must be greater than "
                        f"--max_query_length ({f.max_query_length}) + 3")
    for name in ("doc_stride", "n_best_size", "max_answer_length", "start_n_top", "end_n_top"):
        if getattr(f, name) < 1:
            problems.append(f"--{name} must be >= 1, got {getattr(f, name)}")
    if f.version_2_with_negative and f.mask_padding_positions:
        problems.append("--mask_padding_positions is for SQuAD 1.1: 2.0's head masks padding already")
    if f.version_2_with_negative and max(f.start_n_top, f.end_n_top) > f.max_seq_length:
        problems.append("--start_n_top/--end_n_top cannot exceed --max_seq_length")
    return problems


REQUIRED = ("albert_config_file", "output_dir")
# What only SQuAD 2.0's head reads (1.1's linear span head has no beam, verifier or null score).
V2_ONLY_FLAGS = ("start_n_top", "end_n_top", "dropout_prob", "null_score_diff_threshold")


def task_and_job_from_flags():
    """The SQuAD task and the run's job, from the flags (checked)."""
    from albert_tf.config import AlbertConfig
    from albert_tf.squad.data import load_questions
    from albert_tf.squad.task import SquadSettings, SquadTask, has_gold_answers, num_train_steps
    from albert_tf.training.checkpoint_evaluation import BestCheckpointKeeper

    f = FLAGS
    require_flags(f, *REQUIRED)
    if not f.version_2_with_negative:
        refuse_flags_of_another_mode(f, V2_ONLY_FLAGS, "SQuAD 2.0 (--version_2_with_negative)",
                                     "this run is SQuAD 1.1")
    unused = unused_weights_flag(f)  # once a run (it looks into --output_dir): the checks and the job follow it
    problems = _validate(AlbertConfig.from_json_file(f.albert_config_file), unused)
    if problems:
        raise ValueError("; ".join(problems))
    # Both files read before any work: an empty or malformed predict file is not found after training.
    if f.do_train:
        _warn_if_other_version("train_file", load_questions(f.train_file))
    predict_data = load_questions(f.predict_file) if f.do_predict else None
    if predict_data is not None:
        _warn_if_other_version("predict_file", predict_data)
    config = albert_config_from_flags(f, f.spm_model_file, None, unused)
    settings = SquadSettings(
        spm_model_file=f.spm_model_file, version_2=f.version_2_with_negative,
        do_lower_case=f.do_lower_case, max_seq_length=f.max_seq_length,
        doc_stride=f.doc_stride, max_query_length=f.max_query_length,
        n_best_size=f.n_best_size, max_answer_length=f.max_answer_length,
        start_n_top=f.start_n_top, end_n_top=f.end_n_top, dropout_prob=f.dropout_prob,
        null_score_diff_threshold=f.null_score_diff_threshold, mask_padding_positions=f.mask_padding_positions)
    task = SquadTask(settings, absolute(f.output_dir), f.train_file, f.predict_file,
                     f.train_feature_file, f.predict_feature_file, f.predict_feature_left_file,
                     f.serving_precision)
    # The original's model selection: every checkpoint scored against the answers, when the
    # predict file has them and there is something to score (training, or checkpoints here).
    select = (f.do_predict and has_gold_answers(f.predict_file, predict_data)
              and (f.do_train or _has_checkpoints(f.output_dir)))
    if select:  # a release's model.ckpt-best here: refused before the training features are built into the folder
        BestCheckpointKeeper(task.output_dir, task.key_metric).check_ours()
    steps = 1
    if f.do_train:
        steps = num_train_steps(task.num_train_examples(), f.train_batch_size, f.num_train_epochs)
    job = job_from_flags(f, config, unused, num_train_steps=steps, warmup_steps=int(steps * f.warmup_proportion),
                         do_eval=select, eval_batch_size=f.predict_batch_size, export_dir=f.export_dir)
    return task, job


def _warn_if_other_version(flag: str, dataset: dict) -> None:
    """A file of the other SQuAD version than --version_2_with_negative says: accepted, as the original
    (which read is_impossible whatever the driver), with one warning."""
    from albert_tf.squad.data import version_mismatch

    problem = version_mismatch(dataset, flag, FLAGS[flag].value, FLAGS.version_2_with_negative)
    if problem:
        logging.warning("%s", problem)


def _has_checkpoints(output_dir: str) -> bool:
    from albert_tf.weights import files

    return bool(files.known_checkpoints(output_dir)) or is_file(
        os.path.join(output_dir, files.BEST_BASENAME) + ".index")


@reports_errors
def main(argv) -> int:
    del argv
    run_and_report(task_and_job_from_flags, FLAGS)  # its summary: predictions, metrics, export, the weights used
    return 0


define_flags()  # --distribution_strategy, --mixed_precision, --enable_xla, TPU flags, --seed, loop flags


run = entry_point(main)


if __name__ == "__main__":
    run()
