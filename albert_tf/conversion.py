"""What convert_checkpoint.py does: find the input's format and model kind, build that
model, load the input into it and write it in the target format.

It sits above the tasks: importing their model modules registers their kinds
(`albert_tf.weights.kinds`), and everything below walks the registry. Going through a
model checks every tensor against the config before anything is written, and is
exact: values pass through float32 variables unchanged.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import posixpath
import uuid
from typing import Callable, Optional

import tensorflow as tf
from absl import logging

# Imported for their model kinds (each module registers its own).
import albert_tf.glue.heads  # noqa: F401
import albert_tf.race.model  # noqa: F401
import albert_tf.squad.heads  # noqa: F401
from albert_tf.fileio import TMP_MARK, absolute, atomic_write_text, read_text
from albert_tf.glue.custom import REGRESSION_MARK
from albert_tf.run_lock import output_dir_lock
from albert_tf.training import faults
from albert_tf.weights import files, hf, kinds
from albert_tf.weights import names as name_table
from albert_tf.weights.errors import CheckpointError
from albert_tf.weights.loading import (LoadReport, checkpoint_format, load_checkpoint, load_hf_checkpoint,
                                      resolve_checkpoint)
from albert_tf.weights.saving import (model_checkpoint_writer, publish_checkpoint, save_hf_checkpoint,
                                      save_model_checkpoint, save_tf1_checkpoint, tf1_checkpoint_writer)

DIRECTIONS = {
    "tf1_to_tf2": ("tf1", "tf2"), "tf2_to_tf1": ("tf2", "tf1"),
    "hf_to_tf1": ("hf", "tf1"), "tf1_to_hf": ("tf1", "hf"),
    "hf_to_tf2": ("hf", "tf2"), "tf2_to_hf": ("tf2", "hf"),
}
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
CONFIG_BESIDE_OUTPUT = "albert_config.json"


@dataclasses.dataclass
class Conversion:
    kind: str
    report: LoadReport
    written: str  # the prefix or folder written
    config_written: Optional[str]  # albert_config.json written beside a TF output
    already_there: bool = False  # an earlier, interrupted run of this conversion had written it: nothing replaced


@dataclasses.dataclass
class _Source:
    path: str
    format: str
    shapes: dict[str, tuple]  # TF1 names (tf1, hf) or object-graph keys (tf2)
    hf_checkpoint: Optional[hf.HFCheckpoint] = None

    def head_shape(self, tf1_name: str, tf2_path: str) -> Optional[tuple]:
        """kinds.CheckpointHeads: a head tensor's shape, None if absent."""
        if self.format != "tf2":
            return self.shapes.get(tf1_name)
        return next((s for k, s in self.shapes.items() if k.endswith(tf2_path + _VALUE_SUFFIX)), None)


def model_kinds() -> tuple[str, ...]:
    """--converted_model's values: auto and every registered kind."""
    return (kinds.AUTO,) + tuple(kind.name for kind in kinds.kinds())


def model_kinds_help() -> str:
    """--converted_model's help, from the registry."""
    named = [kind.name for kind in kinds.kinds() if kind.tf1_marker is None and kind is not kinds.ENCODER]
    auto = "what the input holds" + (f"; {', '.join(named)} must be named for a TF1 input" if named else "")
    described = [f"{kind.name} ({kind.description}{'' if kind.hf_architecture else '; TF formats only'})"
                 for kind in kinds.kinds()]
    return f"What to convert: {kinds.AUTO} ({auto}), " + ", ".join(described) + "."


def _read_source(path: str) -> _Source:
    if hf.is_hf_checkpoint(path):
        checkpoint = hf.read_checkpoint(path)
        return _Source(path, "hf", {k: v.shape for k, v in checkpoint.tensors.items()}, checkpoint)
    prefix = resolve_checkpoint(path)
    shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
    fmt = checkpoint_format(shapes)
    if fmt == "tf1":
        shapes = {k[len(name_table.HUB_PREFIX):] if k.startswith(name_table.HUB_PREFIX) else k: v
                  for k, v in shapes.items()}
    return _Source(path, fmt, {k: tuple(v) for k, v in shapes.items()})


def _detect_kind(source: _Source) -> kinds.ModelKind:
    if source.format == "hf" and source.hf_checkpoint.architecture:
        architecture = source.hf_checkpoint.architecture
        found = [kind for kind in kinds.kinds() if architecture in (kind.hf_architecture, *kind.hf_also_reads)]
        if not found:
            raise CheckpointError(f"{source.hf_checkpoint.config_path}: {architecture} has no albert_tf "
                                  f"counterpart; pass --converted_model=encoder to convert its encoder")
        return found[0]  # kinds.register keeps Hugging Face classes to one kind each
    if source.format == "tf2":
        found = [kind for kind in kinds.kinds()
                 if kind.tf2_marker and any(kind.tf2_marker in key for key in source.shapes)]
    else:
        found = [kind for kind in kinds.kinds() if kind.tf1_marker and kind.tf1_marker in source.shapes]
    # Fine-tuning starts from a pretraining checkpoint, whose heads a task's checkpoint
    # may still hold: a task's marker outweighs the pretrainer's.
    tasks = [kind for kind in found if kind is not kinds.PRETRAINER]
    if len(tasks) > 1:
        raise CheckpointError(f"{source.path} holds the heads of several model kinds "
                              f"({', '.join(kind.name for kind in tasks)}); name one with --converted_model")
    return (tasks or found or [kinds.ENCODER])[0]


def _config(config_file: Optional[str], source: _Source):
    from albert_tf.config import AlbertConfig, ConfigError

    if config_file:
        return AlbertConfig.from_json_file(config_file)
    if source.format != "hf":
        raise CheckpointError(f"--albert_config_file is required for a {source.format} checkpoint (only a "
                              f"Hugging Face folder brings its config)")
    try:
        return AlbertConfig.from_hf_dict(source.hf_checkpoint.config)
    except ConfigError as err:
        raise CheckpointError(f"{source.hf_checkpoint.config_path}: {err}") from None


@dataclasses.dataclass
class Opened:
    """A checkpoint read into the model of its kind."""
    kind: kinds.ModelKind
    model: object  # a built Keras model of `kind`
    report: LoadReport
    config: object  # the AlbertConfig it was built from
    format: str  # "tf1", "tf2", "export" or "hf"


def open_checkpoint(path: str, *, kind: str = kinds.AUTO, config_file: Optional[str] = None,
                    allow_missing_heads: bool = False, init_from_group0: bool = False) -> Opened:
    """Reads the checkpoint at `path` (any format `load_checkpoint` reads) into a new model
    of its kind (detected, or named by `kind`), built from `config_file` or, for a Hugging
    Face folder, from its config.json."""
    if kind not in model_kinds():
        raise CheckpointError(f"unknown model kind {kind}; expected one of {', '.join(model_kinds())}")
    return _open(_read_source(path), kind, config_file, allow_missing_heads, init_from_group0)


def _open(source: _Source, kind: str, config_file: Optional[str], allow_missing_heads: bool,
          init_from_group0: bool) -> Opened:
    config = _config(config_file, source)
    kind = _detect_kind(source) if kind == kinds.AUTO else kinds.get(kind)
    model = kind.build(config, **(kind.build_options(source) if kind.build_options else {}))
    # (a head's hints in the kind's words: no task runs here, and convert_checkpoint.py has no --do_train)
    if source.hf_checkpoint is not None:
        report = load_hf_checkpoint(model, source.hf_checkpoint, allow_missing_heads=allow_missing_heads,
                                    init_from_group0=init_from_group0, converted_model=kind.name)
    else:
        report = load_checkpoint(model, source.path, allow_missing_heads=allow_missing_heads,
                                 init_from_group0=init_from_group0, converted_model=kind.name)
    return Opened(kind, model, report, config, source.format)


def convert(path: str, output: str, direction: str, *, kind: str = "auto", config_file: Optional[str] = None,
            spm_model_file: Optional[str] = None, do_lower_case: bool = True,
            allow_missing_heads: bool = False, init_from_group0: bool = False) -> Conversion:
    """Converts the checkpoint at `path` to `output` (a prefix, or a folder for
    `*_to_hf`). An HF input without `config_file` brings its config.json, which is
    then written beside a TF output as albert_config.json."""
    if direction not in DIRECTIONS:
        raise CheckpointError(f"unknown direction {direction}; expected one of {', '.join(DIRECTIONS)}")
    if kind not in model_kinds():
        raise CheckpointError(f"unknown model kind {kind}; expected one of {', '.join(model_kinds())}")
    source_format, target_format = DIRECTIONS[direction]
    if spm_model_file and target_format != "hf":
        raise CheckpointError("--spm_model_file is written only into a Hugging Face folder (*_to_hf)")
    if target_format != "hf":
        _refuse_a_folder_as_prefix(output)
    source = _read_source(path)
    if source.format != source_format:
        raise CheckpointError(f"--direction={direction} expects a {source_format} checkpoint, but {path} is "
                              f"in {source.format} format")
    opened = _open(source, kind, config_file, allow_missing_heads, init_from_group0)
    kind, model, report, config = opened.kind, opened.model, opened.report, opened.config
    if target_format == "hf" and kind.hf_architecture is None:
        raise CheckpointError(f"the {kind.description or kind.name} has no counterpart in transformers; "
                              f"--converted_model=encoder converts the encoder alone")
    # A remote prefix (gs://...) keeps its scheme: os.path.abspath made it a local path, and the lock and the
    # albert_config.json went to a folder "gs:/..." it created in the current folder.
    folder = output if target_format == "hf" else os.path.dirname(absolute(output))
    config_written = None
    if target_format != "hf" and not config_file:
        config_written = os.path.join(folder, CONFIG_BESIDE_OUTPUT)
    with output_dir_lock(folder):  # not into a folder a run is writing; created if need be
        # This is the lock a run's chief holds when it clears a crashed save's temporaries: what a killed
        # conversion or run left here is no one's work in progress, only disk space.
        files.remove_stale_temporaries(folder)
        config_text = config.to_json_string() if config_written else None
        if config_written and read_text(config_written) == config_text:
            config_written = None  # the same config is there already (another checkpoint of this model)
        if target_format == "hf":
            _name_labels_from_the_run(model, source)  # before the comparison below: part of what is written
            write_hf = functools.partial(save_hf_checkpoint, model, architecture=kind.hf_architecture,
                                         spm_model_file=spm_model_file, do_lower_case=do_lower_case)
            if _refuse_to_overwrite(output, target_format, config_written, lambda: _hf_folder_holds(output, write_hf)):
                return Conversion(kind.name, report, output, None, already_there=True)
            written = write_hf(output)
        else:
            writer = (tf1_checkpoint_writer if target_format == "tf1" else model_checkpoint_writer)(model)
            if _refuse_to_overwrite(output, target_format, config_written,
                                    lambda: files.holds_what_write_writes(writer, output)):
                # An earlier run of this conversion, stopped (Ctrl-C) after its files were in place: it is
                # finished as that run would have (its config, its state file entry), nothing replaced.
                if config_written:
                    atomic_write_text(config_written, config_text)
                if absolute(output) not in files.all_checkpoints(folder):
                    publish_checkpoint(output)
                return Conversion(kind.name, report, output, config_written, already_there=True)
            # The config is in place before the checkpoint: a kill in between leaves a config the rerun
            # accepts (it is the same); the other way round, a checkpoint whose config (for an HF input,
            # nowhere else) is lost, and a rerun refused by it.
            if config_written:
                atomic_write_text(config_written, config_text)
            try:
                written = (save_tf1_checkpoint if target_format == "tf1" else save_model_checkpoint)(model, output)
            except (OSError, tf.errors.OpError) as e:
                _raise_if_disk_full(e, output)
                raise
    return Conversion(kind.name, report, written, config_written)


def _name_labels_from_the_run(model, source: _Source) -> None:
    """A classifier whose config names no labels, fine-tuned by a ``--task_name=custom`` run: that run's
    ``labels.txt`` beside the checkpoint names them, so transformers' ``id2label`` gets ``neg``/``pos``, not
    ``LABEL_0``/``LABEL_1`` (the drivers read the same file beside ``--init_checkpoint``)."""
    num_labels = getattr(model, "num_labels", None)
    if (not num_labels or getattr(model, "regression", False) or model.config.extra.get("id2label")
            or source.format == "hf"):
        return
    folder = source.path if tf.io.gfile.isdir(source.path) else os.path.dirname(source.path)
    path = os.path.join(folder, files.LABELS_FILE)
    try:
        text = read_text(path)
    except UnicodeDecodeError:
        return  # not a file of ours
    except (OSError, tf.errors.OpError) as e:  # the names are a nicety: the conversion goes on without them
        logging.warning("%s could not be read (%s): the Hugging Face config names the labels LABEL_0, ...",
                        path, getattr(e, "strerror", None) or e)
        return
    labels = [line for line in (text or "").splitlines() if line]
    if len(labels) == num_labels and REGRESSION_MARK not in labels:
        model.config.extra["id2label"] = {str(i): label for i, label in enumerate(labels)}


def _refuse_a_folder_as_prefix(output: str) -> None:
    """A TF checkpoint is written as files *beside* its prefix: a folder given as the prefix would put
    DIR.index and a `checkpoint` state file in DIR's parent, a folder the user did not name."""
    if output.endswith(("/", os.sep)) or tf.io.gfile.isdir(output):
        example = posixpath.join(output.rstrip("/" + os.sep) or output, "model.ckpt")
        raise CheckpointError(f"--converted_checkpoint={output} is a folder; a TF output is a checkpoint prefix "
                              f"such as {example}")


def _tf_checkpoint_files(output: str) -> list[str]:
    """The files of a TF checkpoint at the prefix ``output`` (what `_refuse_to_overwrite` refuses)."""
    return [output + ".index"] + files.files_extending(output, ".data-*")


def _raise_if_disk_full(err: BaseException, output: str) -> None:
    """A full disk (a quota, a file size limit) while writing the checkpoint at ``output`` is one line naming
    it, with nothing of it left behind; other errors return, to be raised as they are.
    TensorFlow's own error (SaveV2) names a temporary, which `files.write_prefix_atomically` has removed. The
    last write, the folder's small `checkpoint` state file, fails after the data and index were renamed into
    place ("[Errno 28] No space left on device: '<dir>/checkpoint'"), and a rerun would be refused by them:
    they are this run's own (`_refuse_to_overwrite` found none, under the folder's lock), so they are removed,
    the index first (it makes them loadable). The state file is replaced atomically: it is as it was."""
    reason = faults.disk_full_reason(err)
    if reason is None:
        return
    for path in _tf_checkpoint_files(output):
        if tf.io.gfile.exists(path):
            tf.io.gfile.remove(path)
    raise faults.DiskFullError(f"{reason} writing checkpoint {output}; nothing of it was kept; free space and "
                               f"rerun") from None


def _hf_folder_holds(output: str, write: Callable[[str], object]) -> bool:
    """Whether the Hugging Face files in ``output`` are, file for file and byte for byte, those ``write(folder)``
    writes: it writes into a temporary folder inside ``output`` (a killed check's is removed by the next run)."""
    tmp = os.path.join(output, f"converted{TMP_MARK}{uuid.uuid4().hex}")
    try:
        write(tmp)
        written = sorted(name.rstrip("/") for name in tf.io.gfile.listdir(tmp))
        there = sorted(os.path.basename(p) for p in hf.written_files(output) if tf.io.gfile.exists(p))
        return written == there and all(files.same_bytes(os.path.join(tmp, n), os.path.join(output, n))
                                        for n in written)
    finally:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.rmtree(tmp)


def _refuse_to_overwrite(output: str, target_format: str, config_path: Optional[str],
                         holds_this_conversion: Callable[[], bool]) -> bool:
    """A conversion writes only new files: an existing checkpoint, Hugging Face file or other config at
    the output is not this job's to replace (it may be the very checkpoint being converted). True when the
    output's files are there already, and are byte for byte what this conversion writes (``holds_this_conversion``):
    an earlier run of it, interrupted after putting them in place (Ctrl-C), whose rerun has nothing to replace."""
    if target_format == "hf":
        paths = hf.written_files(output)
    else:
        paths = _tf_checkpoint_files(output)
    existing = [p for p in paths if tf.io.gfile.exists(p)]
    other = [config_path] if config_path and tf.io.gfile.exists(config_path) else []  # another config
    if existing and not other and holds_this_conversion():
        return True
    existing += other
    if existing:
        raise CheckpointError(f"{', '.join(existing)} already exist(s): convert_checkpoint.py writes only new files "
                              f"and replaces none; pass another --converted_checkpoint, or move those away")
