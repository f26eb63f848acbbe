"""Hugging Face `transformers` checkpoints: a folder with `config.json` and
`model.safetensors` (or shards listed in `model.safetensors.index.json`).

Read and written with the `safetensors` package, without PyTorch. Only
safetensors weights are read: `pytorch_model.bin` is a Python pickle, which runs
code of the file's author while it loads (and needs PyTorch). Tensor names come
from the name table (`albert_tf.weights.names`); the config from
`AlbertConfig.from_hf_dict` / `to_hf_dict`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import posixpath
import re
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from albert_tf.weights import kinds
from albert_tf.weights import names as name_table
from albert_tf.weights.errors import CheckpointError

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
SPM_FILE = "spiece.model"  # the file name transformers' AlbertTokenizer reads
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"
# Weight files of other formats, named when a folder has no safetensors.
_PICKLES = ("pytorch_model.bin", "pytorch_model.bin.index.json")
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl")
_OTHER_FORMATS = ("tf_model.h5", "flax_model.msgpack")
# The metadata transformers checks before it loads a safetensors file.
_METADATA = {"format": "pt"}
# Google's ALBERT has no embedding-to-hidden projection when embedding_size == hidden_size;
# transformers always has one, so such a model is written (and accepted) as the identity.
MAPPING_PREFIX = "bert/encoder/embedding_hidden_mapping_in/"
PICKLE_REFUSAL = ("only safetensors weights are read: a .bin file is a Python pickle, which runs code of "
                  "whoever wrote it while it loads (and needs PyTorch); use the model's model.safetensors, "
                  "or save it with transformers' save_pretrained(..., safe_serialization=True)")


@dataclasses.dataclass
class HFCheckpoint:
    """An HF folder read into TF1 names and layouts (transposes undone)."""
    folder: str
    config: dict[str, Any]  # config.json as written
    tensors: dict[str, np.ndarray]  # TF1 name -> float32 value, TF1 layout
    origin: dict[str, tuple[str, str, bool]]  # TF1 name -> (HF name, file, HF tensor is the transpose)
    unused: list[str]  # HF tensors without a counterpart in our models
    weights_path: str  # model.safetensors, or the shard index

    @property
    def config_path(self) -> str:
        return posixpath.join(self.folder, CONFIG_FILE)

    @property
    def architecture(self) -> Optional[str]:
        return architecture_of(self.config)


def architecture_of(config: dict[str, Any]) -> Optional[str]:
    """The transformers class config.json names first; None when "architectures" is absent, null or []."""
    names = config.get("architectures") or [None]
    return names[0]


def _join(folder: str, name: str) -> str:
    return posixpath.join(folder, name) if "://" in folder else os.path.join(folder, name)


def written_files(folder: str) -> list[str]:
    """The paths ``save_hf_checkpoint`` may write in ``folder`` (the tokenizer's with a SentencePiece model)."""
    return [_join(folder, name) for name in (CONFIG_FILE, WEIGHTS_FILE, SPM_FILE, TOKENIZER_CONFIG_FILE)]


def is_hf_checkpoint(path: str) -> bool:
    """True for a folder that holds Hugging Face files rather than a TF checkpoint
    (and for weight files named directly: .safetensors, or a refused pickle)."""
    if path.endswith((".safetensors",) + _PICKLE_SUFFIXES):
        return True
    if not tf.io.gfile.isdir(path):
        return False
    if tf.io.gfile.exists(_join(path, "checkpoint")) or tf.io.gfile.exists(
            _join(path, posixpath.join("variables", "variables.index"))):
        return False
    markers = (CONFIG_FILE, WEIGHTS_FILE, INDEX_FILE) + _PICKLES + _OTHER_FORMATS
    return any(tf.io.gfile.exists(_join(path, name)) for name in markers)


def read_config(folder: str) -> dict[str, Any]:
    """config.json of an HF folder: a JSON object with model_type "albert"."""
    from albert_tf.config import HF_MODEL_TYPE

    path = _join(folder, CONFIG_FILE)
    if not tf.io.gfile.exists(path):
        raise CheckpointError(f"Hugging Face folder {folder} has no {CONFIG_FILE} (expected {CONFIG_FILE} "
                              f"beside {WEIGHTS_FILE})")
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            data = json.loads(f.read())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: expected a JSON object, got {type(data).__name__}")
    if data.get("model_type") != HF_MODEL_TYPE:
        raise CheckpointError(f"{path}: model_type is {data.get('model_type')!r}; only ALBERT "
                              f"(model_type {HF_MODEL_TYPE!r}) is read")
    return data


def _weight_files(folder: str) -> tuple[str, list[str]]:
    """(the path named in messages, the safetensors files to read)."""
    index = _join(folder, INDEX_FILE)
    if tf.io.gfile.exists(index):
        try:
            with tf.io.gfile.GFile(index, "r") as f:
                weight_map = json.loads(f.read())["weight_map"]
            shards = sorted(set(weight_map.values()))
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as err:
            raise CheckpointError(f"{index}: not a safetensors shard index (needs a 'weight_map' object; "
                                  f"{type(err).__name__}: {err})") from None
        files = [_join(folder, shard) for shard in shards]
        for path in files:
            if not tf.io.gfile.exists(path):
                raise CheckpointError(f"{index} lists {os.path.basename(path)}, which is missing")
        return index, files
    single = _join(folder, WEIGHTS_FILE)
    if tf.io.gfile.exists(single):
        return single, [single]
    for name in _PICKLES:
        if tf.io.gfile.exists(_join(folder, name)):
            raise CheckpointError(f"{_join(folder, name)}: {PICKLE_REFUSAL}")
    others = [name for name in _OTHER_FORMATS if tf.io.gfile.exists(_join(folder, name))]
    found = f" (found {', '.join(others)}, which is not read)" if others else ""
    raise CheckpointError(f"Hugging Face folder {folder} has no {WEIGHTS_FILE} and no {INDEX_FILE}{found}")


def _float32(path: str, name: str, info: dict[str, Any]) -> np.ndarray:
    dtype = {"F32": np.float32, "F16": np.float16, "F64": np.float64}.get(info["dtype"])
    if info["dtype"] == "BF16":  # numpy has no bfloat16; TensorFlow's ml_dtypes does
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    if dtype is None:
        raise CheckpointError(f"{path}: tensor {name} is {info['dtype']}, expected floating point "
                              f"(F32, F16, BF16 or F64)")
    return np.frombuffer(bytes(info["data"]), dtype=dtype).reshape(info["shape"]).astype(np.float32)


def _read_safetensors(path: str) -> list[tuple[str, dict[str, Any]]]:
    import safetensors

    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        # The package's own parser, which keeps the raw bytes: its NumPy loader has no bfloat16.
        return safetensors.deserialize(data)
    except Exception as err:  # safetensors raises its own SafetensorError, not a ValueError
        raise CheckpointError(f"{path}: not a readable safetensors file ({err})") from None


def read_checkpoint(path: str) -> HFCheckpoint:
    """Reads an HF folder (or the folder of a .safetensors file named directly)."""
    if path.endswith(_PICKLE_SUFFIXES):
        raise CheckpointError(f"{path}: {PICKLE_REFUSAL}")
    folder = os.path.dirname(path) if path.endswith(".safetensors") else path
    if not tf.io.gfile.isdir(folder):
        raise CheckpointError(f"Hugging Face folder not found: {folder}")
    config = read_config(folder)
    weights_path, files = _weight_files(folder)
    tensors, origin, unused = {}, {}, []
    aliases = []
    for file in files:
        for name, info in _read_safetensors(file):
            mapped = name_table.tf1_name_from_hf(name)
            if mapped is None:
                unused.append(name)
                continue
            bare = name[len(name_table.HF_BASE_PREFIX):] if name.startswith(name_table.HF_BASE_PREFIX) else name
            if bare in name_table.HF_TIED_ALIASES:
                aliases.append((name, file, info, mapped))  # used only if the tensor it repeats is absent
                continue
            tf1_name, transposed = mapped
            if tf1_name in origin:
                raise CheckpointError(f"{file}: tensors {origin[tf1_name][0]} and {name} are the same weight "
                                      f"({tf1_name}); keep one")
            value = _float32(file, name, info)
            tensors[tf1_name] = value.T if transposed else value
            origin[tf1_name] = (name, file, transposed)
    for name, file, info, (tf1_name, transposed) in aliases:
        if tf1_name in origin:
            unused.append(name)
        else:
            tensors[tf1_name] = _float32(file, name, info)
            origin[tf1_name] = (name, file, transposed)
    _drop_identity_mapping(config, tensors, origin, unused)
    return HFCheckpoint(folder, config, tensors, origin, sorted(unused), weights_path)


def _drop_identity_mapping(config: dict[str, Any], tensors: dict[str, np.ndarray],
                           origin: dict[str, tuple[str, str, bool]], unused: list[str]) -> None:
    """With embedding_size == hidden_size our model (like Google's) has no projection:
    an identity one is dropped (listed as unused), any other refused."""
    kernel, bias = tensors.get(MAPPING_PREFIX + "kernel"), tensors.get(MAPPING_PREFIX + "bias")
    square = kernel is not None and kernel.ndim == 2 and kernel.shape[0] == kernel.shape[1]
    if not square and ("embedding_size" not in config or config.get("embedding_size") != config.get("hidden_size")):
        return  # E != H (a square kernel means E == H whatever config.json says)
    if kernel is None and bias is None:
        return
    identity = (square and np.array_equal(kernel, np.eye(kernel.shape[0], dtype=np.float32))
                and (bias is None or not bias.any()))
    if not identity:
        name, file, _ = origin[MAPPING_PREFIX + ("kernel" if kernel is not None else "bias")]
        raise CheckpointError(f"{file}: tensor {name} is not the identity (weight I, bias 0), but embedding_size "
                              f"== hidden_size, where ALBERT has no embedding-to-hidden projection to load it into")
    for suffix in ("kernel", "bias"):
        if MAPPING_PREFIX + suffix in tensors:
            del tensors[MAPPING_PREFIX + suffix]
            unused.append(origin.pop(MAPPING_PREFIX + suffix)[0])


def refuse_another_layer_order(config, where: str) -> None:
    """transformers picks layer l's group as int(l / (L / G)), the original (and albert_tf) as
    int(l / L * G); for some (L, G), e.g. (18, 14), floating point makes them differ, and
    transformers would compute another model from the same weights."""
    from albert_tf.modeling.layers import group_of_layer

    layers, groups = config.num_hidden_layers, config.num_hidden_groups
    for layer in range(layers):
        ours, theirs = group_of_layer(layer, layers, groups), int(layer / (layers / groups))
        if ours != theirs:
            raise CheckpointError(f"{where}: with num_hidden_layers={layers} and num_hidden_groups={groups}, layer "
                                  f"{layer} uses group {ours} in ALBERT but group {theirs} in transformers, which "
                                  f"would compute another model; Hugging Face cannot hold this config")


# --- writing ------------------------------------------------------------------

def architecture_tensors(model, architecture: str) -> dict[str, np.ndarray]:
    """HF name -> float32 value of what `architecture`'s save_pretrained writes,
    from a built model of ours. CheckpointError if the model lacks the class's head
    or has weights transformers cannot hold."""
    if architecture not in name_table.ARCHITECTURES:
        raise CheckpointError(f"unknown Hugging Face architecture {architecture}; "
                              f"known: {', '.join(name_table.ARCHITECTURES)}")
    spec = name_table.ARCHITECTURES[architecture]
    if not model.built:
        model(model.dummy_inputs())
    tensors, foreign = {}, []
    for tf1_name, variable in kinds.tf1_name_map(model).items():
        mapped = name_table.hf_name(tf1_name)
        if mapped is None:
            foreign.append(tf1_name)
            continue
        bare, transposed = mapped
        value = np.asarray(variable.numpy(), dtype=np.float32)
        value = np.ascontiguousarray(value.T) if transposed else value
        if name_table.is_encoder_name(tf1_name):
            if spec.pooler or not tf1_name.startswith(name_table.HF_POOLER_PREFIX):
                tensors[(name_table.HF_BASE_PREFIX if spec.prefixed else "") + bare] = value
        elif bare.startswith(spec.heads):
            tensors[bare] = value
    if model.config.embedding_size == model.config.hidden_size:
        _add_identity_mapping(tensors, spec, model.config.hidden_size)
    if foreign:
        raise CheckpointError(f"{', '.join(sorted(foreign)[:4])}{' ...' if len(foreign) > 4 else ''}: "
                              f"no Hugging Face counterpart, so {architecture} cannot hold this model")
    for head in spec.heads:
        if not any(name.startswith(head) for name in tensors):
            raise CheckpointError(f"{architecture} needs the {head}* head, which the {type(model).__name__} "
                                  f"being converted does not have")
    if architecture == "AlbertForMultipleChoice" and tensors["classifier.weight"].shape[0] != 1:
        raise CheckpointError(f"AlbertForMultipleChoice scores each choice with one output, but the head has "
                              f"{tensors['classifier.weight'].shape[0]} (a GLUE classifier?)")
    return tensors


def _add_identity_mapping(tensors: dict[str, np.ndarray], spec: name_table.Architecture, width: int) -> None:
    """transformers always builds embedding_hidden_mapping_in and would initialise a
    missing one at random; our E == H model has none, i.e. the identity."""
    prefix = (name_table.HF_BASE_PREFIX if spec.prefixed else "") + "encoder.embedding_hidden_mapping_in."
    tensors[prefix + "weight"] = np.eye(width, dtype=np.float32)
    tensors[prefix + "bias"] = np.zeros([width], np.float32)


def _tokenizer_config(spm_model_file: str, do_lower_case: bool, config) -> tuple[dict, dict]:
    """(tokenizer_config.json for transformers' AlbertTokenizer, the special-token ids
    in the SentencePiece model)."""
    from albert_tf.tokenization.spm import load_spm_model

    processor = load_spm_model(spm_model_file)  # a damaged model: one line naming it
    if processor.GetPieceSize() != config.vocab_size:
        raise CheckpointError(f"{spm_model_file}: has {processor.GetPieceSize()} pieces, but the model's "
                              f"vocab_size is {config.vocab_size}; pass the model's own SentencePiece model")
    tokens = {"unk_token": "<unk>", "pad_token": "<pad>", "cls_token": "[CLS]", "sep_token": "[SEP]",
              "mask_token": "[MASK]"}
    ids = {}
    for role, piece in tokens.items():
        piece_id = processor.PieceToId(piece)
        if processor.IdToPiece(piece_id) != piece:
            raise CheckpointError(f"{spm_model_file}: has no {piece} piece, which ALBERT's tokenizer needs "
                                  f"as {role}")
        ids[role] = piece_id
    config = {"tokenizer_class": "AlbertTokenizer", "do_lower_case": do_lower_case, "remove_space": True,
              "keep_accents": False, "bos_token": "[CLS]", "eos_token": "[SEP]", **tokens,
              "model_max_length": config.max_position_embeddings}
    token_ids = {"pad_token_id": ids["pad_token"], "bos_token_id": ids["cls_token"],
                 "eos_token_id": ids["sep_token"]}
    return config, token_ids


def _json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"  # as transformers writes config.json


def _save_safetensors(tensors: dict[str, np.ndarray], tmp: str, path: str) -> None:
    """``safetensors.numpy.save_file`` to ``tmp``; the storage's refusal (a full disk: its own error kind,
    a traceback) is the OSError of any other output, naming ``path``."""
    import safetensors.numpy

    try:
        safetensors.numpy.save_file(tensors, tmp, metadata=_METADATA)
    except safetensors.SafetensorError as e:
        code = re.search(r"\(os error (\d+)\)", str(e))  # "I/O error: No space left on device (os error 28)"
        if code is None:
            raise
        raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), path) from e


def write_checkpoint(model, folder: str, architecture: str, *, spm_model_file: Optional[str] = None,
                     do_lower_case: bool = True) -> str:
    """Writes `model` as a transformers folder for `architecture`: config.json,
    model.safetensors (float32) and, with `spm_model_file`, spiece.model and
    tokenizer_config.json. Everything is checked before the first file is
    written; each file is replaced atomically, config.json last."""
    from albert_tf.fileio import atomic_output, make_folders, signals_deferred, umask_mode, write_utf8

    refuse_another_layer_order(model.config, folder)
    tensors = architecture_tensors(model, architecture)
    num_labels = tensors["classifier.weight"].shape[0] if "classifier.weight" in tensors else None
    config = model.config.to_hf_dict(architecture, num_labels)
    tokenizer = None
    if spm_model_file:
        if not tf.io.gfile.exists(spm_model_file):
            raise CheckpointError(f"SentencePiece model not found: {spm_model_file}")
        tokenizer, token_ids = _tokenizer_config(spm_model_file, do_lower_case, model.config)
        config.update(token_ids)
    if tf.io.gfile.exists(_join(folder, INDEX_FILE)):
        raise CheckpointError(f"{folder} holds a sharded model ({INDEX_FILE}) that this single "
                              f"{WEIGHTS_FILE} would not replace; write to another folder")
    make_folders(folder)  # local or gs://
    # Every file is written whole under a temporary name before the first rename (an interrupted
    # conversion leaves none of them, which a rerun would refuse to replace); config.json is renamed last.
    with contextlib.ExitStack() as renames:  # leaving it renames, in the reverse order of entering
        write_utf8(renames.enter_context(atomic_output(_join(folder, CONFIG_FILE))), _json_text(config))
        if tokenizer is not None:
            write_utf8(renames.enter_context(atomic_output(_join(folder, TOKENIZER_CONFIG_FILE))),
                       _json_text(tokenizer))
            tf.io.gfile.copy(spm_model_file, renames.enter_context(atomic_output(_join(folder, SPM_FILE))),
                             overwrite=True)
        weights = renames.enter_context(atomic_output(_join(folder, WEIGHTS_FILE)))
        _save_safetensors(tensors, weights, _join(folder, WEIGHTS_FILE))
        os.chmod(weights, umask_mode())  # save_file puts a new file of mode 0600 in the temporary's place
        # Ctrl-C or SIGTERM between two renames left the weights without their config.json, a folder the
        # rerun refuses to write into: they act after the last rename.
        with signals_deferred():
            renames.close()
    return folder
