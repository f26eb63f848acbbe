"""AlbertConfig: the original `albert_config.json`, read and written as-is.

Unknown keys in a released config (e.g. `net_structure_type`, `gap_size`) are
kept and written back, so a round trip through this class loses nothing.

A Hugging Face `config.json` (recognised by its `model_type`) is read too: the
field names are the original's, `hidden_act` is translated to the function it
names there (HF's "gelu" is the erf form, ours the tanh form), fields that
describe the file (`architectures`, `transformers_version`, ...) are dropped and
every other field is kept. `to_hf_dict` writes one back.
"""
from __future__ import annotations

import copy
import difflib
import json
from typing import Any

# field -> (type, default). `None` default means the field is required.
_FIELDS: dict[str, tuple[type, Any]] = {
    "vocab_size": (int, None),
    "embedding_size": (int, None),
    "hidden_size": (int, None),
    "num_hidden_layers": (int, None),
    "num_attention_heads": (int, None),
    "intermediate_size": (int, None),
    "num_hidden_groups": (int, 1),
    "inner_group_num": (int, 1),
    "down_scale_factor": (int, 1),
    "hidden_act": (str, "gelu"),
    "hidden_dropout_prob": (float, 0.0),
    "attention_probs_dropout_prob": (float, 0.0),
    "max_position_embeddings": (int, 512),
    "type_vocab_size": (int, 2),
    "initializer_range": (float, 0.02),
}

# `hidden_act` values the model computes (albert_tf.modeling.activations maps them to
# functions): the original's names, plus the exact GELU some Hugging Face configs ask for.
ACTIVATIONS = ("linear", "relu", "gelu", "gelu_erf", "tanh")
# Hugging Face `hidden_act` name -> ours, for the functions both have. The first
# HF name listed for one of ours is the one written when exporting.
HF_ACTIVATIONS: tuple[tuple[str, str], ...] = (
    ("gelu_new", "gelu"),            # the original's tanh approximation ...
    ("gelu_pytorch_tanh", "gelu"),   # ... computed by torch's fused kernel
    ("gelu_fast", "gelu"),           # ... with the terms rearranged
    ("gelu", "gelu_erf"),            # the exact erf form
    ("gelu_python", "gelu_erf"),
    ("relu", "relu"),
    ("tanh", "tanh"),
    ("linear", "linear"),
)

# Hugging Face config.json: the value that marks an ALBERT config.
HF_MODEL_TYPE = "albert"
# Fields of a Hugging Face config.json that describe the file, not the model:
# dropped on import, written afresh by `to_hf_dict`.
_HF_FILE_FIELDS = ("model_type", "architectures", "transformers_version", "dtype", "torch_dtype",
                   "_name_or_path")
# Hugging Face fields our model computes at one value only (the original's).
_HF_FIXED = {"layer_norm_eps": 1e-12, "position_embedding_type": "absolute"}
# transformers' AlbertConfig defaults for its fields beyond the original's; written
# when the config does not carry them (pad/bos/eos are the 30k-clean ids of
# <pad>, [CLS], [SEP]).
_HF_DEFAULTS = {**_HF_FIXED, "classifier_dropout_prob": 0.1, "pad_token_id": 0, "bos_token_id": 2,
                "eos_token_id": 3}
# Label fields only a sequence classifier's config.json carries (the sentence-order
# and span heads of transformers size themselves by the default two labels).
_HF_LABEL_FIELDS = ("id2label", "label2id", "num_labels", "problem_type")
HF_SEQUENCE_CLASSIFIER = "AlbertForSequenceClassification"

# Release configs (ALBERT_SPEC §2): name -> (L, H, heads, I).
_PRESETS = {
    "base": (12, 768, 12, 3072),
    "large": (24, 1024, 16, 4096),
    "xlarge": (24, 2048, 16, 8192),
    "xxlarge": (12, 4096, 64, 16384),
}


class ConfigError(ValueError):
    """A config field is missing, of the wrong type or inconsistent."""


def _warn_of_misspelt_fields(extra: dict[str, Any], given: dict[str, Any]) -> None:
    """The original kept any key silently; a near miss of a field left at its default (``hidden_dropout_porb``)
    gets a warning, since the model then quietly runs with the default."""
    missing = [name for name in _FIELDS if name not in given]
    for name in extra:
        meant = difflib.get_close_matches(name, missing, n=1, cutoff=0.85)
        if meant:
            from absl import logging

            logging.warning("ALBERT config: %r is not a field (kept as an extra); did you mean %r? That field "
                            "keeps its default, %r", name, meant[0], _FIELDS[meant[0]][1])


class AlbertConfig:
    """Hyper-parameters of an ALBERT model, with the original's field names."""

    def __init__(self, **fields: Any):
        self.extra: dict[str, Any] = {}
        for name, (kind, default) in _FIELDS.items():
            if name not in fields:
                if default is None:
                    raise ConfigError(f"ALBERT config is missing required field '{name}' ({kind.__name__})")
                value = default
            else:
                value = fields[name]
            setattr(self, name, _checked(name, kind, value))
        for name, value in fields.items():
            if name not in _FIELDS:
                self.extra[name] = value
        _warn_of_misspelt_fields(self.extra, fields)
        self._validate()

    def _validate(self) -> None:
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers",
                     "num_attention_heads", "intermediate_size", "num_hidden_groups",
                     "inner_group_num", "max_position_embeddings", "type_vocab_size"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"ALBERT config field '{name}' must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ConfigError(
                f"ALBERT config: hidden_size ({self.hidden_size}) is not a multiple of "
                f"num_attention_heads ({self.num_attention_heads})")
        if self.num_hidden_groups > self.num_hidden_layers:
            raise ConfigError(
                f"ALBERT config: num_hidden_groups ({self.num_hidden_groups}) exceeds "
                f"num_hidden_layers ({self.num_hidden_layers}); some groups would never be used")
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"ALBERT config field '{name}' must be in [0, 1), got {getattr(self, name)}")
        if self.hidden_act and self.hidden_act.lower() not in ACTIVATIONS:
            raise ConfigError(f"ALBERT config field 'hidden_act': unsupported activation '{self.hidden_act}'; "
                              f"expected one of {', '.join(ACTIVATIONS)}")

    # --- the original's API -------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AlbertConfig":
        """The original's format, or Hugging Face's (it has `model_type`)."""
        if not isinstance(data, dict):
            raise ConfigError(f"ALBERT config must be a JSON object, got {type(data).__name__}")
        if "model_type" in data:
            return cls.from_hf_dict(data)
        return cls(**data)

    # --- Hugging Face config.json ----------------------------------------------
    @classmethod
    def from_hf_dict(cls, data: dict[str, Any]) -> "AlbertConfig":
        """A transformers `config.json` (model_type "albert") as our config."""
        if data.get("model_type") != HF_MODEL_TYPE:
            raise ConfigError(f"Hugging Face config has model_type {data.get('model_type')!r}, "
                              f"expected {HF_MODEL_TYPE!r}")
        fields = {k: v for k, v in data.items() if k not in _HF_FILE_FIELDS}
        for name, value in _HF_FIXED.items():
            if name in fields and fields[name] != value:
                raise ConfigError(f"Hugging Face config field '{name}' is {fields[name]!r}; albert_tf "
                                  f"computes the original ALBERT, which has {value!r} only")
        try:  # transformers' default activation, when the file has none, is gelu_new
            fields["hidden_act"] = from_hf_activation(fields.get("hidden_act", "gelu_new"))
        except ValueError as err:
            raise ConfigError(f"config field 'hidden_act': {err}") from None
        return cls(**fields)

    def to_hf_dict(self, architecture: str, num_labels: int | None = None) -> dict[str, Any]:
        """This config as transformers' `config.json` for `architecture` (e.g.
        "AlbertForPreTraining"); `num_labels` sizes a sequence classifier's labels."""
        data = {k: v for k, v in self.to_dict().items() if k not in _HF_LABEL_FIELDS}
        if data["down_scale_factor"] == 1:  # the original's only value; transformers has no such field
            del data["down_scale_factor"]
        data["hidden_act"] = to_hf_activation(self.hidden_act)
        for name, value in _HF_DEFAULTS.items():
            data.setdefault(name, value)
        if architecture == HF_SEQUENCE_CLASSIFIER:
            if num_labels is None:
                raise ValueError(f"{HF_SEQUENCE_CLASSIFIER} needs num_labels")
            names = self.extra.get("id2label") or {}
            if len(names) != num_labels:  # transformers' own names for unnamed labels
                names = {str(i): f"LABEL_{i}" for i in range(num_labels)}
            data["id2label"] = {str(k): v for k, v in names.items()}
            data["label2id"] = {v: int(k) for k, v in data["id2label"].items()}
        data.update(architectures=[architecture], model_type=HF_MODEL_TYPE, dtype="float32")
        return data

    @classmethod
    def from_json_file(cls, path: str) -> "AlbertConfig":
        import tensorflow as tf  # gfile reads local and gs:// paths alike

        if not tf.io.gfile.exists(path):
            raise ConfigError(f"ALBERT config file not found: {path}")
        with tf.io.gfile.GFile(path, "rb") as f:
            raw = f.read()
        try:
            data = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as err:
            raise ConfigError(f"{path}: not UTF-8 text ({err.reason} at byte offset {err.start}); expected the JSON of "
                              f"an albert_config.json") from None
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}: not valid JSON ({err})") from None
        try:
            return cls.from_dict(data)
        except ConfigError as err:
            raise ConfigError(f"{path}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        out = {name: getattr(self, name) for name in _FIELDS}
        out.update(copy.deepcopy(self.extra))
        return out

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"

    def to_json_file(self, path: str) -> None:
        from albert_tf.fileio import atomic_write_text

        atomic_write_text(path, self.to_json_string())

    def replace(self, **changes: Any) -> "AlbertConfig":
        data = self.to_dict()
        data.update(changes)
        return AlbertConfig.from_dict(data)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AlbertConfig) and self.to_dict() == other.to_dict()

    def __repr__(self) -> str:
        return f"AlbertConfig({self.to_json_string().strip()})"

    @property
    def attention_head_size(self) -> int:
        return self.hidden_size // self.num_attention_heads

    # --- release presets ---------------------------------------------------
    @classmethod
    def preset(cls, name: str, version: int = 2) -> "AlbertConfig":
        """The config of Google's `albert_<name>_v<version>` release."""
        if name not in _PRESETS:
            raise ConfigError(f"unknown ALBERT preset '{name}'; known: {', '.join(_PRESETS)}")
        if version not in (1, 2):
            raise ConfigError(f"ALBERT preset version must be 1 or 2, got {version}")
        layers, hidden, heads, intermediate = _PRESETS[name]
        # v1 used dropout 0.1 except xxlarge; v2 turned dropout off everywhere.
        dropout = 0.1 if (version == 1 and name != "xxlarge") else 0.0
        return cls(vocab_size=30000, embedding_size=128, hidden_size=hidden,
                   num_hidden_layers=layers, num_attention_heads=heads,
                   intermediate_size=intermediate, num_hidden_groups=1, inner_group_num=1,
                   hidden_act="gelu", hidden_dropout_prob=dropout,
                   attention_probs_dropout_prob=dropout, max_position_embeddings=512,
                   type_vocab_size=2, initializer_range=0.02)

    @staticmethod
    def preset_names() -> list[str]:
        return list(_PRESETS)


def from_hf_activation(name: str) -> str:
    """Our activation name for a Hugging Face `hidden_act`; ValueError if none fits."""
    for hf_name, ours in HF_ACTIVATIONS:
        if name == hf_name:
            return ours
    known = ", ".join(hf for hf, _ in HF_ACTIVATIONS)
    raise ValueError(f"Hugging Face activation '{name}' has no albert_tf counterpart; supported: {known}")


def to_hf_activation(name: str) -> str:
    """The Hugging Face `hidden_act` that computes our activation `name`."""
    key = (name or "linear").lower()
    for hf_name, ours in HF_ACTIVATIONS:
        if ours == key:
            return hf_name
    raise ValueError(f"activation '{name}' has no Hugging Face counterpart")


def _checked(name: str, kind: type, value: Any) -> Any:
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, kind):
        raise ConfigError(
            f"ALBERT config field '{name}' must be {kind.__name__}, got {value!r} ({type(value).__name__})")
    return value
