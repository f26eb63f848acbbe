"""SavedModel export of a GLUE classifier, with two serving signatures.

- `serving_default`: serialized `tf.Example`s ([None] tf.string) holding
  `input_ids`, `input_mask`, `segment_ids` (int64), as the original's
  `_serving_input_receiver_fn`, of any length up to max_seq_length (the original's
  fixed-length records included);
- `serving_text`: raw text, `text_a` (and `text_b` for sentence-pair tasks), each
  [None] tf.string, tokenized in-graph by `TFTokenizer` and packed exactly as
  `features.convert_example` packs it (same truncation), so serving needs no
  Python preprocessing.

Both compute each request batch at its longest row, not at max_seq_length (padding
changes no output: `albert_tf.data.batching`); a longer input is an error.

Outputs, classification: `probabilities` [B, num_labels] float32, `predictions`
[B] int32 class ids, `labels` [B] tf.string (the task's label strings). STS-B:
`score` [B] float32 (and `predictions`, the same score). With a decision threshold
(`--threshold_to_export`, binary tasks only) the outputs add the scalar `threshold`
(as the original attaches it), `thresholded_predictions` and `thresholded_labels`: the positive class
(`TaskSpec.positive_id`, class 1 unless --positive_label says otherwise) where its probability is
>= threshold, else the other class. `predictions` and `labels` stay the most probable class, as the
original's `predictions` (and `submit_results.tsv`).

`--serving_precision=bfloat16` exports a graph whose matmuls run in bf16 (outputs float32);
the default is float32 whatever the training's `--mixed_precision`.

As in the original (estimator.export_saved_model), each export goes to a new
numbered sub-directory `<export_dir>/<unix time>`, written under a temporary name
and renamed when complete. Loading needs `import tensorflow_text` first (it
registers the SentencePiece ops the text signature uses), unless exported without
`serving_text` (``text_signature=False``): then no tensorflow-text op is in the graph,
and stock TF Serving and plain TensorFlow load it.
"""
from __future__ import annotations

import math

import tensorflow as tf

from albert_tf.data.batching import check_max_length, embedding_id_limits, trim_to_longest
from albert_tf.versions import new_version_folder
from albert_tf.data.records import MODEL_INPUTS
from albert_tf.glue.processors import TaskSpec
from albert_tf.modeling.serving_precision import DEFAULT_SERVING_PRECISION, model_for_serving
from albert_tf.tokenization.packing import pack_token_ids
from albert_tf.training import faults

SERVING_EXAMPLES = "serving_default"
SERVING_TEXT = "serving_text"


def check_threshold(spec: TaskSpec, threshold: float | None) -> None:
    """A decision threshold is on the positive class's probability: binary tasks only."""
    if threshold is not None and (spec.is_regression or spec.num_labels != 2):
        raise ValueError(
            f"--threshold_to_export applies to binary tasks only; {spec.name} has "
            f"{'a regression output' if spec.is_regression else f'{spec.num_labels} labels'}")


class ClassifierServing(tf.Module):
    """The exported object: the Keras classifier, the in-graph tokenizer (None: no
    ``serving_text``, no tensorflow-text op saved), and the signatures' functions."""

    def __init__(self, model, tokenizer, spec: TaskSpec, max_seq_length: int,
                 threshold: float | None = None):
        super().__init__(name="glue_classifier_serving")
        check_threshold(spec, threshold)
        # The Keras model is called, not tracked: tracking it would make SavedModel
        # also serialize Keras' own layer traces (several times slower to save and
        # load). Its variables are tracked directly instead.
        object.__setattr__(self, "_model", model)
        self.model_variables = list(model.variables)
        # Tracked, its resource is saved (tensorflow-text ops) whether a signature uses it or not.
        self.tokenizer = tokenizer
        self.max_seq_length = max_seq_length
        # Ids outside the embedding tables (an Example of another tokenizer's ids): a message naming the
        # input, not the embedding's gather (on a GPU, zeros and a wrong answer without an error).
        self.id_limits = embedding_id_limits(model.config)
        self.regression = spec.is_regression
        self.label_strings = tf.constant(list(spec.labels or ["score"]))
        self.threshold = None if threshold is None else tf.constant(float(threshold), tf.float32)
        self.positive_id = None if spec.is_regression else spec.positive_id
        self.pair = spec.is_pair
        # Both signatures call this one function, so the model is traced once.
        ids = tf.TensorSpec([None, None], tf.int32)
        self._forward = tf.function(
            lambda inputs: self._model(inputs, training=False),
            input_signature=[{name: ids for name in MODEL_INPUTS}])

    def _outputs(self, inputs: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        out = self._forward(check_max_length({k: inputs[k] for k in MODEL_INPUTS}, self.max_seq_length,
                                             id_limits=self.id_limits))
        if self.regression:
            score = tf.cast(out["probabilities"], tf.float32)
            return {"score": score, "predictions": score}
        probabilities = tf.cast(out["probabilities"], tf.float32)
        predictions = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        result = {"probabilities": probabilities, "predictions": predictions,
                  "labels": tf.gather(self.label_strings, predictions)}
        if self.threshold is not None:  # added beside the original's outputs, which keep their meaning
            positive = probabilities[:, self.positive_id] >= self.threshold
            decided = tf.where(positive, self.positive_id, 1 - self.positive_id)
            result.update(threshold=self.threshold, thresholded_predictions=decided,
                          thresholded_labels=tf.gather(self.label_strings, decided))
        return result

    def serve_examples(self, examples: tf.Tensor) -> dict[str, tf.Tensor]:
        # Variable length: records padded to max_seq_length (the original's) or shorter ones.
        parsed = tf.io.parse_example(examples, {k: tf.io.VarLenFeature(tf.int64) for k in MODEL_INPUTS})
        dense = {k: tf.cast(tf.sparse.to_dense(_at_least_one_column(v)), tf.int32) for k, v in parsed.items()}
        return self._outputs(trim_to_longest(dense, MODEL_INPUTS, multiple=1))

    def serve_text(self, text_a: tf.Tensor, text_b: tf.Tensor | None = None) -> dict[str, tf.Tensor]:
        ids_b = None if text_b is None else self.tokenizer.tokenize(text_b)
        inputs = pack_token_ids(self.tokenizer.tokenize(text_a), ids_b, self.max_seq_length,
                                self.tokenizer.cls_id, self.tokenizer.sep_id, pad_to_longest=True)
        return self._outputs(inputs)

    def signatures(self) -> dict[str, tf.types.experimental.ConcreteFunction]:
        """The signatures' concrete functions (``serving_text`` only with a tokenizer). They are not
        attributes of the module, so saving traces nothing else (the model is traced once per signature)."""
        strings = lambda name: tf.TensorSpec([None], tf.string, name=name)  # noqa: E731
        examples = tf.function(self.serve_examples, input_signature=[strings("examples")])
        if self.tokenizer is None:
            return {SERVING_EXAMPLES: examples.get_concrete_function()}
        if self.pair:
            text = tf.function(lambda a, b: self.serve_text(a, b),
                               input_signature=[strings("text_a"), strings("text_b")])
        else:
            text = tf.function(lambda a: self.serve_text(a), input_signature=[strings("text_a")])
        return {SERVING_EXAMPLES: examples.get_concrete_function(),
                SERVING_TEXT: text.get_concrete_function()}


def _at_least_one_column(values: tf.SparseTensor) -> tf.SparseTensor:
    """An empty request parses to width 0; the pooler reads column 0 (the [CLS] position)."""
    rows, width = values.dense_shape[0], values.dense_shape[1]
    return tf.sparse.reset_shape(values, tf.stack([rows, tf.maximum(width, 1)]))


def export_classifier(model, spec: TaskSpec, export_dir: str, max_seq_length: int,
                      spm_model_file: str, do_lower_case: bool = True,
                      threshold: float | None = None,
                      serving_precision: str = DEFAULT_SERVING_PRECISION, text_signature: bool = True) -> str:
    """Writes the SavedModel to a new `<export_dir>/<unix time>` and returns that path.

    `threshold` NaN or None means no threshold (the original's flag default is NaN).
    `serving_precision`: what the graph computes in (`albert_tf.modeling.serving_precision`).
    `text_signature`: False leaves out `serving_text` and every tensorflow-text op (`spm_model_file`
    is unused then).
    """
    if threshold is not None and math.isnan(threshold):
        threshold = None
    tokenizer = None
    if text_signature:
        from albert_tf.tokenization import TFTokenizer

        if not spm_model_file:
            raise ValueError("the raw-text signature needs --spm_model_file (SentencePiece model)")
        tokenizer = TFTokenizer(spm_model_file, do_lower_case)
    model = model_for_serving(model, serving_precision)
    serving = ClassifierServing(model, tokenizer, spec, max_seq_length, threshold)
    with new_version_folder(export_dir) as (tmp, final), faults.disk_full_as_one_line(f"the export {final}"):
        tf.saved_model.save(serving, tmp, signatures=serving.signatures())
    return final
