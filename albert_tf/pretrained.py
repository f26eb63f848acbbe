"""`from_pretrained`: one call that opens a saved ALBERT with the head its weights hold.

What it opens (the converter's reading, `albert_tf.conversion.open_checkpoint`):
- a Hugging Face folder (config.json + model.safetensors), by its `architectures`:
  AlbertModel -> AlbertModel; AlbertForPreTraining / AlbertForMaskedLM -> AlbertPretrainer;
  AlbertForSequenceClassification -> GlueClassifier; AlbertForQuestionAnswering -> SquadV1Model;
  AlbertForMultipleChoice -> RaceModel (any number of choices);
- a Google TF1 checkpoint, one of ours or our hub-style export, with its albert_config.json
  (in the folder, beside the checkpoint prefix, or named by `config_file`).

Every model is called as `model({"input_ids", "input_mask", "segment_ids"})` (int32
[batch, length]; [batch, choices, length] for multiple choice) and returns a dict; the
task heads' keys are transformers' (`logits`, `start_logits` / `end_logits`).
"""
from __future__ import annotations

import os
from typing import Optional

import tensorflow as tf

from albert_tf.weights import hf, names
from albert_tf.weights.errors import CheckpointError

CONFIG_FILE = "albert_config.json"  # the original's name, beside its checkpoints
# transformers classes that save no sentence-order head: our pretrainer's starts untrained.
_NO_SENTENCE_ORDER = ("AlbertForMaskedLM",)


def _config_beside(path: str) -> Optional[str]:
    """albert_config.json in the folder `path`, beside the prefix `path`, or in an export's assets."""
    folder = path if tf.io.gfile.isdir(path) else os.path.dirname(path)
    for candidate in (os.path.join(folder, CONFIG_FILE), os.path.join(folder, "assets", CONFIG_FILE)):
        if tf.io.gfile.exists(candidate):
            return candidate
    return None


def from_pretrained(path: str, *, config_file: Optional[str] = None, kind: str = "auto"):
    """The model saved at `path`, with its weights and head.

    path: a Hugging Face folder, or a TF checkpoint (prefix or folder).
    config_file: albert_config.json (default: the one beside a TF checkpoint; a Hugging
      Face folder brings its config.json).
    kind: a `--converted_model` value, for TF1 checkpoints whose head does not tell its
      task (a RACE checkpoint looks like a one-label GLUE one): "race", "classifier", ...

    The returned model carries `load_report` (what was loaded, skipped, left unloaded) and,
    for a sequence classifier, `id2label` (the label names of its config, or None).
    Raises CheckpointError naming the file and what is missing or mis-shaped.
    """
    from albert_tf.conversion import open_checkpoint  # imports every task's model

    architecture = None
    if hf.is_hf_checkpoint(path):
        architecture = hf.architecture_of(hf.read_config(path))
        if architecture is not None and architecture not in names.ARCHITECTURES:
            raise CheckpointError(f"{os.path.join(path, hf.CONFIG_FILE)}: {architecture} has no albert_tf "
                                  f"counterpart; known: {', '.join(names.ARCHITECTURES)}")
    elif config_file is None:
        config_file = _config_beside(path)
        if config_file is None:
            raise CheckpointError(f"no {CONFIG_FILE} found for {path} (looked in its folder and its assets/); "
                                  f"pass config_file=")
    opened = open_checkpoint(path, kind=kind, config_file=config_file,
                             allow_missing_heads=architecture in _NO_SENTENCE_ORDER)
    model = opened.model
    model.load_report = opened.report
    return model
