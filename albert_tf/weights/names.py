"""THE name table: each variable of our models <-> its name in Google's TF1
checkpoints <-> its name in Hugging Face `transformers` files.

It serves loading Google and Hugging Face checkpoints, converting in every
direction and `--init_from_group0`. Nothing else in the package spells a TF1 or
Hugging Face tensor name: models and their heads carry only the last part of a
name (`output_weights`, `kernel`). The encoder's and the pretraining heads' TF1
names are here; a task model's heads are named by its kind (`albert_tf.weights.kinds`,
declared next to the model class with the helpers below).
"""
from __future__ import annotations

import dataclasses
import os
import re

from typing import Optional

import tensorflow as tf

from albert_tf.keras import keras
from albert_tf.modeling.layers import LayerNorm

# Prefix TF-Hub modules put before every variable name.
HUB_PREFIX = "module/"
# Checkpoint entries that are not model weights (training state of the original).
_NON_WEIGHT = re.compile(r"(^global_step$)|(/(adam_m|adam_v|lamb_m|lamb_v|Momentum|ExponentialMovingAverage)$)")
PRETRAINING_HEAD_PREFIXES = ("cls/predictions/", "cls/seq_relationship/")
SENTENCE_ORDER_PREFIX = "cls/seq_relationship/"


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What a transformers class saves: its heads (HF name prefixes), whether its
    encoder has the pooler, and whether the encoder sits under `albert.`."""
    heads: tuple[str, ...]
    pooler: bool = True
    prefixed: bool = True


ARCHITECTURES = {
    "AlbertModel": Architecture((), prefixed=False),
    "AlbertForPreTraining": Architecture(("predictions.", "sop_classifier.")),
    "AlbertForMaskedLM": Architecture(("predictions.",), pooler=False),
    "AlbertForSequenceClassification": Architecture(("classifier.",)),
    "AlbertForMultipleChoice": Architecture(("classifier.",)),
    "AlbertForQuestionAnswering": Architecture(("qa_outputs.",), pooler=False),
}


def is_weight_name(name: str) -> bool:
    """False for global_step and optimizer slots (skipped when loading)."""
    return not _NON_WEIGHT.search(name)


def dense_names(prefix: str, layer: keras.layers.Dense) -> dict[str, tf.Variable]:
    """`<prefix>/kernel` (and `<prefix>/bias`) of a Dense layer."""
    names = {f"{prefix}/kernel": layer.kernel}
    if layer.use_bias:
        names[f"{prefix}/bias"] = layer.bias
    return names


def layer_norm_names(prefix: str, layer: LayerNorm) -> dict[str, tf.Variable]:
    """`<prefix>/gamma` and `<prefix>/beta` of a LayerNorm."""
    return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def encoder_names(encoder) -> dict[str, tf.Variable]:
    """TF1 name -> variable for an AlbertModel (built)."""
    emb = encoder.embeddings
    names = {
        "bert/embeddings/word_embeddings": emb.word_embeddings,
        "bert/embeddings/token_type_embeddings": emb.token_type_embeddings,
        "bert/embeddings/position_embeddings": emb.position_embeddings,
        **layer_norm_names("bert/embeddings/LayerNorm", emb.layer_norm),
    }
    if encoder.embedding_hidden_mapping_in is not None:
        names.update(dense_names("bert/encoder/embedding_hidden_mapping_in", encoder.embedding_hidden_mapping_in))
    for g, group in enumerate(encoder.groups):
        for i, block in enumerate(group):
            p = f"bert/encoder/transformer/group_{g}/inner_group_{i}"
            att = block.attention
            names.update(dense_names(f"{p}/attention_1/self/query", att.query))
            names.update(dense_names(f"{p}/attention_1/self/key", att.key))
            names.update(dense_names(f"{p}/attention_1/self/value", att.value))
            names.update(dense_names(f"{p}/attention_1/output/dense", att.output_dense))
            names.update(layer_norm_names(f"{p}/LayerNorm", block.attention_layer_norm))
            names.update(dense_names(f"{p}/ffn_1/intermediate/dense", block.intermediate))
            names.update(dense_names(f"{p}/ffn_1/intermediate/output/dense", block.ffn_output))
            names.update(layer_norm_names(f"{p}/LayerNorm_1", block.output_layer_norm))
    names.update(dense_names("bert/pooler/dense", encoder.pooler))
    return names


def projection_names(prefix: str, layer) -> dict[str, tf.Variable]:
    """An OutputProjection: `<prefix>/output_weights` [units, H] and `<prefix>/output_bias`
    (top-level names for an empty prefix)."""
    slash = f"{prefix}/" if prefix else ""
    return {f"{slash}output_weights": layer.output_weights, f"{slash}output_bias": layer.output_bias}


def pretraining_head_names(pretrainer) -> dict[str, tf.Variable]:
    """TF1 name -> variable for an AlbertPretrainer's masked-LM and sentence-order heads."""
    mlm = pretrainer.masked_lm
    return {
        **dense_names("cls/predictions/transform/dense", mlm.transform),
        **layer_norm_names("cls/predictions/transform/LayerNorm", mlm.layer_norm),
        "cls/predictions/output_bias": mlm.output_bias,
        **projection_names("cls/seq_relationship", pretrainer.sentence_order),
    }


def group0_source_name(name: str) -> str:
    """`--init_from_group0`: where a variable of a multi-group model is read from
    in a one-group checkpoint (group_k -> group_0, attention_k/ffn_k -> _1)."""
    name = re.sub(r"/group_\d+/", "/group_0/", name)
    name = re.sub(r"/attention_\d+/", "/attention_1/", name)
    return re.sub(r"/ffn_\d+/", "/ffn_1/", name)


def mismatch_hint(name: str, expected: tuple, found: tuple | None, checkpoint: str | None = None,
                  converted_model: str | None = None) -> str:
    """What to check after a shape mismatch or a missing variable: a config field; for a classifier
    head whose first dimension differs, the number of labels (which no config field holds); for a
    missing task head, the checkpoint (a pretrained one has no fine-tuned head). ``checkpoint``: its
    prefix, whose folder may hold the ``labels.txt`` of the run that wrote it (``--task_name=custom``).
    ``converted_model``: the model kind being converted (convert_checkpoint.py's ``--converted_model``), where
    no task runs: the head's hints name it and the converter's flags instead of a task's."""
    leaf = name.rsplit("/", 1)[-1]
    if (found is not None and leaf in ("output_weights", "output_bias") and not name.startswith("cls/")
            and expected[0] != found[0]):
        if converted_model:
            return (f"the checkpoint's head has {found[0]} outputs, the {converted_model} model's {expected[0]}: it "
                    f"holds another kind's head; name that kind with --converted_model (auto: what it holds)")
        differs = f"the number of labels differs (the checkpoint's head has {found[0]}, this task {expected[0]})"
        labels_file = _labels_file_beside(checkpoint)
        if labels_file:  # a custom task's run: its labels are there
            return f"{differs}: check {labels_file} (the labels of the run that wrote it) and the task's labels"
        return (f"{differs}: it was fine-tuned for another task or other labels; use one of this task's (for a "
                f"run's own checkpoints, a new --output_dir)")
    if found is None and not name.startswith(("bert/", *PRETRAINING_HEAD_PREFIXES)):
        if converted_model:
            return (f"the checkpoint has no {converted_model} head (a pretrained one has none): convert one fine-tuned "
                    f"for {converted_model} (--converted_model), or pass --allow_missing_heads to start the head fresh")
        return ("the checkpoint has no head for this task (a pretrained checkpoint has none): train first "
                "(--do_train), or give a fine-tuned checkpoint")
    if found is None and name.startswith(SENTENCE_ORDER_PREFIX):
        return "TF-Hub modules carry no sentence-order head: allow missing heads (--allow_missing_heads)"
    field = likely_config_field(name, expected, found)
    if field is None and name.startswith("bert/"):  # every ALBERT model kind has the whole encoder
        return "the checkpoint has no such encoder weight (is it an ALBERT checkpoint, or another model's?)"
    if field is None:
        return "check the model type (encoder or pretrainer) against the checkpoint's"
    return f"check config field {field}"


def likely_config_field(name: str, expected: tuple | None, found: tuple | None) -> str | None:
    """The config field a mismatch or a missing variable most likely comes from; None when no field
    explains it (a variable of another model type)."""
    if found is None:
        if "/group_" in name and "/group_0/" not in name:
            return "num_hidden_groups (or pass init_from_group0)"
        if "/inner_group_" in name and "/inner_group_0/" not in name:
            return "inner_group_num"
        if "embedding_hidden_mapping_in" in name:
            return "embedding_size / hidden_size (the projection exists only when they differ)"
        return None
    if "word_embeddings" in name:
        return "vocab_size" if expected[0] != found[0] else "embedding_size"
    if "position_embeddings" in name:
        return "max_position_embeddings" if expected[0] != found[0] else "embedding_size"
    if "token_type_embeddings" in name:
        return "type_vocab_size" if expected[0] != found[0] else "embedding_size"
    if "ffn_1" in name:
        return "intermediate_size / hidden_size"
    if "cls/predictions/output_bias" in name:
        return "vocab_size"
    if "embeddings/LayerNorm" in name or "cls/predictions" in name or "mapping_in" in name:
        return "embedding_size / hidden_size"
    return "hidden_size"


# --- Hugging Face names ---------------------------------------------------------
# One row per layer: TF1 prefix, HF prefix, kind. {g} and {i} stand for the group
# and inner-block index (the same numbers in both). Kinds:
#   "dense":   kernel [in, out]    <-> weight [out, in] (a torch Linear: transposed), bias <-> bias
#   "linear":  output_weights [out, in] <-> weight (already torch's layout), output_bias <-> bias
#   "norm":    gamma <-> weight, beta <-> bias
#   "table":   the embedding table itself <-> weight
#   "vector":  the tensor itself <-> the tensor itself
# Encoder rows (TF1 `bert/...`) are named as a bare transformers AlbertModel saves
# them; the task classes put them under HF_BASE_PREFIX.
_LAYER = "bert/encoder/transformer/group_{g}/inner_group_{i}"
_HF_LAYER = "encoder.albert_layer_groups.{g}.albert_layers.{i}"
_HF_ROWS = (
    ("bert/embeddings/word_embeddings", "embeddings.word_embeddings", "table"),
    ("bert/embeddings/token_type_embeddings", "embeddings.token_type_embeddings", "table"),
    ("bert/embeddings/position_embeddings", "embeddings.position_embeddings", "table"),
    ("bert/embeddings/LayerNorm", "embeddings.LayerNorm", "norm"),
    ("bert/encoder/embedding_hidden_mapping_in", "encoder.embedding_hidden_mapping_in", "dense"),
    (f"{_LAYER}/attention_1/self/query", f"{_HF_LAYER}.attention.query", "dense"),
    (f"{_LAYER}/attention_1/self/key", f"{_HF_LAYER}.attention.key", "dense"),
    (f"{_LAYER}/attention_1/self/value", f"{_HF_LAYER}.attention.value", "dense"),
    (f"{_LAYER}/attention_1/output/dense", f"{_HF_LAYER}.attention.dense", "dense"),
    (f"{_LAYER}/LayerNorm", f"{_HF_LAYER}.attention.LayerNorm", "norm"),
    (f"{_LAYER}/ffn_1/intermediate/dense", f"{_HF_LAYER}.ffn", "dense"),
    (f"{_LAYER}/ffn_1/intermediate/output/dense", f"{_HF_LAYER}.ffn_output", "dense"),
    (f"{_LAYER}/LayerNorm_1", f"{_HF_LAYER}.full_layer_layer_norm", "norm"),
    ("bert/pooler/dense", "pooler", "dense"),
    # AlbertForPreTraining / AlbertForMaskedLM (predictions.decoder is tied to the word table)
    ("cls/predictions/transform/dense", "predictions.dense", "dense"),
    ("cls/predictions/transform/LayerNorm", "predictions.LayerNorm", "norm"),
    ("cls/predictions/output_bias", "predictions.bias", "vector"),
    ("cls/seq_relationship", "sop_classifier.classifier", "linear"),
    # Google's GLUE and RACE heads (AlbertForSequenceClassification, AlbertForMultipleChoice)
    ("", "classifier", "linear"),
    # Google's SQuAD 1.1 head (AlbertForQuestionAnswering)
    ("cls/squad", "qa_outputs", "linear"),
)
HF_BASE_PREFIX = "albert."
HF_POOLER_PREFIX = "bert/pooler/"
# Stored by older transformers versions beside predictions.bias (the same tensor).
HF_TIED_ALIASES = {"predictions.decoder.bias": "predictions.bias"}
_HF_SUFFIXES = {
    "dense": (("kernel", "weight", True), ("bias", "bias", False)),
    "linear": (("output_weights", "weight", False), ("output_bias", "bias", False)),
    "norm": (("gamma", "weight", False), ("beta", "bias", False)),
    "table": (("", "weight", False),),
    "vector": (("", "", False),),
}


def _template_regex(template: str, whole: bool = True) -> re.Pattern:
    """A regex for a name template with {g} / {i} placeholders: the whole name, or (`whole=False`) its start."""
    parts = re.split(r"\{(g|i)\}", template)  # literal, placeholder, literal, ...
    pattern = "".join(re.escape(part) if k % 2 == 0 else rf"(?P<{part}>\d+)" for k, part in enumerate(parts))
    return re.compile(pattern + ("$" if whole else ""))


_LAYER_START = _template_regex(_LAYER + "/", whole=False)


def is_encoder_layer_name(tf1_name: str) -> bool:
    """True for a weight of a transformer block (bert/encoder/transformer/group_N/inner_group_M/...),
    False for optimizer slots on it and everything else."""
    return bool(_LAYER_START.match(tf1_name)) and is_weight_name(tf1_name)


def _join(prefix: str, suffix: str, separator: str) -> str:
    return separator.join(part for part in (prefix, suffix) if part)


def _compile_hf_table() -> list[tuple[re.Pattern, str, re.Pattern, str, bool]]:
    """(TF1 regex, TF1 template, HF regex, HF template, transposed) per tensor kind."""
    table = []
    for tf1_prefix, hf_prefix, kind in _HF_ROWS:
        for tf1_suffix, hf_suffix, transposed in _HF_SUFFIXES[kind]:
            tf1, hf = _join(tf1_prefix, tf1_suffix, "/"), _join(hf_prefix, hf_suffix, ".")
            table.append((_template_regex(tf1), tf1, _template_regex(hf), hf, transposed))
    return table


_HF_TABLE = _compile_hf_table()


def hf_name(tf1_name: str) -> Optional[tuple[str, bool]]:
    """(Hugging Face name without the `albert.` prefix, whether the HF tensor is the
    transpose) for a TF1 name; None if transformers has no such tensor (e.g. the
    SQuAD 2.0 head)."""
    for tf1_re, _, _, hf_template, transposed in _HF_TABLE:
        match = tf1_re.match(tf1_name)
        if match:
            return hf_template.format(**match.groupdict()), transposed
    return None


def tf1_name_from_hf(name: str) -> Optional[tuple[str, bool]]:
    """(TF1 name, whether the HF tensor is the transpose) for a Hugging Face name,
    with or without the `albert.` prefix; None for tensors we have no use for."""
    prefixed = name.startswith(HF_BASE_PREFIX)
    bare = name[len(HF_BASE_PREFIX):] if prefixed else name
    bare = HF_TIED_ALIASES.get(bare, bare)
    for _, tf1_template, hf_re, _, transposed in _HF_TABLE:
        match = hf_re.match(bare)
        if match:
            tf1_name = tf1_template.format(**match.groupdict())
            # Only the encoder sits under `albert.`; a head there is not one of ours.
            return (tf1_name, transposed) if is_encoder_name(tf1_name) or not prefixed else None
    return None


def is_encoder_name(tf1_name: str) -> bool:
    """True for the encoder's variables (transformers' AlbertModel, under `albert.`
    in the task classes); False for heads."""
    return tf1_name.startswith("bert/")


def _labels_file_beside(checkpoint: str | None) -> str | None:
    """The ``labels.txt`` a ``--task_name=custom`` run wrote beside its checkpoints, when ``checkpoint`` has one."""
    if not checkpoint:
        return None
    from albert_tf.weights.files import LABELS_FILE

    path = os.path.join(os.path.dirname(checkpoint), LABELS_FILE)
    return path if tf.io.gfile.exists(path) else None
