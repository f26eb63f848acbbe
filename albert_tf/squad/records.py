"""Cached SQuAD features: a TFRecord file of model inputs plus a JSON side file.

Record format (the original's ``FeatureWriter``): int64 ``unique_ids`` [1],
``input_ids``, ``input_mask``, ``segment_ids``, ``p_mask`` [max_seq_length];
training adds ``start_positions``, ``end_positions``, ``is_impossible`` [1].
``PREDICT_SCHEMA`` / ``TRAIN_SCHEMA`` below are the one place these names are written.

The JSON side file (the original pickled its features into
``predict_feature_left_file``; we never unpickle) holds the cache key, counts,
alignment statistics and, for prediction, what post-processing needs per
feature (example index, window offsets, piece-to-character maps, max-context
flags). The one feature cache (``albert_tf.data.feature_cache``) writes it last,
after the records, both through a temporary name and a rename: a crash leaves
either the old cache or none.

The cache key hashes the data file's bytes, the SentencePiece model's bytes,
``do_lower_case``, ``max_seq_length``, ``doc_stride``, ``max_query_length``,
training vs prediction and the schema's version; any change rebuilds.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

import tensorflow as tf

from albert_tf import tokenization
from albert_tf.data.feature_cache import CachedSplit, cached_records
from albert_tf.data.records import SEQUENCE, RecordSchema, model_input_features
from albert_tf.fileio import absolute, file_sha256, is_file
from albert_tf.squad import data, features

log = logging.getLogger(__name__)
SEQ = SEQUENCE
PREDICT_SCHEMA = RecordSchema("squad_predict", 1, (
    ("unique_ids", "int64", None),
    *model_input_features(),
    ("p_mask", "int64", SEQ),
))
TRAIN_SCHEMA = PREDICT_SCHEMA.extend("squad_train", (
    ("start_positions", "int64", None),
    ("end_positions", "int64", None),
    ("is_impossible", "int64", None),
))


def schema(is_training: bool) -> RecordSchema:
    return TRAIN_SCHEMA if is_training else PREDICT_SCHEMA


def feature_spec(max_seq_length: int, is_training: bool) -> dict[str, tf.io.FixedLenFeature]:
    return schema(is_training).parse_spec(max_seq_length=max_seq_length)


def _serialize(feature: features.SquadFeature, is_training: bool, max_seq_length: int) -> bytes:
    values = {"unique_ids": feature.unique_id, "input_ids": feature.input_ids, "input_mask": feature.input_mask,
              "segment_ids": feature.segment_ids, "p_mask": feature.p_mask}
    if is_training:
        values.update(start_positions=feature.start_position, end_positions=feature.end_position,
                      is_impossible=int(feature.is_impossible))
    return schema(is_training).serialize(values, max_seq_length=max_seq_length)


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
) -> CachedSplit:
    """Features of ``input_file``: read from the cache when its key matches, else
    built (training examples pre-shuffled with the original's seed) and cached. The side
    file holds ``num_examples`` (questions), ``num_features``, ``stats`` and, for
    prediction, each feature's ``FeatureMeta`` (``feature_metas``)."""
    features.check_lengths(max_seq_length, max_query_length, doc_stride)
    side_file = side_file or record_file + ".json"
    for path, flag in ((input_file, "SQuAD file"), (spm_model_file, "spm_model_file")):
        if not path or not is_file(path):
            raise data.SquadFormatError(f"{flag} not found: {path}")
    settings = {
        "data_sha256": file_sha256(input_file),
        "spm_sha256": file_sha256(spm_model_file),
        "do_lower_case": bool(do_lower_case),
        "max_seq_length": int(max_seq_length),
        "doc_stride": int(doc_stride),
        "max_query_length": int(max_query_length),
        "is_training": bool(is_training),
    }
    cached = cached_records(record_file, schema(is_training), settings,
                            lambda write: _build(input_file, spm_model_file, settings, write), side_file,
                            source=f"{input_file} ({'training' if is_training else 'prediction'})")
    if cached.reused:
        log.info("Reusing cached SQuAD features %s (%d features)", record_file, cached.num_records)
    return cached


def feature_metas(cached: CachedSplit) -> list[FeatureMeta]:
    """What post-processing needs of each prediction feature, in record order ([] for training)."""
    return [FeatureMeta(**m) for m in cached.side.get("features", [])]


def _build(input_file: str, spm_model_file: str, settings: dict, write) -> dict:
    """Converts the examples, writing each feature's record; returns the side file's contents."""
    is_training = settings["is_training"]
    examples = data.read_squad_examples(input_file, is_training)
    if is_training:
        examples = features.shuffled_for_training(examples)
    sp_model = tokenization.load_spm_model(spm_model_file)
    stats = features.ConversionStats()
    metas: list[dict[str, Any]] = []
    for feature in features.convert_examples_to_features(
            examples, sp_model, settings["max_seq_length"], settings["doc_stride"],
            settings["max_query_length"], is_training, settings["do_lower_case"], stats):
        write(_serialize(feature, is_training, settings["max_seq_length"]))
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
    return {
        "input_file": absolute(input_file),
        "num_examples": stats.examples,
        "num_features": stats.features,
        "stats": dataclasses.asdict(stats),
        "features": metas,
    }
