"""Writing checkpoints: ours (object-based), Google's TF1 name-based format and
Hugging Face folders.

The TF checkpoints write under a temporary prefix, rename the files into place, and only then
record the checkpoint in the folder's `checkpoint` state file (keeping the
entries already there), so a failed save leaves nothing that looks loadable.
"""
from __future__ import annotations

import glob
import os
from typing import Callable, Optional

import tensorflow as tf

from albert_tf.checkpoints import hf
from albert_tf.checkpoints import names as name_table
from albert_tf.checkpoints.loading import MODEL_ROOT


def _write_then_publish(prefix: str, write: Callable[[str], None]) -> str:
    prefix = os.path.abspath(prefix)
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    tmp = prefix + "-tmp-write"
    try:
        write(tmp)
        for path in sorted(glob.glob(glob.escape(tmp) + ".*"), key=lambda p: p.endswith(".index")):
            os.replace(path, prefix + path[len(tmp):])  # data files first, the index last
    finally:
        for path in glob.glob(glob.escape(tmp) + ".*"):
            os.remove(path)
    from albert_tf.training.checkpointing import update_state_file

    update_state_file(os.path.dirname(prefix), prefix, keep_checkpoint_max=0)
    return prefix


def save_model_checkpoint(model, prefix: str) -> str:
    """Writes the model's weights as one of our checkpoints at `prefix`."""
    return _write_then_publish(prefix, lambda tmp: tf.train.Checkpoint(**{MODEL_ROOT: model}).write(tmp))


def save_tf1_checkpoint(model, prefix: str) -> str:
    """Writes the model's weights under Google's TF1 names (readable by the original
    code's `init_from_checkpoint`, by `tf.train.load_checkpoint` and other tools)."""
    variables = name_table.tf1_name_map(model)
    ordered = sorted(variables)

    def write(tmp: str) -> None:
        tf.raw_ops.SaveV2(prefix=tmp, tensor_names=ordered, shape_and_slices=[""] * len(ordered),
                          tensors=[variables[n].read_value() for n in ordered])

    return _write_then_publish(prefix, write)


def save_hf_checkpoint(model, folder: str, architecture: str, *, spm_model_file: Optional[str] = None,
                       do_lower_case: bool = True) -> str:
    """Writes the model as a Hugging Face folder that transformers' `architecture`
    class (e.g. "AlbertForPreTraining") loads; with `spm_model_file`, its tokenizer too."""
    return hf.write_checkpoint(model, folder, architecture, spm_model_file=spm_model_file,
                               do_lower_case=do_lower_case)
