"""Writing checkpoints: ours (object-based), Google's TF1 name-based format and
Hugging Face folders.

The TF checkpoints write under a temporary prefix, rename the files into place, and only then
record the checkpoint in the folder's `checkpoint` state file (keeping the entries and the latest
checkpoint already there; a file of that name TensorFlow cannot read is left alone), so a failed
save leaves nothing that looks loadable.
"""
from __future__ import annotations

import os
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

from albert_tf.fileio import is_remote
from albert_tf.weights import files, hf, kinds
from albert_tf.weights import names as name_table
from albert_tf.weights.loading import MODEL_ROOT


def _write_then_publish(prefix: str, write: Callable[[str], object]) -> str:
    prefix = prefix if is_remote(prefix) else os.path.abspath(prefix)
    files.write_prefix_atomically(write, prefix)
    return publish_checkpoint(prefix)


def publish_checkpoint(prefix: str) -> str:
    """Records the checkpoint at ``prefix`` (its files in place) in its folder's state file, keeping every
    entry there and the latest one; also what completes a save interrupted before this step."""
    prefix = prefix if is_remote(prefix) else os.path.abspath(prefix)
    folder = os.path.dirname(prefix)
    latest = prefix
    if tf.io.gfile.exists(os.path.join(folder, files.STATE_FILENAME)):
        state = files.read_state(folder)
        if state is None:  # not a state file TensorFlow reads: someone else's file, left as it is
            logging.warning("%s is not a checkpoint state file TensorFlow can read: left as it was, without %s",
                            os.path.join(folder, files.STATE_FILENAME), prefix)
            return prefix
        # A run's folder (a TF1 one's too) goes on resuming from its own latest checkpoint.
        latest = state.model_checkpoint_path or prefix
    # Every entry the state file had stays, even one whose files cannot be seen from here (a disk not
    # mounted): this job did not write them.
    listed = [p for p in files.all_checkpoints(folder) if p != prefix]
    on_disk = [p for p in files.checkpoints_on_disk(folder) if p != prefix and p not in listed]
    files.write_state_file(folder, latest, listed + on_disk + [prefix])
    return prefix


def model_checkpoint_writer(model) -> Callable[[str], object]:
    """``write(prefix)``: the model's weights as one of our checkpoints at ``prefix`` (no state file)."""
    return lambda prefix: tf.train.Checkpoint(**{MODEL_ROOT: model}).write(prefix)


def tf1_checkpoint_writer(model) -> Callable[[str], object]:
    """``write(prefix)``: the model's weights under Google's TF1 names at ``prefix`` (no state file)."""
    variables = kinds.tf1_name_map(model)
    ordered = sorted(variables)

    def write(prefix: str) -> None:
        tf.raw_ops.SaveV2(prefix=prefix, tensor_names=ordered, shape_and_slices=[""] * len(ordered),
                          tensors=[variables[n].read_value() for n in ordered])

    return write


def save_model_checkpoint(model, prefix: str) -> str:
    """Writes the model's weights as one of our checkpoints at `prefix`."""
    return _write_then_publish(prefix, model_checkpoint_writer(model))


def save_tf1_checkpoint(model, prefix: str) -> str:
    """Writes the model's weights under Google's TF1 names (readable by the original
    code's `init_from_checkpoint`, by `tf.train.load_checkpoint` and other tools)."""
    return _write_then_publish(prefix, tf1_checkpoint_writer(model))


def save_hf_checkpoint(model, folder: str, architecture: str, *, spm_model_file: Optional[str] = None,
                       do_lower_case: bool = True) -> str:
    """Writes the model as a Hugging Face folder that transformers' `architecture`
    class (e.g. "AlbertForPreTraining") loads; with `spm_model_file`, its tokenizer too."""
    return hf.write_checkpoint(model, folder, architecture, spm_model_file=spm_model_file,
                               do_lower_case=do_lower_case)
