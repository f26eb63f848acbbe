#!/usr/bin/env bash
# Fine-tunes and evaluates ALBERT on GLUE with the original run_glue.sh's per-task
# settings (warmup steps, learning rate, train steps, checkpoint interval, batch size;
# max_seq_length 512, AdamW), then predicts the test sets and gathers the files the
# GLUE server takes (CoLA.tsv, MNLI-m.tsv, MNLI-mm.tsv, AX.tsv, ...) in
# $OUTPUT_DIR/glue_submission/.
#
# Unlike the original it creates no virtualenv and installs nothing: run it where
# albert_tf is installed (`make setup`, then `. .venv/bin/activate` or set PYTHON).
#
# Environment (paths; defaults follow the original's $ALBERT_ROOT layout):
#   ALBERT_ROOT         directory holding glue/, 30k-clean.model, albert_config.json
#   GLUE_DIR            GLUE data (CoLA/, MNLI/, ..., diagnostic/)  [$ALBERT_ROOT/glue]
#   SPM_MODEL_FILE      SentencePiece model                         [$ALBERT_ROOT/30k-clean.model]
#   VOCAB_FILE          vocab file (only for WordPiece models)      [unset]
#   ALBERT_CONFIG_FILE  albert_config.json                          [$ALBERT_ROOT/albert_config.json]
#   INIT_CHECKPOINT     pretrained checkpoint (Google TF1 or ours)  [$ALBERT_ROOT/model.ckpt-best]
#   OUTPUT_DIR          one sub-directory per task is written here  [./glue_output]
#   TASKS               tasks to run, space-separated               [SST-2 MNLI CoLA QNLI QQP RTE STS-B MRPC]
#   MAX_SEQ_LENGTH      [512]
#   PYTHON              interpreter                                 [python3]
#   EXTRA_ARGS          more flags for every run, e.g.
#                       "--distribution_strategy=mirrored --mixed_precision=bf16"
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ALBERT_ROOT="${ALBERT_ROOT:-.}"
GLUE_DIR="${GLUE_DIR:-${ALBERT_ROOT}/glue}"
SPM_MODEL_FILE="${SPM_MODEL_FILE:-${ALBERT_ROOT}/30k-clean.model}"
VOCAB_FILE="${VOCAB_FILE:-}"
ALBERT_CONFIG_FILE="${ALBERT_CONFIG_FILE:-${ALBERT_ROOT}/albert_config.json}"
INIT_CHECKPOINT="${INIT_CHECKPOINT:-${ALBERT_ROOT}/model.ckpt-best}"
OUTPUT_DIR="${OUTPUT_DIR:-./glue_output}"
TASKS="${TASKS:-SST-2 MNLI CoLA QNLI QQP RTE STS-B MRPC}"
MAX_SEQ_LENGTH="${MAX_SEQ_LENGTH:-512}"
PYTHON="${PYTHON:-python3}"
EXTRA_ARGS="${EXTRA_ARGS:-}"

SUBMISSION_DIR="${OUTPUT_DIR}/glue_submission"
mkdir -p "${SUBMISSION_DIR}"

# The original's settings: task -> "warmup_step learning_rate train_step save_checkpoints_steps train_batch_size".
declare -A SETTINGS=(
  [SST-2]="1256 1e-5 20935 100 32"
  [MNLI]="1000 3e-5 10000 100 128"
  [CoLA]="320 1e-5 5336 100 16"
  [QNLI]="1986 1e-5 33112 200 32"
  [QQP]="1000 5e-5 14000 100 128"
  [RTE]="200 3e-5 800 100 32"
  [STS-B]="214 2e-5 3598 100 16"
  [MRPC]="200 2e-5 800 100 32"
)
# Name the GLUE server expects for each task's predictions.
declare -A SUBMISSION=(
  [SST-2]=SST-2 [MNLI]=MNLI-m [MISMNLI]=MNLI-mm [AX]=AX [CoLA]=CoLA [QNLI]=QNLI [QQP]=QQP
  [RTE]=RTE [STS-B]=STS-B [MRPC]=MRPC
)

common_args() {
  # $1 task name, $2 output directory
  local args=(
    "--task_name=$1" "--output_dir=$2" "--data_dir=${GLUE_DIR}"
    "--spm_model_file=${SPM_MODEL_FILE}" "--albert_config_file=${ALBERT_CONFIG_FILE}"
    "--do_lower_case" "--max_seq_length=${MAX_SEQ_LENGTH}" "--optimizer=adamw"
  )
  if [[ -n "${VOCAB_FILE}" ]]; then args+=("--vocab_file=${VOCAB_FILE}"); fi
  printf '%s\n' "${args[@]}"
}

run_classifier() {
  # shellcheck disable=SC2086  # EXTRA_ARGS is a list of flags
  "${PYTHON}" "${SCRIPT_DIR}/run_classifier.py" "$@" ${EXTRA_ARGS}
}

collect() {
  # $1 key in SUBMISSION, $2 output directory of the run
  cp "$2/submit_results.tsv" "${SUBMISSION_DIR}/${SUBMISSION[$1]}.tsv"
}

run_task() {
  local task="$1"
  read -r warmup lr steps save_steps batch <<<"${SETTINGS[$task]}"
  local out="${OUTPUT_DIR}/${task}"
  mapfile -t args < <(common_args "${task}" "${out}")
  run_classifier "${args[@]}" \
    --do_train --do_eval --do_predict \
    "--init_checkpoint=${INIT_CHECKPOINT}" \
    "--warmup_step=${warmup}" "--learning_rate=${lr}" "--train_step=${steps}" \
    "--save_checkpoints_steps=${save_steps}" "--train_batch_size=${batch}"
  collect "${task}" "${out}"

  if [[ "${task}" == "MNLI" ]]; then
    # The best MNLI model also evaluates dev_mismatched and predicts the mismatched
    # test set and the diagnostic set (AX has no dev set).
    for extra in MISMNLI AX; do
      local extra_out="${OUTPUT_DIR}/${extra}"
      local modes=(--do_predict)
      if [[ "${extra}" == "MISMNLI" ]]; then modes+=(--do_eval); fi
      mapfile -t args < <(common_args "${extra}" "${extra_out}")
      run_classifier "${args[@]}" "${modes[@]}" "--init_checkpoint=${out}/model.ckpt-best"
      collect "${extra}" "${extra_out}"
    done
  fi
}

# Check every name first: a typo should not surface hours into the run.
for task in ${TASKS}; do
  if [[ -z "${SETTINGS[$task]+set}" ]]; then
    echo "run_glue.sh: no settings for task '${task}'; known: ${!SETTINGS[*]}" >&2
    exit 2
  fi
done
for task in ${TASKS}; do
  run_task "${task}"
done
echo "GLUE submission files: ${SUBMISSION_DIR}"
