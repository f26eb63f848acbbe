"""run_squad_v1.py's ``--export_dir``: a SavedModel of the SQuAD 1.1 span model and a
TFLite file converted from it.

As the original's, with the SavedModel open to any batch size and length:
- ``<export_dir>/saved_model/<unix time>/``: signature ``serving_default`` with int32
  inputs ``input_ids``, ``input_mask``, ``segment_ids`` of shape [batch, length], any
  length up to max_seq_length (the original's serving placeholders were [1,
  max_seq_length]; a longer input is an error) and float32 outputs ``start_logits``,
  ``end_logits`` [batch, length].  Trimming a request's padding changes no logit of a
  real position;
- ``<export_dir>/albert_model.tflite``: the same function at the original's fixed shape
  [1, max_seq_length] (TFLite keeps static shapes), converted with the TFLite converter
  (built-in ops only, float32).

``--serving_precision=bfloat16`` makes the SavedModel compute its matmuls in bf16 (outputs float32);
the TFLite file stays float32.

Both are written under temporary names and renamed when complete. An ``albert_model.tflite``
already in ``<export_dir>`` is replaced only if it is such a span model (``check_export_dir``):
anything else there is the user's and stops the run before any work.
"""
from __future__ import annotations

import os
import warnings

import tensorflow as tf

from albert_tf.data.batching import check_max_length
from albert_tf.fileio import atomic_output
from albert_tf.versions import new_version_folder, version_base_problem
from albert_tf.modeling.serving_precision import DEFAULT_SERVING_PRECISION, model_for_serving
from albert_tf.training import faults

SAVED_MODEL_DIR = "saved_model"
TFLITE_FILE = "albert_model.tflite"
INPUTS = ("input_ids", "input_mask", "segment_ids")
OUTPUTS = ("start_logits", "end_logits")


class SpanServing(tf.Module):
    """The span model's variables and its one serving function."""

    def __init__(self, model, max_seq_length: int):
        super().__init__(name="squad_serving")
        # Call the Keras model without tracking it (tracking would serialize Keras'
        # own layer traces too); its variables are tracked directly.
        object.__setattr__(self, "_model", model)
        self.model_variables = list(model.variables)
        self.max_seq_length = max_seq_length

    def serve(self, input_ids, input_mask, segment_ids):
        inputs = check_max_length({"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids},
                                  self.max_seq_length)
        out = self._model(inputs, training=False)
        return {name: tf.cast(out[name], tf.float32) for name in OUTPUTS}

    def signature(self, fixed: bool = False) -> tf.types.experimental.ConcreteFunction:
        """The serving function for [batch, length] inputs, or (``fixed``, for TFLite) [1, max_seq_length]."""
        shape = [1, self.max_seq_length] if fixed else [None, None]
        specs = [tf.TensorSpec(shape, tf.int32, name=name) for name in INPUTS]
        return tf.function(self.serve, input_signature=specs).get_concrete_function()


def _span_signature(flat: bytes) -> dict | None:
    """The ``serving_default`` signature's input and output names of a TFLite flatbuffer, or None."""
    with warnings.catch_warnings():  # tf.lite.Interpreter's deprecation notice: reading names is all we do
        warnings.simplefilter("ignore")
        try:
            signatures = tf.lite.Interpreter(model_content=flat).get_signature_list()
        except (ValueError, RuntimeError):
            return None
    signature = signatures.get("serving_default")
    return signature and {"inputs": set(signature["inputs"]), "outputs": set(signature["outputs"])}


def check_export_dir(export_dir: str) -> list[str]:
    """Problems (one line each) with ``--export_dir``: a file where the folder should be, or an
    ``albert_model.tflite`` there that is not a span model as this export writes it (the user's: not replaced)."""
    # A read-only place (or a file above it) failed after training and prediction.
    unwritable = version_base_problem("export_dir", export_dir)
    if not tf.io.gfile.exists(export_dir):
        return [unwritable] if unwritable else []
    if not tf.io.gfile.isdir(export_dir):
        return [f"--export_dir={export_dir} is a file; expected a folder"]
    problems = [unwritable] if unwritable else []
    saved = os.path.join(export_dir, SAVED_MODEL_DIR)
    if tf.io.gfile.exists(saved) and not tf.io.gfile.isdir(saved):
        problems.append(f"--export_dir: {saved} is a file; the SavedModel versions go in a folder of that name")
    tflite = os.path.join(export_dir, TFLITE_FILE)
    if tf.io.gfile.exists(tflite):
        ours = {"inputs": set(INPUTS), "outputs": set(OUTPUTS)}
        if tf.io.gfile.isdir(tflite) or _span_signature(tf.io.gfile.GFile(tflite, "rb").read()) != ours:
            problems.append(f"--export_dir: {tflite} is not a SQuAD span model from this export (a TFLite "
                            f"file with inputs {', '.join(INPUTS)} and outputs {', '.join(OUTPUTS)}); "
                            f"not replacing it: give another --export_dir")
    return problems


def export_span_model(model, export_dir: str, max_seq_length: int,
                      serving_precision: str = DEFAULT_SERVING_PRECISION) -> tuple[str, str]:
    """Writes the SavedModel (computing in `serving_precision`) and the TFLite file (float32:
    TFLite's built-in ops have no bf16 matmul); returns their paths."""
    if getattr(model, "version_2", False):
        raise ValueError("--export_dir exports the SQuAD 1.1 span model (run_squad_v1.py's); "
                         "it is not available with --version_2_with_negative")
    problems = check_export_dir(export_dir)  # again: training may have run for hours since the flags were checked
    if problems:
        raise ValueError("; ".join(problems))
    serving = SpanServing(model_for_serving(model, serving_precision), max_seq_length)
    lite = SpanServing(model_for_serving(model, "float32"), max_seq_length)
    with new_version_folder(os.path.join(export_dir, SAVED_MODEL_DIR)) as (tmp, saved):
        with faults.disk_full_as_one_line(f"the export {saved}"):
            tf.saved_model.save(serving, tmp, signatures={"serving_default": serving.signature()})
        converter = tf.lite.TFLiteConverter.from_concrete_functions([lite.signature(fixed=True)], lite)
        flat = converter.convert()
    tflite = os.path.join(export_dir, TFLITE_FILE)
    with atomic_output(tflite) as path, open(path, "wb") as f:
        f.write(flat)
    return saved, tflite
