"""Writing checkpoints: ours (object-based) and Google's TF1 name-based format."""
from __future__ import annotations

import os

import tensorflow as tf

from albert_tf.checkpoints import names as name_table
from albert_tf.checkpoints.loading import MODEL_ROOT


def _write_state_file(prefix: str) -> None:
    """The `checkpoint` file next to `prefix`, so tf.train.latest_checkpoint finds it."""
    directory, base = os.path.split(os.path.abspath(prefix))
    tmp = os.path.join(directory, "checkpoint.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(f'model_checkpoint_path: "{base}"\nall_model_checkpoint_paths: "{base}"\n')
    os.replace(tmp, os.path.join(directory, "checkpoint"))


def _publish(tmp_prefix: str, prefix: str) -> None:
    """Moves `tmp_prefix.*` files to `prefix.*`; the state file is written last."""
    directory = os.path.dirname(os.path.abspath(tmp_prefix))
    tmp_base = os.path.basename(tmp_prefix)
    for filename in os.listdir(directory):
        if filename.startswith(tmp_base + "."):
            os.replace(os.path.join(directory, filename), prefix + filename[len(tmp_base):])
    _write_state_file(prefix)


def save_model_checkpoint(model, prefix: str) -> str:
    """Writes the model's weights as one of our checkpoints at `prefix`."""
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    tmp = prefix + "-tmp-write"
    tf.train.Checkpoint(**{MODEL_ROOT: model}).write(tmp)
    _publish(tmp, prefix)
    return prefix


def save_tf1_checkpoint(model, prefix: str) -> str:
    """Writes the model's weights under Google's TF1 names (readable by the original
    code's `init_from_checkpoint`, by `tf.train.load_checkpoint` and other tools)."""
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    variables = name_table.tf1_name_map(model)
    ordered = sorted(variables)
    tmp = prefix + "-tmp-write"
    tf.raw_ops.SaveV2(prefix=tmp, tensor_names=ordered, shape_and_slices=[""] * len(ordered),
                      tensors=[variables[n].read_value() for n in ordered])
    _publish(tmp, prefix)
    return prefix
