"""AlbertModel, the encoder: what every task model is handed (Model Garden's "network",
keras-hub's "backbone").

Task models take an encoder rather than a config, so one encoder can be shared (a
classifier built on a pretrainer's encoder trains the same weights) and each model
builds only its head. `as_encoder` also accepts an AlbertConfig, which builds a fresh
encoder: the short form for the common case. `TaskModel` is their common base: it holds
the encoder and gives every task model the one `get_config` / `from_config` pair.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import tensorflow as tf

from albert_tf.config import AlbertConfig
from albert_tf.keras import keras
from albert_tf.modeling.layers import (AlbertEmbeddings, SharedDense, TransformerBlock, dense, group_of_layer,
                                       use_weights)

ENCODER_INPUTS = ("input_ids", "input_mask", "segment_ids")
KERAS_PACKAGE = "albert_tf"  # models serialise as "albert_tf>ClassName"


def serializable(cls: type) -> type:
    """Class decorator: registers a model class with Keras' serialisation (so that
    `keras.saving.deserialize_keras_object` finds it by name)."""
    return keras.saving.register_keras_serializable(package=KERAS_PACKAGE)(cls)


class InputError(ValueError):
    """Model inputs of the wrong name, rank, dtype or length."""


def require_keys(inputs: Any, names: tuple[str, ...]) -> None:
    """A dict holding `names`: checked before a model looks up a key (`in` on a tuple or a tensor
    fails with TensorFlow's words about the key, not about the inputs)."""
    if not isinstance(inputs, Mapping):
        raise InputError(f"ALBERT expects a dict with keys {list(names)}, got {type(inputs).__name__}")
    for name in names:
        if name not in inputs:
            raise InputError(f"ALBERT input '{name}' is missing; got keys {sorted(inputs)}")


def check_inputs(inputs: Mapping[str, Any], names: tuple[str, ...], max_length: int) -> None:
    """Static checks that give one clear message instead of a deep TF error.

    `names[:3]` are the per-token inputs ([batch, seq_length], one shape); a fourth
    (`masked_lm_positions`) is [batch, num_positions] with the same batch."""
    require_keys(inputs, names)
    shapes = {}
    for name in names:
        tensor = inputs[name]
        expected = "[batch, num_positions]" if name == "masked_lm_positions" else "[batch, seq_length]"
        if isinstance(tensor, tf.RaggedTensor):  # would fail deep inside as "Index 1 is not uniform"
            raise InputError(f"ALBERT input '{name}' is a RaggedTensor; pad it to a dense int32 {expected} "
                             f"(e.g. .to_tensor(), with input_mask 0 on the padding)")
        if type(tensor).__name__ == "KerasTensor" and type(tensor).__module__.startswith("keras."):
            # Keras 3's symbolic input (`import keras; keras.Input`) fails in tf.cast with Keras 3's
            # advice to wrap the call in a layer, which this model already is.
            raise InputError(f"ALBERT input '{name}' is a Keras 3 KerasTensor (keras.Input); albert_tf models are "
                             f"Keras 2 (tf_keras): build functional models with `from albert_tf.keras import "
                             f"keras` (keras.Input), or call the model on tensors or NumPy arrays")
        if not hasattr(tensor, "dtype") or not hasattr(tensor, "shape"):  # e.g. a nested Python list
            raise InputError(f"ALBERT input '{name}' must be an int32 tensor or NumPy array {expected}, "
                             f"got {type(tensor).__name__} (convert it with np.asarray or tf.constant)")
        dtype = tf.as_dtype(tensor.dtype)
        if not dtype.is_integer:
            raise InputError(f"ALBERT input '{name}' must be an integer tensor (int32), got {dtype.name}")
        shape = tf.TensorShape(tensor.shape)
        if shape.rank is not None and shape.rank != 2:
            raise InputError(f"ALBERT input '{name}' must have shape {expected}, got {shape}")
        shapes[name] = shape
    # The per-token inputs share one shape; otherwise the add in the embeddings or the
    # attention mask fails far from here.
    first = names[0]
    for name in names[1:]:
        other = shapes[name] if name != "masked_lm_positions" else shapes[name][:1].concatenate([None])
        if not shapes[first].is_compatible_with(other):
            what = "batch size as" if name == "masked_lm_positions" else "shape as"
            raise InputError(f"ALBERT input '{name}' must have the same {what} '{first}' "
                             f"{shapes[first]}, got {shapes[name]}")
    seq = shapes[first][1] if shapes[first].rank is not None else None
    if seq == 0:
        raise InputError(f"ALBERT input '{first}' has length 0; each row needs at least one token ([CLS])")
    if seq is not None and seq > max_length:
        raise InputError(
            f"sequence length {seq} of 'input_ids' exceeds max_position_embeddings ({max_length}) "
            f"of the ALBERT config; shorten inputs (e.g. --max_seq_length)")


def check_id_ranges(inputs: Mapping[str, Any], vocab_size: int, type_vocab_size: int) -> None:
    """Concrete (eager) ids outside the embedding tables: one message naming the input, the value and
    the table's size, not the embedding layer's gather. Traced calls (tf.function, fit) skip it: their
    ids come from a checked pipeline or, in an export, from its signature's ``batching.check_max_length``."""
    if not tf.executing_eagerly():
        return
    for name, size, field in (("input_ids", vocab_size, "vocab_size"), ("segment_ids", type_vocab_size,
                                                                         "type_vocab_size")):
        if not isinstance(inputs[name], np.ndarray) and not hasattr(inputs[name], "numpy"):
            continue  # symbolic
        ids = np.asarray(inputs[name])
        if ids.size == 0 or (ids.min() >= 0 and ids.max() < size):  # the normal case: two reductions
            continue
        where = tuple(int(i) for i in np.argwhere((ids < 0) | (ids >= size))[0])
        hint = ("ids made with another tokenizer than the model's?" if name == "input_ids"
                else f"segment ids run from 0 to {size - 1}")
        raise InputError(f"ALBERT input '{name}' holds {int(ids[where])} at {list(where)}, outside [0, {size}) "
                         f"({field} {size} of the ALBERT config); {hint}")


class _IdsModel(keras.Model):
    """A model called on int32 id tensors (`dummy_inputs` makes them)."""

    def build_from_config(self, config: dict[str, Any]) -> None:
        """Keras' deserialisation builds a model by calling it on float placeholders of the
        recorded input shapes; here the call is on int32 dummy inputs of the recorded length."""
        shapes = config.get("input_shape")
        ids = shapes.get("input_ids") if isinstance(shapes, Mapping) else None
        seq_length = ids[-1] if ids and ids[-1] else 8
        self(self.dummy_inputs(seq_length=seq_length))


@serializable
class AlbertModel(_IdsModel):
    """The ALBERT encoder, exactly as the original computes it.

    Call with a dict of int32 `input_ids`, `input_mask`, `segment_ids` ([B,S]);
    returns `sequence_output` [B,S,H], `pooled_output` [B,H], `embedding_output`
    [B,S,H] (the encoder input, after the E->H projection) and `encoder_outputs`
    (one [B,S,H] per inner block per layer, the original's all_encoder_layers).
    """

    def __init__(self, config: AlbertConfig | Mapping[str, Any], use_one_hot_embeddings: bool = False, **kwargs):
        kwargs.setdefault("name", "albert")
        super().__init__(**kwargs)
        config = config if isinstance(config, AlbertConfig) else AlbertConfig.from_dict(dict(config))
        self.config = config
        self.use_one_hot_embeddings = use_one_hot_embeddings
        init_range = config.initializer_range
        self.embeddings = AlbertEmbeddings(
            config.vocab_size, config.embedding_size, config.type_vocab_size, config.max_position_embeddings,
            init_range, config.hidden_dropout_prob, use_one_hot_embeddings, name="embeddings")
        # The original creates this projection only when E != H.  SharedDense for its 2-D matmul
        # with the bias (which TensorFlow fuses); Keras' Dense reshapes between them.
        self.embedding_hidden_mapping_in = (
            dense(config.hidden_size, init_range, "embedding_hidden_mapping_in", layer_class=SharedDense)
            if config.embedding_size != config.hidden_size else None)
        # groups[g][i]: inner block i of group g; shared by all layers using group g. A group no
        # layer uses (int(l / L * G) skips group 15 of 22 layers in 22 groups) has no blocks: the
        # original creates no variables for it either.
        used = {group_of_layer(l, config.num_hidden_layers, config.num_hidden_groups)
                for l in range(config.num_hidden_layers)}
        self.groups = [
            [TransformerBlock(config.hidden_size, config.num_attention_heads, config.intermediate_size,
                              config.hidden_act, config.hidden_dropout_prob, config.attention_probs_dropout_prob,
                              init_range, name=f"group_{g}_inner_group_{i}")
             for i in range(config.inner_group_num if g in used else 0)]
            for g in range(config.num_hidden_groups)
        ]
        self.pooler = dense(config.hidden_size, init_range, "pooler", "tanh")

    def call(self, inputs: Mapping[str, tf.Tensor], training=None) -> dict[str, Any]:
        check_inputs(inputs, ENCODER_INPUTS, self.config.max_position_embeddings)
        check_id_ranges(inputs, self.config.vocab_size, self.config.type_vocab_size)
        input_ids = tf.cast(inputs["input_ids"], tf.int32)
        segment_ids = tf.cast(inputs["segment_ids"], tf.int32)
        mask = tf.cast(inputs["input_mask"], tf.float32)
        tf.debugging.assert_less_equal(
            tf.shape(input_ids)[1], self.config.max_position_embeddings,
            message="sequence length exceeds max_position_embeddings of the ALBERT config")

        x = self.embeddings(input_ids, segment_ids, training=training)
        if self.embedding_hidden_mapping_in is not None:
            x = tf.cast(self.embedding_hidden_mapping_in(x), tf.float32)
        embedding_output = x
        # (1 - mask) * -10000 on the key axis, broadcast over heads and queries.
        attention_adder = (1.0 - mask[:, tf.newaxis, tf.newaxis, :]) * -10000.0

        encoder_outputs = []
        layers, groups = self.config.num_hidden_layers, self.config.num_hidden_groups
        # Each block's weights are read (and under a mixed policy cast) once here, not in each of
        # its layers; use_weights chains their uses so the backward pass sums their gradients
        # as it goes.
        pairs = [[block.cast_weights() for block in group] for group in self.groups]
        last_layer_of_group = {group_of_layer(l, layers, groups): l for l in range(layers)}
        for layer_index in range(layers):
            group = group_of_layer(layer_index, layers, groups)
            last = layer_index == last_layer_of_group[group]
            for inner, block in enumerate(self.groups[group]):
                weights, pairs[group][inner] = use_weights(pairs[group][inner], last=last)
                x = block(x, attention_adder, training=training, weights=weights)
                encoder_outputs.append(x)
        pooled = tf.cast(self.pooler(x[:, 0]), tf.float32)
        return {
            "sequence_output": x,
            "pooled_output": pooled,
            "embedding_output": embedding_output,
            "encoder_outputs": encoder_outputs,
        }

    def dummy_inputs(self, batch_size: int = 1, seq_length: int = 8) -> dict[str, tf.Tensor]:
        ids = tf.zeros([batch_size, seq_length], tf.int32)
        return {"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": ids}

    def get_config(self) -> dict[str, Any]:
        """Plain values: the config as albert_config.json holds it."""
        return {"name": self.name, "config": self.config.to_dict(),
                "use_one_hot_embeddings": self.use_one_hot_embeddings}


def as_encoder(encoder: AlbertModel | AlbertConfig) -> AlbertModel:
    """The encoder a task model is handed, or a fresh one built from a config."""
    if isinstance(encoder, AlbertModel):
        return encoder
    if isinstance(encoder, AlbertConfig):
        return AlbertModel(encoder)
    raise TypeError(f"expected an AlbertModel (or an AlbertConfig to build one), got {type(encoder).__name__}")


class TaskModel(_IdsModel):
    """A model made of an encoder (`.encoder`, an AlbertModel) and heads.

    Subclasses pass the encoder (or an AlbertConfig) to `__init__` first, build their
    heads, and list their own constructor arguments in `head_config`. `get_config`
    stores the encoder's config beside those; `from_config` rebuilds the encoder and
    hands it back, so every task model is rebuilt by this one method.
    """

    def __init__(self, encoder: AlbertModel | AlbertConfig, **kwargs):
        super().__init__(**kwargs)
        self.encoder = as_encoder(encoder)
        self.config = self.encoder.config

    def dummy_inputs(self, batch_size: int = 1, seq_length: int = 8) -> dict[str, tf.Tensor]:
        return self.encoder.dummy_inputs(batch_size, seq_length)

    def head_config(self) -> dict[str, Any]:
        """The subclass's own constructor arguments (plain values)."""
        return {}

    def get_config(self) -> dict[str, Any]:
        return {"name": self.name, "encoder": self.encoder.get_config(), **self.head_config()}

    @classmethod
    def from_config(cls, config: dict[str, Any], custom_objects=None) -> "TaskModel":
        config = dict(config)
        return cls(AlbertModel.from_config(config.pop("encoder")), **config)
