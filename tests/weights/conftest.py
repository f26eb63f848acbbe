"""Hugging Face folders written by hand for the checkpoint tests.

Tensor names and layouts are spelled here from transformers' published format
(and checked against the reference file transformers wrote), independently of
the package's name table.
"""
import json

import numpy as np
import pytest


def hf_shapes(c: dict, prefix: str = "albert.", pooler: bool = True, heads: str = "pretraining") -> dict:
    """HF name -> shape for an ALBERT config dict (torch layout: Linear weights [out, in])."""
    V, E, H, I = c["vocab_size"], c["embedding_size"], c["hidden_size"], c["intermediate_size"]
    shapes = {
        f"{prefix}embeddings.word_embeddings.weight": [V, E],
        f"{prefix}embeddings.token_type_embeddings.weight": [c.get("type_vocab_size", 2), E],
        f"{prefix}embeddings.position_embeddings.weight": [c.get("max_position_embeddings", 512), E],
        f"{prefix}embeddings.LayerNorm.weight": [E], f"{prefix}embeddings.LayerNorm.bias": [E],
    }
    if E != H:
        shapes[f"{prefix}encoder.embedding_hidden_mapping_in.weight"] = [H, E]
        shapes[f"{prefix}encoder.embedding_hidden_mapping_in.bias"] = [H]
    for g in range(c.get("num_hidden_groups", 1)):
        for i in range(c.get("inner_group_num", 1)):
            p = f"{prefix}encoder.albert_layer_groups.{g}.albert_layers.{i}."
            for part in ("query", "key", "value", "dense"):
                shapes[f"{p}attention.{part}.weight"] = [H, H]
                shapes[f"{p}attention.{part}.bias"] = [H]
            shapes.update({f"{p}attention.LayerNorm.weight": [H], f"{p}attention.LayerNorm.bias": [H],
                           f"{p}ffn.weight": [I, H], f"{p}ffn.bias": [I],
                           f"{p}ffn_output.weight": [H, I], f"{p}ffn_output.bias": [H],
                           f"{p}full_layer_layer_norm.weight": [H], f"{p}full_layer_layer_norm.bias": [H]})
    if pooler:
        shapes[f"{prefix}pooler.weight"] = [H, H]
        shapes[f"{prefix}pooler.bias"] = [H]
    if heads in ("pretraining", "masked_lm"):
        shapes.update({"predictions.dense.weight": [E, H], "predictions.dense.bias": [E],
                       "predictions.LayerNorm.weight": [E], "predictions.LayerNorm.bias": [E],
                       "predictions.bias": [V]})
    if heads == "pretraining":
        shapes.update({"sop_classifier.classifier.weight": [2, H], "sop_classifier.classifier.bias": [2]})
    return shapes


def write_hf_folder(folder, config: dict, architecture: str = "AlbertForPreTraining", seed: int = 0,
                    **shape_options) -> dict:
    """config.json + model.safetensors with random float32 weights; returns the tensors."""
    import safetensors.numpy

    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tensors = {n: (rng.standard_normal(s) * 0.2).astype(np.float32)
               for n, s in hf_shapes(config, **shape_options).items()}
    safetensors.numpy.save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    data = {"model_type": "albert", "architectures": [architecture], "hidden_act": "gelu_new",
            "layer_norm_eps": 1e-12, "transformers_version": "4.57.6", **config}
    (folder / "config.json").write_text(json.dumps(data, indent=2))
    return tensors


@pytest.fixture
def hf_folder():
    return write_hf_folder
