"""THE name table: each variable of our models <-> its name in Google's TF1 checkpoints.

It serves loading Google checkpoints, converting in both directions and
`--init_from_group0`. Nothing else in the package spells a TF1 variable name.
"""
from __future__ import annotations

import re

import tensorflow as tf

from albert_tf.keras import keras
from albert_tf.modeling.layers import LayerNorm

# Prefix TF-Hub modules put before every variable name.
HUB_PREFIX = "module/"
# Checkpoint entries that are not model weights (training state of the original).
_NON_WEIGHT = re.compile(r"(^global_step$)|(/(adam_m|adam_v|lamb_m|lamb_v|Momentum|ExponentialMovingAverage)$)")
PRETRAINING_HEAD_PREFIXES = ("cls/predictions/", "cls/seq_relationship/")
SENTENCE_ORDER_PREFIX = "cls/seq_relationship/"


def is_weight_name(name: str) -> bool:
    """False for global_step and optimizer slots (skipped when loading)."""
    return not _NON_WEIGHT.search(name)


def _dense(prefix: str, layer: keras.layers.Dense) -> dict[str, tf.Variable]:
    names = {f"{prefix}/kernel": layer.kernel}
    if layer.use_bias:
        names[f"{prefix}/bias"] = layer.bias
    return names


def _layer_norm(prefix: str, layer: LayerNorm) -> dict[str, tf.Variable]:
    return {f"{prefix}/gamma": layer.gamma, f"{prefix}/beta": layer.beta}


def encoder_names(encoder) -> dict[str, tf.Variable]:
    """TF1 name -> variable for an AlbertModel (built)."""
    emb = encoder.embeddings
    names = {
        "bert/embeddings/word_embeddings": emb.word_embeddings,
        "bert/embeddings/token_type_embeddings": emb.token_type_embeddings,
        "bert/embeddings/position_embeddings": emb.position_embeddings,
        **_layer_norm("bert/embeddings/LayerNorm", emb.layer_norm),
    }
    if encoder.embedding_hidden_mapping_in is not None:
        names.update(_dense("bert/encoder/embedding_hidden_mapping_in", encoder.embedding_hidden_mapping_in))
    for g, group in enumerate(encoder.groups):
        for i, block in enumerate(group):
            p = f"bert/encoder/transformer/group_{g}/inner_group_{i}"
            att = block.attention
            names.update(_dense(f"{p}/attention_1/self/query", att.query))
            names.update(_dense(f"{p}/attention_1/self/key", att.key))
            names.update(_dense(f"{p}/attention_1/self/value", att.value))
            names.update(_dense(f"{p}/attention_1/output/dense", att.output_dense))
            names.update(_layer_norm(f"{p}/LayerNorm", block.attention_layer_norm))
            names.update(_dense(f"{p}/ffn_1/intermediate/dense", block.intermediate))
            names.update(_dense(f"{p}/ffn_1/intermediate/output/dense", block.ffn_output))
            names.update(_layer_norm(f"{p}/LayerNorm_1", block.output_layer_norm))
    names.update(_dense("bert/pooler/dense", encoder.pooler))
    return names


def pretraining_head_names(pretrainer) -> dict[str, tf.Variable]:
    mlm, sop = pretrainer.masked_lm, pretrainer.sentence_order
    return {
        **_dense("cls/predictions/transform/dense", mlm.transform),
        **_layer_norm("cls/predictions/transform/LayerNorm", mlm.layer_norm),
        "cls/predictions/output_bias": mlm.output_bias,
        "cls/seq_relationship/output_weights": sop.output_weights,
        "cls/seq_relationship/output_bias": sop.output_bias,
    }


def tf1_name_map(model) -> dict[str, tf.Variable]:
    """TF1 name -> variable for a built AlbertModel, AlbertPretrainer, or any task
    model with an `.encoder` (its heads may add names via `tf1_head_variables()`)."""
    from albert_tf.modeling.models import AlbertModel, AlbertPretrainer

    if isinstance(model, AlbertModel):
        return encoder_names(model)
    if not hasattr(model, "encoder"):
        raise TypeError(f"{type(model).__name__} is not an ALBERT model (no .encoder)")
    names = encoder_names(model.encoder)
    if isinstance(model, AlbertPretrainer):
        names.update(pretraining_head_names(model))
    if hasattr(model, "tf1_head_variables"):
        names.update(model.tf1_head_variables())
    return names


def group0_source_name(name: str) -> str:
    """`--init_from_group0`: where a variable of a multi-group model is read from
    in a one-group checkpoint (group_k -> group_0, attention_k/ffn_k -> _1)."""
    name = re.sub(r"/group_\d+/", "/group_0/", name)
    name = re.sub(r"/attention_\d+/", "/attention_1/", name)
    return re.sub(r"/ffn_\d+/", "/ffn_1/", name)


def likely_config_field(name: str, expected: tuple | None, found: tuple | None) -> str:
    """A hint at which config field differs, for mismatch and missing-variable errors."""
    if found is None:
        if "/group_" in name and "/group_0/" not in name:
            return "num_hidden_groups (or pass init_from_group0)"
        if "/inner_group_" in name and "/inner_group_0/" not in name:
            return "inner_group_num"
        if "embedding_hidden_mapping_in" in name:
            return "embedding_size / hidden_size (the projection exists only when they differ)"
        if name.startswith(SENTENCE_ORDER_PREFIX):
            return "none: TF-Hub modules carry no sentence-order head (allow missing heads)"
        return "the model type (encoder vs pretrainer) or the checkpoint"
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
