"""Loading Google TF1 checkpoints and our own (object-based) into ALBERT models."""
from __future__ import annotations

import dataclasses
import os
from collections import deque
from typing import Optional

import tensorflow as tf

from albert_tf.checkpoints import names as name_table

_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
# Root attribute our training loop and converter save the model under.
MODEL_ROOT = "model"


class CheckpointError(ValueError):
    """A checkpoint that cannot be found or does not fit the model."""


@dataclasses.dataclass
class LoadReport:
    path: str
    format: str  # "tf1" (Google's names) or "tf2" (ours, object-based)
    loaded: list[str]  # TF1 names of the model variables that were set
    skipped: list[str]  # checkpoint entries not used (slots, global_step, other heads)
    missing_allowed: list[str]  # head variables left as initialised, by request

    def summary(self) -> str:
        text = (f"loaded {len(self.loaded)} variables from {self.path} ({self.format} format); "
                f"skipped {len(self.skipped)} checkpoint entries")
        if self.missing_allowed:
            text += f"; left {len(self.missing_allowed)} head variables unloaded: {', '.join(self.missing_allowed)}"
        return text


def resolve_checkpoint(path: str) -> str:
    """A checkpoint prefix from a prefix, a directory with a `checkpoint` state
    file, or a TF-Hub module directory (`variables/variables`)."""
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest:
            return latest
        hub_variables = os.path.join(path, "variables", "variables")
        if tf.io.gfile.exists(hub_variables + ".index"):
            return hub_variables
        raise CheckpointError(f"no checkpoint found in directory {path} (no 'checkpoint' state file "
                              f"and no variables/variables.index)")
    if tf.io.gfile.exists(path + ".index"):
        return path
    raise CheckpointError(f"checkpoint not found: {path} (expected {path}.index, or a directory)")


def checkpoint_format(keys) -> str:
    keys = list(keys)
    if any(k.endswith(_VALUE_SUFFIX) for k in keys):
        return "tf2"
    if any(_strip_hub(k).startswith(("bert/", "cls/")) for k in keys):
        return "tf1"
    raise CheckpointError("checkpoint holds neither Google's TF1 ALBERT names (bert/...) nor an "
                          "albert_tf model; found e.g. " + ", ".join(keys[:5]))


def _strip_hub(name: str) -> str:
    return name[len(name_table.HUB_PREFIX):] if name.startswith(name_table.HUB_PREFIX) else name


def object_paths(root) -> dict[int, str]:
    """id(variable) -> its object-graph path below `root`, the way tf.train.Checkpoint
    names it (breadth first: the shortest path wins)."""
    paths: dict[int, str] = {}
    seen = {id(root)}
    queue = deque([(root, "")])
    while queue:
        obj, path = queue.popleft()
        for child_name, child in tf.train.TrackableView(obj).children(obj).items():
            if id(child) in seen:
                continue
            seen.add(id(child))
            child_path = f"{path}{child_name}"
            if isinstance(child, tf.Variable):
                paths[id(child)] = child_path
            else:
                queue.append((child, child_path + "/"))
    return paths


def _ensure_built(model) -> None:
    if not model.built:
        model(model.dummy_inputs())


def _tf1_sources(model_names: dict[str, tf.Variable], keys: set[str], init_from_group0: bool) -> dict[str, Optional[str]]:
    hub = any(k.startswith(name_table.HUB_PREFIX) for k in keys)
    sources = {}
    for name in model_names:
        source = name_table.group0_source_name(name) if init_from_group0 else name
        if hub:
            source = name_table.HUB_PREFIX + source
        sources[name] = source if source in keys else None
    return sources


def _tf2_sources(model, model_names: dict[str, tf.Variable], keys: set[str]) -> dict[str, Optional[str]]:
    """Maps TF1 names to keys of one of our checkpoints, wherever the model sat in it
    (a pretrainer's checkpoint read into an encoder, or the reverse)."""
    encoder = model.encoder if hasattr(model, "encoder") else model
    encoder_paths = object_paths(encoder)
    model_paths = object_paths(model)
    word_key = "embeddings/word_embeddings" + _VALUE_SUFFIX
    encoder_prefixes = sorted((k[: -len(word_key)] for k in keys if k.endswith(word_key)), key=len)
    if not encoder_prefixes:
        raise CheckpointError("checkpoint has no ALBERT encoder (no embeddings/word_embeddings)")
    encoder_prefix = encoder_prefixes[0]
    root_prefix = encoder_prefix[: -len("encoder/")] if encoder_prefix.endswith("encoder/") else None
    sources = {}
    for name, var in model_names.items():
        if name.startswith("bert/"):
            key = encoder_prefix + encoder_paths[id(var)] + _VALUE_SUFFIX
        elif root_prefix is not None:
            key = root_prefix + model_paths[id(var)] + _VALUE_SUFFIX
        else:
            key = None
        sources[name] = key if key in keys else None
    return sources


def load_checkpoint(model, path: str, *, allow_missing_heads: bool = False,
                    init_from_group0: bool = False) -> LoadReport:
    """Loads a Google TF1 checkpoint (prefix or directory, with or without the
    TF-Hub `module/` prefix) or one of ours into an AlbertModel, AlbertPretrainer
    or task model with an `.encoder`.

    Raises CheckpointError listing every missing or mis-shaped variable (name,
    expected shape, found shape, the config field that likely differs). Head
    variables (anything outside `bert/`) may be missing only with
    `allow_missing_heads=True` (TF-Hub modules have no sentence-order head).
    """
    prefix = resolve_checkpoint(path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    keys = set(shapes)
    fmt = checkpoint_format(keys)
    _ensure_built(model)
    model_names = name_table.tf1_name_map(model)
    sources = (_tf1_sources(model_names, keys, init_from_group0) if fmt == "tf1"
               else _tf2_sources(model, model_names, keys))

    problems, missing_allowed = [], []
    for name, var in model_names.items():
        source = sources[name]
        expected = tuple(var.shape.as_list())
        if source is None:
            if allow_missing_heads and not name.startswith("bert/"):
                missing_allowed.append(name)
                continue
            problems.append((name, expected, None))
        elif tuple(shapes[source]) != expected:
            problems.append((name, expected, tuple(shapes[source])))
    if problems:
        lines = [f"checkpoint {prefix} does not fit the model ({len(problems)} variables):"]
        for name, expected, found in problems:
            found_text = "missing" if found is None else f"found shape {list(found)}"
            lines.append(f"  {name}: expected shape {list(expected)}, {found_text}; "
                         f"check config field {name_table.likely_config_field(name, expected, found)}")
        raise CheckpointError("\n".join(lines))

    used = set()
    for name, var in model_names.items():
        source = sources[name]
        if source is None:
            continue
        var.assign(tf.cast(reader.get_tensor(source), var.dtype))
        used.add(source)
    skipped = sorted(k for k in keys if k not in used and k != "_CHECKPOINTABLE_OBJECT_GRAPH")
    loaded = sorted(n for n in model_names if sources[n] is not None)
    return LoadReport(prefix, fmt, loaded, skipped, sorted(missing_allowed))
