"""Cached SQuAD features: a TFRecord file of model inputs plus a JSON side file.

Record format (the original's ``FeatureWriter``): int64 ``unique_ids`` [1],
``input_ids``, ``input_mask``, ``segment_ids``, ``p_mask`` [max_seq_length];
training adds ``start_positions``, ``end_positions``, ``is_impossible`` [1].
``feature_spec`` below is the one place these names are written.

The JSON side file (the original pickled its features into
``predict_feature_left_file``; we never unpickle) holds the cache key, counts,
alignment statistics and, for prediction, what post-processing needs per
feature (example index, window offsets, piece-to-character maps, max-context
flags). It is written last, after the records, both through a temporary name
and ``os.replace``: a crash leaves either the old cache or none.

The cache key hashes the data file's bytes, the SentencePiece model's bytes,
``do_lower_case``, ``max_seq_length``, ``doc_stride``, ``max_query_length``,
training vs prediction and ``FORMAT_VERSION``; any change rebuilds.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
from typing import Any

import tensorflow as tf

from albert_tf import tokenization
from albert_tf.fileio import atomic_output, atomic_write_text
from albert_tf.squad import data, features
from albert_tf.training.loop import TrainConfig

FORMAT_VERSION = 1
log = logging.getLogger(__name__)


def feature_spec(max_seq_length: int, is_training: bool) -> dict[str, tf.io.FixedLenFeature]:
    spec = {
        "unique_ids": tf.io.FixedLenFeature([], tf.int64),
        "input_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([max_seq_length], tf.int64),
        "p_mask": tf.io.FixedLenFeature([max_seq_length], tf.int64),
    }
    if is_training:
        spec["start_positions"] = tf.io.FixedLenFeature([], tf.int64)
        spec["end_positions"] = tf.io.FixedLenFeature([], tf.int64)
        spec["is_impossible"] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def _to_tf_example(feature: features.SquadFeature, is_training: bool) -> bytes:
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    fields = {
        "unique_ids": ints([feature.unique_id]),
        "input_ids": ints(feature.input_ids),
        "input_mask": ints(feature.input_mask),
        "segment_ids": ints(feature.segment_ids),
        "p_mask": ints(feature.p_mask),
    }
    if is_training:
        fields["start_positions"] = ints([feature.start_position])
        fields["end_positions"] = ints([feature.end_position])
        fields["is_impossible"] = ints([int(feature.is_impossible)])
    return tf.train.Example(features=tf.train.Features(feature=fields)).SerializeToString()


@dataclasses.dataclass
class FeatureMeta:
    """What post-processing needs of one prediction feature."""

    unique_id: int
    example_index: int
    doc_span_index: int
    doc_offset: int
    tok_start_to_orig_index: list[int]
    tok_end_to_orig_index: list[int]
    token_is_max_context: list[bool]


@dataclasses.dataclass
class CachedFeatures:
    record_file: str
    side_file: str
    max_seq_length: int
    is_training: bool
    num_examples: int
    num_features: int
    stats: dict[str, int]
    metas: list[FeatureMeta]  # prediction only; [] for training


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _load_side_file(side_file: str, key: str) -> dict | None:
    try:
        with open(side_file, encoding="utf-8") as f:
            side = json.load(f)
    except (OSError, json.JSONDecodeError):
        return None
    return side if isinstance(side, dict) and side.get("key") == key else None


def build_or_load(
    input_file: str,
    record_file: str,
    spm_model_file: str,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
    do_lower_case: bool = True,
    side_file: str | None = None,
) -> CachedFeatures:
    """Features of ``input_file``: read from the cache when its key matches, else
    built (training examples pre-shuffled with the original's seed) and cached."""
    features.check_lengths(max_seq_length, max_query_length, doc_stride)
    side_file = side_file or record_file + ".json"
    for path, flag in ((input_file, "SQuAD file"), (spm_model_file, "spm_model_file")):
        if not path or not os.path.isfile(path):
            raise data.SquadFormatError(f"{flag} not found: {path}")
    settings = {
        "format_version": FORMAT_VERSION,
        "data_sha256": _sha256(input_file),
        "spm_sha256": _sha256(spm_model_file),
        "do_lower_case": bool(do_lower_case),
        "max_seq_length": int(max_seq_length),
        "doc_stride": int(doc_stride),
        "max_query_length": int(max_query_length),
        "is_training": bool(is_training),
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    side = _load_side_file(side_file, key) if os.path.isfile(record_file) else None
    if side is not None:
        log.info("Reusing cached SQuAD features %s (%d features)", record_file, side["num_features"])
    else:
        side = _build(input_file, record_file, side_file, spm_model_file, settings, key)
    metas = [FeatureMeta(**m) for m in side.get("features", [])]
    return CachedFeatures(record_file, side_file, max_seq_length, is_training,
                          side["num_examples"], side["num_features"], side["stats"], metas)


def _build(input_file: str, record_file: str, side_file: str, spm_model_file: str,
           settings: dict, key: str) -> dict:
    is_training = settings["is_training"]
    examples = data.read_squad_examples(input_file, is_training)
    if is_training:
        examples = features.shuffled_for_training(examples)
    sp_model = tokenization.load_spm_model(spm_model_file)
    stats = features.ConversionStats()
    metas: list[dict[str, Any]] = []
    with atomic_output(record_file) as tmp, tf.io.TFRecordWriter(tmp) as writer:
        for feature in features.convert_examples_to_features(
                examples, sp_model, settings["max_seq_length"], settings["doc_stride"],
                settings["max_query_length"], is_training, settings["do_lower_case"], stats):
            writer.write(_to_tf_example(feature, is_training))
            if not is_training:
                metas.append(dataclasses.asdict(FeatureMeta(
                    feature.unique_id, feature.example_index, feature.doc_span_index,
                    feature.doc_offset, feature.tok_start_to_orig_index,
                    feature.tok_end_to_orig_index,
                    [bool(x) for x in feature.token_is_max_context])))
    if stats.fallback_alignments:
        log.warning("%s: %d of %d contexts (%d questions) needed the fallback alignment "
                    "(the original would have dropped those questions)", input_file,
                    stats.fallback_alignments, stats.paragraphs, stats.fallback_examples)
    log.info("%s: %d examples -> %d features (%s)", input_file, stats.examples, stats.features,
             dataclasses.asdict(stats))
    side = {
        "key": key,
        "settings": settings,
        "input_file": os.path.abspath(input_file),
        "num_examples": stats.examples,
        "num_features": stats.features,
        "stats": dataclasses.asdict(stats),
        "features": metas,
    }
    atomic_write_text(side_file, json.dumps(side, separators=(",", ":")))
    return side


def decode_record(record: tf.Tensor, max_seq_length: int, is_training: bool) -> dict[str, tf.Tensor]:
    """One serialized record -> dict of int32 tensors (what the model takes)."""
    parsed = tf.io.parse_single_example(record, feature_spec(max_seq_length, is_training))
    return {k: tf.cast(v, tf.int32) for k, v in parsed.items()}


def make_dataset(cached: CachedFeatures, batch_size: int, seed: int | None = TrainConfig.seed,
                 shuffle_buffer: int = 100,
                 input_context: tf.distribute.InputContext | None = None) -> tf.data.Dataset:
    """Batches of feature dicts.

    Training: repeated, shuffled (buffer 100 on pre-shuffled examples, as the
    original; seeded), full batches. Prediction: file order, every feature once,
    last batch possibly smaller. ``batch_size`` is global; with an
    ``input_context`` it is split per replica and the file sharded per pipeline.
    """
    if input_context is not None:
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    dataset = tf.data.TFRecordDataset(cached.record_file)
    if input_context is not None and input_context.num_input_pipelines > 1:
        dataset = dataset.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if cached.is_training:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    dataset = dataset.map(lambda r: decode_record(r, cached.max_seq_length, cached.is_training),
                          num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(batch_size, drop_remainder=cached.is_training).prefetch(tf.data.AUTOTUNE)
