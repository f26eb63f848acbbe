"""What convert_checkpoint.py does: find the input's format and model, build that
model, load the input into it and write it in the target format.

Going through a model checks every tensor against the config before anything is
written, and is exact: values pass through float32 variables unchanged.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

import tensorflow as tf

from albert_tf.weights import hf
from albert_tf.weights import names as name_table
from albert_tf.weights.errors import CheckpointError
from albert_tf.weights.loading import (LoadReport, checkpoint_format, load_checkpoint, load_hf_checkpoint,
                                           resolve_checkpoint)
from albert_tf.weights.saving import save_hf_checkpoint, save_model_checkpoint, save_tf1_checkpoint

DIRECTIONS = {
    "tf1_to_tf2": ("tf1", "tf2"), "tf2_to_tf1": ("tf2", "tf1"),
    "hf_to_tf1": ("hf", "tf1"), "tf1_to_hf": ("tf1", "hf"),
    "hf_to_tf2": ("hf", "tf2"), "tf2_to_hf": ("tf2", "hf"),
}
# What is converted. `race` is Google's RACE head (top-level output_weights [1,H]),
# held by albert_tf.race.model.RaceModel.
MODEL_KINDS = ("auto", "encoder", "pretrainer", "classifier", "squad", "squad_v2", "race")
HF_ARCHITECTURE = {
    "encoder": "AlbertModel",
    "pretrainer": "AlbertForPreTraining",
    "classifier": "AlbertForSequenceClassification",
    "squad": "AlbertForQuestionAnswering",
    "race": "AlbertForMultipleChoice",
}
_KIND_OF_ARCHITECTURE = {**{arch: kind for kind, arch in HF_ARCHITECTURE.items()},
                         "AlbertForMaskedLM": "pretrainer"}  # its sentence-order head is missing
# The same heads in our object-based checkpoints (attribute paths of the task models).
_TF2_HEAD_PATHS = (("race", "/choice_scorer/output_weights/"), ("squad", "/head/output_weights/"), ("squad_v2", "/head/start_dense/"),
                   ("classifier", "/classifier/output_weights/"), ("pretrainer", "/masked_lm/"))
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
CONFIG_BESIDE_OUTPUT = "albert_config.json"


@dataclasses.dataclass
class Conversion:
    kind: str
    report: LoadReport
    written: str  # the prefix or folder written
    config_written: Optional[str]  # albert_config.json written beside a TF output


@dataclasses.dataclass
class _Source:
    path: str
    format: str
    shapes: dict[str, tuple]  # TF1 names (tf1, hf) or object-graph keys (tf2)
    hf_checkpoint: Optional[hf.HFCheckpoint] = None


def _read_source(path: str) -> _Source:
    if hf.is_hf_checkpoint(path):
        checkpoint = hf.read_checkpoint(path)
        return _Source(path, "hf", {k: v.shape for k, v in checkpoint.tensors.items()}, checkpoint)
    prefix = resolve_checkpoint(path)
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    fmt = checkpoint_format(shapes)
    if fmt == "tf1":
        shapes = {k[len(name_table.HUB_PREFIX):] if k.startswith(name_table.HUB_PREFIX) else k: v
                  for k, v in shapes.items()}
    return _Source(path, fmt, {k: tuple(v) for k, v in shapes.items()})


def _detect_kind(source: _Source) -> str:
    if source.format == "hf" and source.hf_checkpoint.architecture:
        architecture = source.hf_checkpoint.architecture
        if architecture not in _KIND_OF_ARCHITECTURE:
            raise CheckpointError(f"{source.hf_checkpoint.config_path}: {architecture} has no albert_tf "
                                  f"counterpart; pass --converted_model=encoder to convert its encoder")
        return _KIND_OF_ARCHITECTURE[architecture]
    if source.format == "tf2":
        for kind, path in _TF2_HEAD_PATHS:
            if any(path in key for key in source.shapes):
                return kind
        return "encoder"
    for kind, name in name_table.KIND_MARKERS:
        if name in source.shapes:
            return kind
    return "encoder"


def _num_labels(source: _Source, kind: str) -> int:
    if source.format == "tf2":
        shapes = [s for k, s in source.shapes.items() if k.endswith("/classifier/output_weights" + _VALUE_SUFFIX)]
    else:
        shapes = [source.shapes["output_weights"]] if "output_weights" in source.shapes else []
    if not shapes:
        raise CheckpointError(f"--converted_model={kind}, but {source.path} has no classifier head "
                              f"(output_weights)")
    return int(shapes[0][0])


def build_model(kind: str, config, num_labels: Optional[int] = None):
    """A built model of `kind` for `config` (`num_labels` for a classifier)."""
    from albert_tf.modeling.encoder import AlbertModel
    from albert_tf.modeling.models import AlbertPretrainer, build

    if kind == "encoder":
        return build(AlbertModel(config))
    if kind == "pretrainer":
        return build(AlbertPretrainer(config))
    if kind == "classifier":
        from albert_tf.glue.heads import GlueClassifier

        return build(GlueClassifier(AlbertModel(config), num_labels, regression=num_labels == 1))
    if kind == "race":
        from albert_tf.race.model import build_race_model

        return build_race_model(config)
    from albert_tf.squad.heads import build_squad_model

    return build_squad_model(config, version_2=kind == "squad_v2")


def _refuse_unconvertible(kind: str, source_format: str, target_format: str) -> None:
    if kind == "squad_v2" and target_format == "hf":
        raise CheckpointError("the SQuAD 2.0 head (XLNet-style, with answer verifier) has no counterpart in "
                              "transformers; --converted_model=encoder converts the encoder alone")


def _config(config_file: Optional[str], source: _Source):
    from albert_tf.config import AlbertConfig, ConfigError

    if config_file:
        return AlbertConfig.from_json_file(config_file)
    if source.format != "hf":
        raise CheckpointError(f"--albert_config_file is required for a {source.format} checkpoint (only a "
                              f"Hugging Face folder brings its config)")
    try:
        return AlbertConfig.from_hf_dict(source.hf_checkpoint.config)
    except ConfigError as err:
        raise CheckpointError(f"{source.hf_checkpoint.config_path}: {err}") from None


def convert(path: str, output: str, direction: str, *, kind: str = "auto", config_file: Optional[str] = None,
            spm_model_file: Optional[str] = None, do_lower_case: bool = True,
            allow_missing_heads: bool = False, init_from_group0: bool = False) -> Conversion:
    """Converts the checkpoint at `path` to `output` (a prefix, or a folder for
    `*_to_hf`). An HF input without `config_file` brings its config.json, which is
    then written beside a TF output as albert_config.json."""
    if direction not in DIRECTIONS:
        raise CheckpointError(f"unknown direction {direction}; expected one of {', '.join(DIRECTIONS)}")
    if kind not in MODEL_KINDS:
        raise CheckpointError(f"unknown model kind {kind}; expected one of {', '.join(MODEL_KINDS)}")
    source_format, target_format = DIRECTIONS[direction]
    if spm_model_file and target_format != "hf":
        raise CheckpointError("--spm_model_file is written only into a Hugging Face folder (*_to_hf)")
    source = _read_source(path)
    if source.format != source_format:
        raise CheckpointError(f"--direction={direction} expects a {source_format} checkpoint, but {path} is "
                              f"in {source.format} format")
    config = _config(config_file, source)
    kind = _detect_kind(source) if kind == "auto" else kind
    _refuse_unconvertible(kind, source_format, target_format)
    model = build_model(kind, config, _num_labels(source, kind) if kind == "classifier" else None)
    if source.hf_checkpoint is not None:
        report = load_hf_checkpoint(model, source.hf_checkpoint, allow_missing_heads=allow_missing_heads,
                                    init_from_group0=init_from_group0)
    else:
        report = load_checkpoint(model, path, allow_missing_heads=allow_missing_heads,
                                 init_from_group0=init_from_group0)
    if target_format == "hf":
        written = save_hf_checkpoint(model, output, HF_ARCHITECTURE[kind], spm_model_file=spm_model_file,
                                     do_lower_case=do_lower_case)
    else:
        written = (save_tf1_checkpoint if target_format == "tf1" else save_model_checkpoint)(model, output)
    config_written = None
    if target_format != "hf" and not config_file:
        config_written = os.path.join(os.path.dirname(os.path.abspath(output)), CONFIG_BESIDE_OUTPUT)
        config.to_json_file(config_written)
    return Conversion(kind, report, written, config_written)
