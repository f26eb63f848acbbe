"""The pretraining task: MLM + sentence-order losses and metrics as the original
`run_pretraining.py` computes them, its input pipeline for the shared loop, and how
its checkpoints are evaluated (after each save, the best by MLM accuracy kept)."""
from __future__ import annotations

import glob
import os
import re
import zlib
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.data import tfrecord
from albert_tf.fileio import TMP_MARK, is_remote
from albert_tf.pretraining_data import features as pretraining_features
from albert_tf.pretraining_data.config import LOCK_SUFFIX, PART_SUFFIX, SUMMARY_SUFFIX
from albert_tf.modeling.models import AlbertPretrainer
from albert_tf.training.checkpoint_evaluation import CheckpointEvaluator
from albert_tf.data.input_pipeline import expand_file_patterns, make_tfrecord_dataset
from albert_tf.training.loop import Task, Trainer
from albert_tf.training.results import ResultsLayout, as_float32, format_inline

MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions")
EVAL_METRICS = ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy", "sentence_order_loss")
KEY_METRIC = "masked_lm_accuracy"  # what model.ckpt-best is chosen by
# The original's eval_results.txt: sorted `key = value` lines, one block per checkpoint.
RESULTS_LAYOUT = ResultsLayout(sort_keys=True)


def loss_denominators(features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """The counts the two losses are normalized by, summed over a batch: sum of the MLM
    weights and the number of examples (the loop sums them over the global batch)."""
    return {"masked_lm": tf.reduce_sum(tf.cast(features["masked_lm_weights"], tf.float32)),
            "sentence_order": tf.cast(tf.shape(features["next_sentence_labels"])[0], tf.float32)}


def pretraining_loss(outputs: Mapping[str, tf.Tensor], features: Mapping[str, tf.Tensor],
                     denominators: Mapping[str, tf.Tensor] | None = None):
    """(loss, metrics) for one batch.

    MLM loss = sum(w * nll) / (sum(w) + 1e-5) over the masked positions, SOP loss =
    mean cross-entropy; total = MLM + SOP: the original's arithmetic on one device.
    With ``denominators`` (``loss_denominators`` summed over the whole global batch)
    the sums run over this batch and the divisions by the global counts, so the
    training loop's sum of these shares is the one-device loss of the global batch on
    any topology.  (The original on TPU normalized per core and clipped per core
    before summing; this project keeps one-device semantics everywhere.)
    Metrics are (numerator, denominator) pairs so eval sums are exact.
    """
    mlm_logits = tf.cast(outputs["mlm_logits"], tf.float32)
    labels = tf.cast(features["masked_lm_ids"], tf.int32)
    weights = tf.cast(features["masked_lm_weights"], tf.float32)
    # -log_softmax(logits)[label]: bit for bit the original's -sum(log_probs * one_hot), from
    # TensorFlow's fused op, whose backward keeps one [batch, predictions, vocab] tensor
    # (softmax - one_hot) instead of the log-probabilities and the one-hot labels.
    mlm_nll = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, mlm_logits)
    weight_sum = tf.reduce_sum(weights)
    local = loss_denominators(features)
    totals = local if denominators is None else denominators
    mlm_loss = tf.reduce_sum(weights * mlm_nll) / (totals["masked_lm"] + 1e-5)
    # The original takes the argmax of the log-probabilities: the logits' argmax (log_softmax
    # subtracts one number per row), without a second [batch, predictions, vocab] tensor.
    mlm_correct = tf.cast(tf.equal(tf.argmax(mlm_logits, -1, output_type=tf.int32), labels), tf.float32)

    sop_log_probs = tf.nn.log_softmax(tf.cast(outputs["sop_logits"], tf.float32), axis=-1)
    sop_labels = tf.reshape(tf.cast(features["next_sentence_labels"], tf.int32), [-1])
    sop_nll = -tf.reduce_sum(sop_log_probs * tf.one_hot(sop_labels, 2), axis=-1)
    sop_loss = tf.reduce_sum(sop_nll) / totals["sentence_order"]
    sop_correct = tf.cast(tf.equal(tf.argmax(sop_log_probs, -1, output_type=tf.int32), sop_labels), tf.float32)
    count = local["sentence_order"]

    metrics = {
        "masked_lm_accuracy": (tf.reduce_sum(weights * mlm_correct), weight_sum),
        "masked_lm_loss": (tf.reduce_sum(weights * mlm_nll), weight_sum),
        "sentence_order_accuracy": (tf.reduce_sum(sop_correct), count),
        "sentence_order_loss": (tf.reduce_sum(sop_nll), count),
    }
    return mlm_loss + sop_loss, metrics


def pretraining_task(
    config: AlbertConfig,
    input_file: str | None,
    max_seq_length: int,
    max_predictions_per_seq: int,
    train_batch_size: int,
    eval_batch_size: int,
    seed: int,
    init_checkpoint: str | None = None,
    init_from_group0: bool = False,
    use_one_hot_embeddings: bool = False,
    masked_lm_budget: float = 0.0,
    mask_id: int | None = None,
) -> Task:
    """The Task the shared Trainer runs for `run_pretraining.py`.

    ``masked_lm_budget > 0`` masks every example anew in the input pipeline with that
    share of tokens (``albert_tf.pretraining_data.online_masking``), putting ``mask_id``
    (the tokenizer's [MASK] id; None: read from the records' own masks) at masked positions;
    0 uses the records' masks.
    """
    if max_seq_length > config.max_position_embeddings:
        raise ValueError(f"--max_seq_length={max_seq_length} exceeds max_position_embeddings "
                         f"({config.max_position_embeddings}) of the ALBERT config")

    remask = None
    if masked_lm_budget > 0:
        from albert_tf.pretraining_data.online_masking import tf_online_masking

        first = first_records(input_file, max_seq_length, max_predictions_per_seq)
        if mask_id is None:
            mask_id = find_mask_id(input_file, first)
        remask = tf_online_masking(seed, masked_lm_budget, max_predictions_per_seq, mask_id, config.vocab_size)

    def parse(serialized: tf.Tensor, stream_index: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        # token_boundary only for online masking, as the original read it: BERT-format records lack it.
        features = check_token_ids(
            pretraining_features.parse_example(serialized, max_seq_length, max_predictions_per_seq,
                                               with_token_boundary=remask is not None),
            config.vocab_size)
        return features if remask is None else remask(features, stream_index)

    def dataset_fn(global_batch: int, is_training: bool):
        def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
            return make_tfrecord_dataset(
                pretraining_files(input_file), parse, context.get_per_replica_batch_size(global_batch), is_training,
                # Evaluation keeps the last partial batch (the original's TPU eval dropped it): every
                # record counts, and as much on one device as on N replicas or workers.
                input_context=context, seed=seed, drop_remainder=is_training,
                with_stream_index=remask is not None)
        return make

    def loss_fn(model, features, training, denominators=None):
        outputs = model({name: features[name] for name in MODEL_INPUTS}, training=training)
        return pretraining_loss(outputs, features, denominators)

    def init_fn(model) -> None:
        from absl import logging

        from albert_tf.weights import load_checkpoint

        # A TF-Hub module has no sentence-order head: start that head fresh, as the original did.
        report = load_checkpoint(model, init_checkpoint, allow_missing_heads=True,
                                 init_from_group0=init_from_group0)
        logging.info("init_checkpoint: %s", report.summary())

    return Task(
        build_model=lambda: AlbertPretrainer(config, use_one_hot_embeddings=use_one_hot_embeddings),
        loss_fn=loss_fn,
        train_dataset_fn=dataset_fn(train_batch_size, True) if input_file else None,
        eval_dataset_fn=dataset_fn(eval_batch_size, False) if input_file else None,
        init_fn=init_fn if init_checkpoint else None,
        init_flag="--init_checkpoint" if init_checkpoint else None,
        loss_denominators_fn=loss_denominators,
        train_data=f"--input_file={input_file}",
        train_data_fingerprint=files_fingerprint(input_file) if input_file else 0,
        describe_data_error=lambda error: locate_unreadable_file(
            pretraining_files(input_file), error, max_seq_length, max_predictions_per_seq),
    )


# What create_pretraining_data.py writes beside its TFRecords: a glob such as train.tfrecord* (for the shards
# train.tfrecord-0000i-of-0000N) matches them too, and the original's tool wrote none of them.
_BESIDE_OUTPUTS = re.compile(f"(?:{re.escape(SUMMARY_SUFFIX)}|{re.escape(LOCK_SUFFIX)}"
                             f"|{re.escape(TMP_MARK)}[0-9a-f]{{32}}{re.escape(PART_SUFFIX)})$")


def pretraining_files(input_file: str | Sequence[str]) -> list[str]:
    """The TFRecord files of ``--input_file`` (comma-separated files or globs), in a stable order. What a glob
    matches of create_pretraining_data.py's own side files (``<output>.summary.json``, ``.lock``, a ``.part``
    being written) is left out; a file named as such is kept (and refused as no TFRecord when read)."""
    patterns = input_file.split(",") if isinstance(input_file, str) else list(input_file)
    files: list[str] = []
    for pattern in (p.strip() for p in patterns):
        if not pattern:
            continue
        matched = expand_file_patterns(pattern)
        if glob.has_magic(pattern):
            matched = [f for f in matched if not _BESIDE_OUTPUTS.search(f)]
            if not matched:
                raise ValueError(f"--input_file pattern {pattern!r} matches only what create_pretraining_data.py "
                                 f"writes beside its records (summary, lock), no TFRecord file")
        files.extend(f for f in matched if f not in files)
    if not files:
        raise ValueError("no input file pattern given")
    return files


def files_fingerprint(file_patterns: str | list[str]) -> int:
    """A number that changes when the files the patterns match do (their names, made absolute): a
    resumed run given other --input_file files fast-forwards its input instead of restoring a
    position in the old ones."""
    names = [f if is_remote(f) else os.path.abspath(f) for f in pretraining_files(file_patterns)]
    return zlib.crc32("\n".join(names).encode("utf-8")) or 1


VOCAB_MISMATCH = "token id out of range"


def first_records(input_file: str, max_seq_length: int, max_predictions_per_seq: int,
                  count: int = 256) -> list[dict[str, np.ndarray]]:
    """The first ``count`` records, parsed with ``token_boundary`` (what online masking checks before any
    work); a damaged file, one of other lengths, or one without ``token_boundary`` is one line. A file cut
    short is named with the record and byte it ends in, records of other lengths with the file and both lengths,
    as `check_first_records` does."""
    from albert_tf.training import faults

    records: list[dict[str, np.ndarray]] = []
    # File by file (the order TFRecordDataset reads them in): a read error then names its file.
    for path in pretraining_files(input_file):
        wanted = count - len(records)
        if wanted <= 0:
            break
        dataset = tf.data.TFRecordDataset(path).take(wanted).map(
            lambda r: pretraining_features.parse_example(r, max_seq_length, max_predictions_per_seq))
        try:
            read = [tf.nest.map_structure(lambda t: t.numpy(), f) for f in dataset]
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            # Only a missing feature: records of other lengths also name token_boundary ("Key: token_boundary.
            # Can't parse serialized Example"), the first feature of the wrong size.
            if re.search(r"Feature: token_boundary \(.*\) is required but could not be found", str(e)):
                raise ValueError(
                    f"--masked_lm_budget: online masking needs each record's token_boundary, which "
                    f"--input_file={input_file} lacks (records from BERT's create_pretraining_data.py?): make the "
                    f"records with this project's or ALBERT's tool, or train on their own masks with "
                    f"--masked_lm_budget=0") from None
            if not faults.is_data_error(e):
                raise
            if faults.is_framing_error(e):  # where: TensorFlow's "truncated record at 2713" names no file
                found = damaged_file(path)  # (stops at the first bad record: within the few read)
                raise ValueError(f"--input_file: {path}: {found or faults.op_error_reason(e)}") from None
            if isinstance(e, tf.errors.InvalidArgumentError):
                # Records of other lengths: the file and both lengths, as `check_first_records` says (TensorFlow
                # names only the first feature it could not parse). The few records are read again, whole.
                for record in tf.data.TFRecordDataset(path).take(wanted):
                    found = record_problem(record.numpy(), max_seq_length, max_predictions_per_seq)
                    if found:
                        raise ValueError(f"--input_file: {path}: {found}") from None
            raise ValueError(f"reading --input_file={input_file} failed: {faults.op_error_reason(e)}: a file is "
                             f"damaged, or was written for other settings (--max_seq_length, "
                             f"--max_predictions_per_seq)") from None
        records.extend(read)
        # Read to its end: TensorFlow takes a file cut inside a record header for a shorter whole file.
        found = cut_short_problem(path) if len(read) < wanted else None
        if found:
            raise ValueError(f"--input_file: {path}: {found}")
    return records


def find_mask_id(input_file: str, records: list[dict[str, np.ndarray]]) -> int:
    """The [MASK] id of pretraining data, read from the masks of its first ``records``."""
    from absl import logging

    from albert_tf.pretraining_data.online_masking import most_common_replacement

    mask_id = most_common_replacement(records)
    if mask_id is None:
        raise ValueError(
            f"--masked_lm_budget: cannot tell the [MASK] id, as the first {len(records)} records of "
            f"--input_file={input_file} hold no masked positions (made with --masked_lm_prob=0?): give "
            f"--spm_model_file (or --vocab_file), the tokenizer the records were made with")
    logging.info("online masking: [MASK] id %d (the most frequent replacement in the data's first %d records)",
                 mask_id, len(records))
    return mask_id


def check_token_ids(features: dict[str, tf.Tensor], vocab_size: int) -> dict[str, tf.Tensor]:
    """Stops the input pipeline with a clear line when the data holds an id >= vocab_size
    (an embedding lookup would fail with an opaque error, or silently on some devices)."""
    largest = tf.reduce_max(tf.concat([tf.reshape(tf.cast(features[name], tf.int64), [-1])
                                       for name in ("input_ids", "masked_lm_ids")], 0))
    check = tf.debugging.assert_less(
        largest, tf.constant(vocab_size, tf.int64),
        message=(f"{VOCAB_MISMATCH}: the pretraining data holds a token id >= vocab_size {vocab_size} of "
                 f"albert_config.json; the data was probably made with a SentencePiece model (or vocab) "
                 f"of another size than the config. Largest id in the record:"),
        summarize=1)
    with tf.control_dependencies([check]):
        features["input_ids"] = tf.identity(features["input_ids"])
    return features


def eval_summary(results: Mapping[str, Any]) -> dict[str, Any]:
    """The original's eval_results.txt keys (plus loss and global_step).

    ``loss`` is ``masked_lm_loss + sentence_order_loss``: each a mean over every masked position or
    example evaluated. The batch losses' mean (the original Estimator's ``loss``) would depend on how
    the set is cut into batches, and so on the number of replicas."""
    results = dict(results)
    if "masked_lm_loss" in results and "sentence_order_loss" in results:
        results["loss"] = results["masked_lm_loss"] + results["sentence_order_loss"]
    keys = ("global_step", "loss", *EVAL_METRICS)
    return {key: results[key] for key in keys if key in results}


def checkpoint_evaluator(trainer: Trainer, max_eval_steps: int | None) -> CheckpointEvaluator:
    """Evaluates checkpoints on ``max_eval_steps`` eval batches (every worker takes part, the
    chief writes eval_results.txt, best_trial.txt and model.ckpt-best)."""

    def evaluate(checkpoint_path: str) -> dict[str, Any]:
        # float32, as the original's Estimator metrics: eval_results.txt prints them as it did
        results = as_float32(eval_summary(trainer.evaluate(max_eval_steps, checkpoint_path=checkpoint_path)))
        print(f"eval {os.path.basename(checkpoint_path)}: {format_inline(results)}")
        return results

    return CheckpointEvaluator(trainer.config.output_dir, evaluate, KEY_METRIC, RESULTS_LAYOUT,
                               writes=trainer.worker.is_chief)


# Which flag sets the length of each feature (for errors naming the flag to change).
_LENGTH_FLAGS = {pretraining_features.SEQ: "--max_seq_length", pretraining_features.PRED: "--max_predictions_per_seq"}


def record_problem(record: bytes, max_seq_length: int, max_predictions_per_seq: int) -> str | None:
    """What keeps one serialized pretraining record from parsing with the run's lengths, in words (None: it
    parses). ``token_boundary`` is not required: only online masking reads it, and checks it itself."""
    from google.protobuf.message import DecodeError

    try:
        feature = tf.train.Example.FromString(record).features.feature
    except DecodeError:
        return "it is not a tf.train.Example (not pretraining data)"
    lengths = pretraining_features.feature_lengths(max_seq_length, max_predictions_per_seq)
    missing = [name for name in lengths if name != "token_boundary" and name not in feature]
    if missing:
        return f"its records lack {', '.join(missing)} (not pretraining data from create_pretraining_data.py)"
    made: dict[str, int] = {}  # flag -> the length the records have
    for name, _, size in pretraining_features.SCHEMA.features:
        if name == "token_boundary" and name not in feature:
            continue
        kind = feature[name].WhichOneof("kind")
        count = len(getattr(feature[name], kind).value) if kind else 0
        if count != lengths[name]:
            flag = _LENGTH_FLAGS.get(size)
            if flag is None:  # a fixed length (next_sentence_labels)
                return f"its records hold {count} values of {name}, expected {lengths[name]}"
            made.setdefault(flag, count)
    if not made:
        return None
    runs = {"--max_seq_length": max_seq_length, "--max_predictions_per_seq": max_predictions_per_seq}
    return (f"its records were made with {', '.join(f'{flag}={n}' for flag, n in made.items())} but this run has "
            f"{', '.join(f'{flag}={runs[flag]}' for flag in made)}: pass the data's values, or make the data again")


def check_first_records(files: list[str], max_seq_length: int, max_predictions_per_seq: int) -> None:
    """Raises ``ValueError`` naming the first of ``files`` whose first record cannot be read, or does not parse
    with the run's lengths: before any work, one line, instead of a TensorFlow error after the model is built
    (which named neither the file nor the lengths; files made by the original have no summary to check).
    One record a file, read 16 files at a time (remote shards)."""
    from concurrent.futures import ThreadPoolExecutor

    from albert_tf.training import faults

    def problem(path: str) -> str | None:
        try:
            first = [r.numpy() for r in tf.data.TFRecordDataset(path).take(1)]
        except tf.errors.OpError as e:  # damaged, not a TFRecord, a folder, no permission
            # Only the first record was read, so the fault is in it: its data's CRC ("corrupted record at 0") or
            # the file cut inside it is named; the rest of the file is not read (it may be large, or remote).
            # A first header that does not match its CRC is no TFRecord at all (another format).
            found = damaged_file(path, records=1) if faults.is_framing_error(e) else None
            if found and not found.startswith("damaged: the header of"):
                return found
            return f"not a readable TFRecord file ({faults.op_error_reason(e)})"
        # A file cut short: TensorFlow read one cut inside a record header as a shorter whole file, silently, and
        # one cut inside the data failed at that record with its own words. Only the tail is read (unless cut).
        found = cut_short_problem(path)
        if found:
            return found
        # An empty file has no record to check (every file empty is refused where the data is read).
        return record_problem(first[0], max_seq_length, max_predictions_per_seq) if first else None

    with ThreadPoolExecutor(max_workers=16) as pool:
        for path, found in zip(files, pool.map(problem, files)):
            if found:
                raise ValueError(f"--input_file: {path}: {found}")


# What to do about a truncated or damaged pretraining file.
REMAKE = "copy it again, or make it again with create_pretraining_data.py"


def damaged_file(path: str, check_data: bool = True, records: int | None = None) -> str | None:
    """Where a TFRecord file's framing is wrong and what to do, in words (`tfrecord.framing_problem`: streams the
    file once, or its first ``records`` records); None when every record (of those) is whole."""
    where = tfrecord.framing_problem(path, check_data, records)
    if where is None:
        return None
    return f"{'truncated' if where.startswith('it ends') else 'damaged'}: {where}; {REMAKE}"


def cut_short_problem(path: str) -> str | None:
    """``truncated: ...`` when a TFRecord file ends inside a record (`tfrecord.cut_short`: reads the file's tail
    only, and the whole file only when it is cut, to say where), else None."""
    if not tfrecord.cut_short(path):
        return None
    return damaged_file(path, check_data=False) or f"truncated: it ends inside a record; {REMAKE}"


# How long a failed run may spend reading its data again to name the damaged file (a pretraining corpus
# can be terabytes: the run has stopped, and the user waits for this line).
LOCATE_SECONDS = 60.0


def locate_unreadable_file(files: list[str], error: BaseException, max_seq_length: int,
                           max_predictions_per_seq: int, seconds: float = LOCATE_SECONDS) -> str:
    """``<file>: <what is wrong>`` for a read error of the input pipeline, whose own words name no file
    (``truncated record at 29561``, ``Key: segment_ids. Can't parse``): reads the files again, those
    long enough to hold the offset the error gives first, until one fails. Runs only after such an error,
    for at most ``seconds``; without a culprit by then, the error's own words."""
    import time

    from absl import logging

    from albert_tf.training import faults

    reason = faults.op_error_reason(error)
    offset = re.search(r"record at (\d+)", reason)
    sizes = {path: tf.io.gfile.stat(path).length for path in files}
    if offset:  # a damaged record there: only files longer than that can hold it
        files = [path for path in files if sizes[path] > int(offset.group(1))]
    deadline = time.monotonic() + seconds
    for path in files:
        if time.monotonic() > deadline:
            logging.warning("Stopped looking for the damaged input file after %.0f s", seconds)
            break
        try:
            for batch in tf.data.TFRecordDataset(path, buffer_size=8 << 20).batch(1024):
                if time.monotonic() > deadline:
                    break
                records = batch.numpy()
                pretraining_features.parse_example(tf.constant(records), max_seq_length, max_predictions_per_seq,
                                                   with_token_boundary=False)
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
            if not faults.is_data_error(e):
                raise
            found = faults.op_error_reason(e)
            if faults.is_framing_error(e):  # where in the file, in words, and what to do
                return f"{path}: {damaged_file(path) or found}"
            # A record of other lengths: which lengths (TensorFlow names only the first feature it missed).
            for record in (records if isinstance(e, tf.errors.InvalidArgumentError) else ()):
                found = record_problem(record, max_seq_length, max_predictions_per_seq) or found
                if found != faults.op_error_reason(e):
                    break
            return f"{path}: {found}"
    return f"{reason}: a file is truncated or damaged; {REMAKE}" if faults.is_framing_error(error) else reason
