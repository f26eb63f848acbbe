"""Loading Google TF1 checkpoints, our own (object-based) and Hugging Face folders
into ALBERT models."""
from __future__ import annotations

import dataclasses
import os
import re
from collections import deque
from typing import Optional

import tensorflow as tf

from albert_tf.weights import files, hf, kinds
from albert_tf.weights import names as name_table
from albert_tf.weights.errors import CheckpointError

_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
# Root attribute our training loop and converter save the model under.
MODEL_ROOT = "model"
# Where our hub-style export (albert_tf.export) keeps the variables, by TF1 name.
EXPORT_VARIABLES = "tf1_variables/"


@dataclasses.dataclass
class LoadReport:
    path: str
    format: str  # "tf1" (Google's names), "tf2" (ours, object-based), "export" (our SavedModel) or "hf"
    loaded: list[str]  # TF1 names of the model variables that were set
    skipped: list[str]  # checkpoint entries not used (slots, global_step, other heads)
    missing_allowed: list[str]  # head variables left as initialised, by request
    notes: list[str] = dataclasses.field(default_factory=list)  # e.g. where the folder's config differs
    # With `other_heads_start_fresh`: the head variables of another shape than the model's (name, the model's
    # shape, the checkpoint's), the whole head then left as initialised (its names are in missing_allowed too).
    other_head: list[tuple[str, tuple, tuple]] = dataclasses.field(default_factory=list)

    def summary(self) -> str:
        text = (f"loaded {len(self.loaded)} variables from {self.path} ({self.format} format); "
                f"skipped {len(self.skipped)} checkpoint entries")
        if self.missing_allowed:
            text += f"; left {len(self.missing_allowed)} head variables unloaded: {', '.join(self.missing_allowed)}"
        for note in self.notes:
            text += f"; note: {note}"
        return text


def resolve_checkpoint(path: str) -> str:
    """A checkpoint prefix from a prefix, a directory with a `checkpoint` state
    file, or a TF-Hub module directory (`variables/variables`); one that does not read back
    completely (a truncated or missing data file, a garbage index) is a `CheckpointError`
    naming the file."""
    prefix = find_checkpoint(path)
    damage = files.checkpoint_damage(prefix)
    if damage is not None:
        raise CheckpointError(f"checkpoint {path} is damaged: {damage}")
    return prefix


# Where a checkpoint keeps its training step: ours (tf.train.Checkpoint's root), a TF1 Estimator's.
STEP_VARIABLES = ("global_step" + _VALUE_SUFFIX, "global_step")


def checkpoint_step(path: str) -> int:
    """The training step of the weights at ``path``: what its name ``model.ckpt-<step>`` says, else its
    own ``global_step`` (``model.ckpt-best``, an --init_checkpoint under another name); 0 only when it
    has none (a pretrained release, a Hugging Face folder), as the original's Estimator reported."""
    step = files.step_of(path)
    if step is not None:
        return step
    if hf.is_hf_checkpoint(path):
        return 0
    # Only global_step is read: checking every tensor (resolve_checkpoint) would read the whole checkpoint
    # once more, and the load that follows reads the weights and reports their damage anyway.
    prefix = find_checkpoint(path)
    try:
        reader = tf.train.load_checkpoint(prefix)
        for name in STEP_VARIABLES:
            if reader.has_tensor(name):
                return int(reader.get_tensor(name))
    except (tf.errors.OpError, RuntimeError):  # the reader leaves some errors (a bad checksum) RuntimeError
        resolve_checkpoint(path)  # a damaged index or step: the one line naming the file
        raise
    return 0


def find_checkpoint(path: str) -> str:
    """The checkpoint prefix `path` names (see `resolve_checkpoint`), without reading it: cheap enough to
    check a flag before any work; a missing one is a `CheckpointError`."""
    if tf.io.gfile.isdir(path):
        latest = files.latest_checkpoint(path)  # the state file's, else the newest on disk
        if latest:
            return latest
        hub_variables = os.path.join(path, "variables", "variables")
        if tf.io.gfile.exists(hub_variables + ".index"):
            return hub_variables
        raise CheckpointError(f"no checkpoint found in directory {path} (no 'checkpoint' state file "
                              f"and no variables/variables.index)")
    if tf.io.gfile.exists(path + ".index"):
        return path
    # One of the prefix's files named instead of the prefix (model.ckpt-best.index, ….data-00000-of-00001).
    named_file = re.fullmatch(r"(.+)\.(index|data-\d+-of-\d+)", path)
    if named_file and tf.io.gfile.exists(named_file.group(1) + ".index"):
        raise CheckpointError(f"{path} is one of a checkpoint's files: give its prefix {named_file.group(1)}")
    raise CheckpointError(f"checkpoint not found: {path} (expected {path}.index, or a directory)")


def checkpoint_format(keys) -> str:
    keys = list(keys)
    if any(k.startswith(EXPORT_VARIABLES) for k in keys):
        return "export"
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


def _export_sources(model_names: dict[str, tf.Variable], keys: set[str],
                    init_from_group0: bool) -> dict[str, Optional[str]]:
    """Maps TF1 names to keys of our export, which tracks them by TF1 name (object-graph
    escaping: "/" is ".S", "." is "..")."""
    by_name = {name: key for key, name in _export_names(keys).items()}
    return {name: by_name.get(name_table.group0_source_name(name) if init_from_group0 else name)
            for name in model_names}


def _export_names(keys) -> dict[str, str]:
    """Key of our export -> the TF1 name it holds."""
    names = {}
    for key in keys:
        if key.startswith(EXPORT_VARIABLES) and key.endswith(_VALUE_SUFFIX):
            escaped = key[len(EXPORT_VARIABLES): -len(_VALUE_SUFFIX)]
            names[key] = re.sub(r"\.(.)", lambda m: "/" if m.group(1) == "S" else m.group(1), escaped)
    return names


def _tf2_sources(model, model_names: dict[str, tf.Variable], keys: set[str],
                 init_from_group0: bool) -> dict[str, Optional[str]]:
    """Maps TF1 names to keys of one of our checkpoints, wherever the model sat in it
    (a pretrainer's checkpoint read into an encoder, or the reverse). With `init_from_group0`
    a variable is read from where the checkpoint keeps its group_0 counterpart (which the
    model has too, at the same object path as in a one-group model)."""
    encoder = model.encoder if hasattr(model, "encoder") else model
    encoder_paths = object_paths(encoder)
    model_paths = object_paths(model)
    encoder_prefix = _tf2_encoder_prefix(keys)
    root_prefix = encoder_prefix[: -len("encoder/")] if encoder_prefix.endswith("encoder/") else None
    sources = {}
    for name, var in model_names.items():
        if name.startswith("bert/"):
            if init_from_group0:
                var = model_names.get(name_table.group0_source_name(name), var)
            key = encoder_prefix + encoder_paths[id(var)] + _VALUE_SUFFIX
        elif root_prefix is not None:
            key = root_prefix + model_paths[id(var)] + _VALUE_SUFFIX
        else:
            key = None
        sources[name] = key if key in keys else None
    return sources


def _tf2_encoder_prefix(keys) -> str:
    """Where the encoder sits in one of our checkpoints ("model/" or "model/encoder/")."""
    word_key = "embeddings/word_embeddings" + _VALUE_SUFFIX
    encoder_prefixes = sorted((k[: -len(word_key)] for k in keys if k.endswith(word_key)), key=len)
    if not encoder_prefixes:
        raise CheckpointError("checkpoint has no ALBERT encoder (no embeddings/word_embeddings)")
    return encoder_prefixes[0]


# AlbertModel.groups[g][i] (a transformer block) as tf.train.Checkpoint names it below the encoder.
_TF2_BLOCKS = "groups/"
_TF2_SLOT = "/.OPTIMIZER_SLOT/"


def _encoder_layer_entries(fmt: str, keys) -> list[str]:
    """The checkpoint entries that hold transformer-block weights (optimizer slots aside)."""
    if fmt == "tf1":
        return [k for k in keys if name_table.is_encoder_layer_name(_strip_hub(k))]
    if fmt == "export":
        return [k for k, name in _export_names(keys).items() if name_table.is_encoder_layer_name(name)]
    blocks = _tf2_encoder_prefix(keys) + _TF2_BLOCKS
    return [k for k in keys if k.startswith(blocks) and k.endswith(_VALUE_SUFFIX) and _TF2_SLOT not in k]


def _refuse_unused_layers(where: str, unused: list[str]) -> None:
    """Transformer-block weights the model has no place for would be lost (a config with fewer groups or
    inner groups than the checkpoint): refused, where heads, slots and global_step are skipped."""
    if unused:
        shown = ", ".join(sorted(unused)[:3]) + (", ..." if len(unused) > 3 else "")
        raise CheckpointError(f"{where} holds {len(unused)} encoder-layer weights the model does not use "
                              f"({shown}); check config fields num_hidden_groups / inner_group_num, which give "
                              f"the model fewer groups or inner groups than the checkpoint")


def _fit(model_names: dict[str, tf.Variable], sources: dict[str, Optional[str]], shapes: dict[str, tuple],
         may_be_missing) -> tuple[list[tuple[str, tuple, Optional[tuple]]], list[str]]:
    """(variables that are missing or mis-shaped: name, expected, found; variables
    left as initialised because `may_be_missing(name)`)."""
    problems, missing_allowed = [], []
    for name, var in model_names.items():
        source = sources[name]
        expected = tuple(var.shape.as_list())
        if source is None:
            if may_be_missing(name):
                missing_allowed.append(name)
                continue
            problems.append((name, expected, None))
        elif tuple(shapes[source]) != expected:
            problems.append((name, expected, tuple(shapes[source])))
    return problems, sorted(missing_allowed)


def _other_head(problems: list[tuple[str, tuple, Optional[tuple]]], heads_may_differ: bool, is_head
                ) -> tuple[list[tuple[str, tuple, Optional[tuple]]], list[tuple[str, tuple, tuple]]]:
    """`_fit`'s problems split into (those still refused, head variables of another shape) when
    ``heads_may_differ``: fine-tuning from another task's fine-tuned model (MNLI's 3 labels for MRPC's 2)."""
    if not heads_may_differ:
        return problems, []
    other = [(name, expected, found) for name, expected, found in problems if found is not None and is_head(name)]
    return [p for p in problems if p[0] not in {name for name, _, _ in other}], other


def _head_starts_fresh(model_names: dict[str, tf.Variable], sources: dict[str, Optional[str]], missing_allowed:
                       list[str], is_head) -> list[str]:
    """The whole head left as initialised (a head of another shape is another task's): its variables
    no longer have a source, and are added to ``missing_allowed`` (returned)."""
    for name in model_names:
        if is_head(name):
            sources[name] = None
    return sorted(set(missing_allowed) | {name for name in model_names if is_head(name)})


def _assign(model_names: dict[str, tf.Variable], sources: dict[str, Optional[str]], read) -> None:
    for name, var in model_names.items():
        source = sources[name]
        if source is not None:
            var.assign(tf.cast(read(source), var.dtype))


def _plan(model, path: str, allow_missing_heads: bool, init_from_group0: bool, verify: bool = True,
          other_heads_start_fresh: bool = False, converted_model: str | None = None):
    """Where each model variable comes from in the checkpoint at ``path`` (not Hugging Face's), after
    refusing a checkpoint that does not fit: (prefix, reader, format, keys, TF1 name table, sources,
    head variables left as initialised, head variables of another shape). ``verify``: first read every
    tensor back (`resolve_checkpoint`)."""
    prefix = resolve_checkpoint(path) if verify else find_checkpoint(path)
    reader = tf.train.load_checkpoint(prefix)
    shapes = reader.get_variable_to_shape_map()
    keys = set(shapes)
    fmt = checkpoint_format(keys)
    _ensure_built(model)
    model_names = kinds.tf1_name_map(model)
    if fmt == "tf1":
        sources = _tf1_sources(model_names, keys, init_from_group0)
    elif fmt == "export":
        sources = _export_sources(model_names, keys, init_from_group0)
    else:
        sources = _tf2_sources(model, model_names, keys, init_from_group0)
    is_head = lambda name: not name.startswith("bert/")  # noqa: E731
    problems, missing_allowed = _fit(model_names, sources, shapes, lambda name: allow_missing_heads and is_head(name))
    problems, other_head = _other_head(problems, other_heads_start_fresh, is_head)
    if other_head:
        missing_allowed = _head_starts_fresh(model_names, sources, missing_allowed, is_head)
    if problems:
        lines = [f"checkpoint {prefix} does not fit the model ({len(problems)} variables):"]
        for name, expected, found in problems:
            found_text = "missing" if found is None else f"found shape {list(found)}"
            lines.append(f"  {name}: expected shape {list(expected)}, {found_text}; "
                         f"{name_table.mismatch_hint(name, expected, found, prefix, converted_model)}")
        raise CheckpointError("\n".join(lines))
    used = {source for source in sources.values() if source is not None}
    _refuse_unused_layers(f"checkpoint {prefix}", [k for k in _encoder_layer_entries(fmt, keys) if k not in used])
    return prefix, reader, fmt, keys, model_names, sources, missing_allowed, other_head


def check_fits(model, path: str, *, other_heads_allowed: bool = False) -> list[tuple[str, tuple, tuple]]:
    """Raises the `CheckpointError` `load_checkpoint(model, path)` would (a missing or mis-shaped
    variable, with the config field to check; encoder layers the model has no place for), reading only
    the checkpoint's index: the model is left as it is. Its callers have checked that the checkpoint reads
    back; reading every tensor again here cost a whole extra read of it per resume and per evaluation.
    ``other_heads_allowed``: head variables of another shape (another task's number of labels) are returned
    (name, ours, theirs) rather than raised, for a caller to say what they mean for its run."""
    return _plan(model, path, allow_missing_heads=False, init_from_group0=False, verify=False,
                 other_heads_start_fresh=other_heads_allowed)[-1]


def load_checkpoint(model, path: str, *, allow_missing_heads: bool = False,
                    init_from_group0: bool = False, other_heads_start_fresh: bool = False,
                    converted_model: str | None = None) -> LoadReport:
    """Loads a Google TF1 checkpoint (prefix or directory, with or without the
    TF-Hub `module/` prefix), one of ours, our hub-style export's folder
    (`albert_tf.export`), or a Hugging Face folder (config.json +
    model.safetensors) into an AlbertModel, AlbertPretrainer or task model with an
    `.encoder`.

    Raises CheckpointError listing every missing or mis-shaped variable (name,
    expected shape, found shape, the config field that likely differs). Head
    variables (anything outside `bert/`) may be missing only with
    `allow_missing_heads=True` (TF-Hub modules have no sentence-order head; some
    Hugging Face classes have no pooler either). With `other_heads_start_fresh` a head of another shape
    (another task's number of labels) is left as initialised too, listed in the report's `other_head`:
    fine-tuning from another task's fine-tuned model, never reading back a run's own checkpoints.
    ``converted_model``: the model kind a conversion reads into (no task runs): the errors' hints for its head
    name it and the converter's flags (`names.mismatch_hint`); default: a task's words (train first, ...).
    """
    if hf.is_hf_checkpoint(path):
        return load_hf_checkpoint(model, hf.read_checkpoint(path), allow_missing_heads=allow_missing_heads,
                                  init_from_group0=init_from_group0, other_heads_start_fresh=other_heads_start_fresh,
                                  converted_model=converted_model)
    prefix, reader, fmt, keys, model_names, sources, missing_allowed, other_head = _plan(
        model, path, allow_missing_heads, init_from_group0, other_heads_start_fresh=other_heads_start_fresh,
        converted_model=converted_model)
    _assign(model_names, sources, reader.get_tensor)
    used = {source for source in sources.values() if source is not None}
    skipped = sorted(k for k in keys if k not in used and k != "_CHECKPOINTABLE_OBJECT_GRAPH")
    loaded = sorted(n for n in model_names if sources[n] is not None)
    return LoadReport(prefix, fmt, loaded, skipped, missing_allowed, other_head=other_head)


# Config fields the weights' shapes do not show; a difference is reported, not refused
# (ALBERT's shared layers run at any depth, and Google's v1 configs say "gelu" where
# Hugging Face's say the erf form).
_UNSEEN_FIELDS = ("num_hidden_layers", "num_attention_heads", "hidden_act")


def _config_notes(model_config, checkpoint: hf.HFCheckpoint) -> list[str]:
    from albert_tf.config import AlbertConfig, ConfigError

    try:
        theirs = AlbertConfig.from_hf_dict(checkpoint.config)
    except ConfigError as err:
        raise CheckpointError(f"{checkpoint.config_path}: {err}") from None
    return [f"{checkpoint.config_path} has {field}={getattr(theirs, field)!r}, the model "
            f"{getattr(model_config, field)!r}" for field in _UNSEEN_FIELDS
            if getattr(theirs, field) != getattr(model_config, field)]


def _hf_problem(checkpoint: hf.HFCheckpoint, name: str, source: Optional[str], expected: tuple,
                found: Optional[tuple], converted_model: str | None = None) -> str:
    """One line naming the file and the Hugging Face tensor, shapes in its layout."""
    def hf_layout(shape, transposed):
        return list(reversed(shape)) if transposed else list(shape)

    if found is not None:
        hf_name, file, transposed = checkpoint.origin[source]
        hint = name_table.mismatch_hint(name, expected, found, converted_model=converted_model)
        return (f"{file}: tensor {hf_name} has shape {hf_layout(found, transposed)}, expected "
                f"{hf_layout(expected, transposed)}; {hint}")
    mapped = name_table.hf_name(name)
    if mapped is None:
        return f"{checkpoint.weights_path}: Hugging Face has no counterpart of {name}, which the model needs"
    hf_name, transposed = mapped
    if name_table.is_encoder_name(name) and any(o[0].startswith(name_table.HF_BASE_PREFIX)
                                                for o in checkpoint.origin.values()):
        hf_name = name_table.HF_BASE_PREFIX + hf_name
    if name_table.is_encoder_name(name) and not name.startswith(name_table.HF_POOLER_PREFIX):
        hint = name_table.mismatch_hint(name, expected, None)
    elif not name.startswith(("bert/", *name_table.PRETRAINING_HEAD_PREFIXES)):
        # A fine-tuning task's head: the same hint as a TF1 checkpoint without one. Only the converter and
        # export_model have --allow_missing_heads; the fine-tuning drivers, which load these to predict, do not.
        hint = name_table.mismatch_hint(name, expected, None, converted_model=converted_model)
    else:
        hint = (f"{checkpoint.architecture or 'this model'} has no such head; allow missing heads "
                f"(--allow_missing_heads) to start it fresh")
    return (f"{checkpoint.weights_path}: no tensor {hf_name} (expected shape {hf_layout(expected, transposed)}); "
            f"{hint}")


def load_hf_checkpoint(model, checkpoint: hf.HFCheckpoint, *, allow_missing_heads: bool = False,
                       init_from_group0: bool = False, other_heads_start_fresh: bool = False,
                       converted_model: str | None = None) -> LoadReport:
    """`load_checkpoint` for a Hugging Face folder already read with `hf.read_checkpoint`.
    The pooler may be missing when the folder's class saves none (transformers'
    masked-LM and question-answering classes), and with `allow_missing_heads`."""
    hf.refuse_another_layer_order(model.config, checkpoint.config_path)
    _ensure_built(model)
    saves_pooler = name_table.ARCHITECTURES.get(checkpoint.architecture, name_table.ARCHITECTURES["AlbertModel"]).pooler
    notes = _config_notes(model.config, checkpoint)
    model_names = kinds.tf1_name_map(model)
    sources = {}
    for name in model_names:
        source = name_table.group0_source_name(name) if init_from_group0 else name
        sources[name] = source if source in checkpoint.tensors else None
    shapes = {name: value.shape for name, value in checkpoint.tensors.items()}
    is_head = lambda name: not name_table.is_encoder_name(name)  # noqa: E731
    problems, missing_allowed = _fit(
        model_names, sources, shapes,
        lambda name: (name.startswith(name_table.HF_POOLER_PREFIX) and (allow_missing_heads or not saves_pooler))
        or (allow_missing_heads and is_head(name)))
    problems, other_head = _other_head(problems, other_heads_start_fresh, is_head)
    if other_head:
        missing_allowed = _head_starts_fresh(model_names, sources, missing_allowed, is_head)
    if problems:
        raise CheckpointError("\n".join(_hf_problem(checkpoint, name, sources[name], expected, found, converted_model)
                                        for name, expected, found in problems))
    used = {source for source in sources.values() if source is not None}
    _refuse_unused_layers(checkpoint.weights_path, [checkpoint.origin[k][0] for k in checkpoint.tensors
                                                    if k not in used and name_table.is_encoder_layer_name(k)])
    _assign(model_names, sources, checkpoint.tensors.__getitem__)
    skipped = sorted([checkpoint.origin[k][0] for k in checkpoint.tensors if k not in used] + checkpoint.unused)
    loaded = sorted(n for n in model_names if sources[n] is not None)
    return LoadReport(checkpoint.folder, "hf", loaded, skipped, missing_allowed, notes, other_head)


def fine_tuning_init(init_checkpoint: str | None, flag: str = "--init_checkpoint"):
    """A Trainer `init_fn` for fine-tuning drivers: loads `--init_checkpoint` (or the weights of ``flag``, the
    flag that gave them: ``--albert_hub_module_handle``) into the model, its task head
    starting fresh when the checkpoint has none (a pretrained one) or one of another number of labels (the
    paper fine-tunes RTE, MRPC and STS-B from an MNLI model), which is one warning line; logs what was
    loaded; warns when there is none. Only here: a run's own checkpoints must hold this task's head."""
    from absl import logging

    def init_fn(model) -> None:
        if init_checkpoint:
            report = load_checkpoint(model, init_checkpoint, allow_missing_heads=True, other_heads_start_fresh=True)
            if report.other_head:
                _, expected, found = report.other_head[0]  # a projection's first dimension: its outputs
                shapes = ", ".join(f"{name} {list(theirs)} for {list(ours)}"
                                   for name, ours, theirs in report.other_head)
                logging.warning("%s %s: the checkpoint's task head has %d labels, this task %d (%s): "
                                "it starts fresh; the encoder is loaded", flag, report.path, found[0], expected[0],
                                shapes)
            logging.info("%s: %s", flag.lstrip("-"), report.summary())
        else:
            logging.warning("No --init_checkpoint: fine-tuning from random weights.")

    return init_fn
