"""Model kinds: each model class that checkpoints hold, declared once with what the
name table and the converter need to know about it.

A task declares its kind next to its model class (`register(ModelKind(...))`); the
encoder and the pretrainer, which live below this floor, are declared at the end of
this module. `tf1_name_map` finds a model's head names through its kind and
`albert_tf.conversion` walks `kinds()` to detect, build and convert every kind, so a
new task touches nothing in this package.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Optional, Protocol

import tensorflow as tf

from albert_tf.keras import keras
from albert_tf.modeling.encoder import AlbertModel
from albert_tf.modeling.models import AlbertPretrainer, build as build_model
from albert_tf.weights import names

AUTO = "auto"  # --converted_model: detect the kind from the checkpoint


class CheckpointHeads(Protocol):
    """What `ModelKind.build_options` reads from the checkpoint being converted."""
    path: str

    def head_shape(self, tf1_name: str, tf2_path: str) -> Optional[tuple[int, ...]]:
        """The shape of a head tensor, by its TF1 name (TF1 and Hugging Face inputs) or
        its attribute path in our object-based checkpoints (e.g. `/classifier/output_weights`);
        None if the checkpoint lacks it."""


@dataclasses.dataclass(frozen=True)
class ModelKind:
    """One `--converted_model` value.

    name: the flag value. model_class: the Keras model class (its subclasses share the kind).
    build(config, **options): a built model (variables created); called with the config
      alone it builds a representative size.
    tf1_head_names(model): TF1 name -> variable of the model's heads (the encoder's are
      added by `tf1_name_map`); `names.dense_names`, `layer_norm_names` and
      `projection_names` spell them.
    hf_architecture: the transformers class it converts to (a key of `names.ARCHITECTURES`),
      None if transformers has no counterpart (then `*_to_hf` is refused).
    tf1_marker: a TF1 name only this kind's checkpoints hold, for auto detection (None:
      the kind must be named for TF1 inputs).
    tf2_marker: a fragment of an object-graph key only this kind's checkpoints of ours hold.
    build_options(heads): `build` options read from the source (e.g. the number of labels).
    hf_also_reads: further transformers classes read as this kind.
    description: a few words for --converted_model's help and error messages.
    """
    name: str
    model_class: type
    build: Callable[..., keras.Model]
    tf1_head_names: Callable[[Any], dict[str, tf.Variable]]
    hf_architecture: Optional[str] = None
    tf1_marker: Optional[str] = None
    tf2_marker: Optional[str] = None
    build_options: Optional[Callable[[CheckpointHeads], Mapping[str, Any]]] = None
    hf_also_reads: tuple[str, ...] = ()
    description: str = ""


_KINDS: dict[str, ModelKind] = {}


def register(kind: ModelKind) -> ModelKind:
    """Adds `kind` to the registry (and returns it). Its model class must be registered
    with Keras (`albert_tf.modeling.encoder.serializable`); its name, class, markers and
    Hugging Face classes must be its own."""
    if kind.name == AUTO or kind.name in _KINDS:
        raise ValueError(f"model kind {kind.name!r} is already registered")
    if ">" not in keras.saving.get_registered_name(kind.model_class):  # "package>Class" once registered
        raise ValueError(f"{kind.model_class.__name__} is not Keras-serialisable: decorate it with "
                         f"albert_tf.modeling.encoder.serializable")
    for architecture in (kind.hf_architecture, *kind.hf_also_reads):
        if architecture is not None and architecture not in names.ARCHITECTURES:
            raise ValueError(f"{kind.name}: unknown Hugging Face architecture {architecture}")
    for other in _KINDS.values():
        shared = [what for what, mine, theirs in (
            ("model class", kind.model_class, other.model_class), ("TF1 marker", kind.tf1_marker, other.tf1_marker),
            ("TF2 marker", kind.tf2_marker, other.tf2_marker)) if mine is not None and mine == theirs]
        shared += sorted(set(filter(None, (kind.hf_architecture, *kind.hf_also_reads)))
                         & set(filter(None, (other.hf_architecture, *other.hf_also_reads))))
        if shared:
            raise ValueError(f"model kind {kind.name!r} shares {', '.join(map(str, shared))} with {other.name!r}")
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Removes a kind (for tests that register their own)."""
    del _KINDS[name]


def kinds() -> tuple[ModelKind, ...]:
    """Every registered kind, in registration order."""
    return tuple(_KINDS.values())


def get(name: str) -> ModelKind:
    """The kind registered as `name`; KeyError naming the known ones otherwise."""
    if name not in _KINDS:
        raise KeyError(f"unknown model kind {name}; expected one of {', '.join(_KINDS)}")
    return _KINDS[name]


def kind_of(model) -> ModelKind:
    """The kind of a model: its class's, or its nearest registered base class's."""
    by_class = {kind.model_class: kind for kind in _KINDS.values()}
    for cls in type(model).__mro__:
        if cls in by_class:
            return by_class[cls]
    raise TypeError(f"{type(model).__name__} has no TF1 names: declare its kind next to the class "
                    f"(albert_tf.weights.kinds.register)")


def tf1_name_map(model) -> dict[str, tf.Variable]:
    """TF1 name -> variable for a built model of a registered kind (an AlbertModel, or a
    model with an `.encoder` whose kind names its heads): the encoder's names from the name
    table, the heads' from the kind."""
    kind = kind_of(model)
    encoder = model if isinstance(model, AlbertModel) else model.encoder
    return {**names.encoder_names(encoder), **kind.tf1_head_names(model)}


# The two models of the modeling floor, which cannot import this one.
ENCODER = register(ModelKind(
    "encoder", AlbertModel, build=lambda config: build_model(AlbertModel(config)),
    tf1_head_names=lambda model: {}, hf_architecture="AlbertModel", description="the encoder alone"))
PRETRAINER = register(ModelKind(
    "pretrainer", AlbertPretrainer, build=lambda config: build_model(AlbertPretrainer(config)),
    tf1_head_names=names.pretraining_head_names, hf_architecture="AlbertForPreTraining",
    tf1_marker="cls/predictions/output_bias", tf2_marker="/masked_lm/",
    hf_also_reads=("AlbertForMaskedLM",),  # its sentence-order head is missing
    description="encoder + MLM + sentence-order heads"))
