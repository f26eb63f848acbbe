"""Hub-style SavedModel export: the original TF-Hub module's signatures, in TF2.

Signatures (all batch-first; int32 ids of any length up to the config's max_position_embeddings, as
the original module's; longer is an error):
- `tokens`: input_ids, input_mask, segment_ids -> sequence_output, pooled_output
- `mlm`: the same + mlm_positions -> mlm_logits (and the `tokens` outputs); mlm_logits is
  [B, P, V] (P = mlm_positions' width), where the original module's is [B*P, V]: reshape
  with `tf.reshape(mlm_logits, [-1, V])` for the original's layout
- `sop`: input_ids, input_mask, segment_ids -> sop_log_probs [B,2] (log-probabilities)
  (and the `tokens` outputs, as the original module's signature)
- `tokenization_info`: () -> spm_model_file (or vocab_file) asset path, do_lower_case
- `serving_default`: text (tf.string [N]) -> tokenized in-graph as `[CLS] text [SEP]`
  up to max_seq_length and padded to the request's longest row, then the `tokens` outputs
  plus the input_ids/input_mask used.
  Without the text signature (``text_signature=False``): `serving_default` is `tokens`, and no
  tensorflow-text op is in the graph (the original module's had none either), so stock TF Serving
  and plain TensorFlow load it, and converters (LiteRT, TF.js) meet no custom op.

Reload with `tf.saved_model.load(path)` after `import tensorflow_text` (its ops are
in the graph) unless exported without the text signature. The reload is also a TF2 reusable
SavedModel (``__call__`` = `tokens` on a dict of the three ids, ``variables``, ``trainable_variables``,
``regularization_losses``), what ``hub.KerasLayer(path, trainable=True)`` fine-tunes. The tokenizer
model and `albert_config.json` (as the original module ships it) are stored as assets. The variables
are saved under their TF1 names (`tf1_variables/<name>`), so `load_checkpoint` reads the export back: export ->
fine-tune with `--init_checkpoint=<export>`.
"""
from __future__ import annotations

import os
import posixpath
import re
import shutil
import stat
import tempfile
import uuid

import tensorflow as tf
from absl import logging

from albert_tf.data.batching import check_max_length, embedding_id_limits
from albert_tf.fileio import TMP_MARK, give_umask_modes, is_remote
from albert_tf.modeling.serving_precision import DEFAULT_SERVING_PRECISION, model_for_serving
from albert_tf.run_lock import RunLock
from albert_tf.training import faults
from albert_tf.tokenization.packing import pack_token_ids

LOCK_SUFFIX = ".lock"  # <export_path>.lock, beside the export, while one is written

ENCODER_INPUTS = ("input_ids", "input_mask", "segment_ids")
CONFIG_ASSET = "albert_config.json"
# The module attribute holding the variables by TF1 name (read by albert_tf.weights.loading).
VARIABLES_ATTRIBUTE = "tf1_variables"


# What tf.saved_model.save writes into a folder: an export of ours holds these and nothing else.
SAVED_MODEL_ENTRIES = frozenset({"saved_model.pb", "fingerprint.pb", "variables", "assets"})
# What it writes into variables/: the checkpoint's index and data shards.
VARIABLES_FILE = re.compile(r"variables\.index|variables\.data-\d+-of-\d+")


def _saved_assets(path: str) -> set[str] | None:
    """The asset file names ``saved_model.pb`` references (the tokenizer and ``albert_config.json`` for
    an export of ours); None when there is no readable ``saved_model.pb``."""
    from tensorflow.core.protobuf import saved_model_pb2

    saved = saved_model_pb2.SavedModel()
    try:
        with tf.io.gfile.GFile(os.path.join(path, "saved_model.pb"), "rb") as f:
            saved.ParseFromString(f.read())
    except (tf.errors.OpError, OSError, ValueError):  # missing, unreadable or not a SavedModel (DecodeError)
        return None
    return {asset.filename for graph in saved.meta_graphs for asset in graph.asset_file_def}


def foreign_entries(path: str) -> list[str]:
    """What in the folder ``path`` an export of ours did not write, as paths relative to it: replacing
    the folder would delete them. Checks the whole tree: a user's ``assets/labels.txt`` counts."""
    entries = sorted(e.rstrip("/") for e in tf.io.gfile.listdir(path))
    foreign = [e for e in entries if e not in SAVED_MODEL_ENTRIES]
    assets = _saved_assets(path)
    if assets is None or CONFIG_ASSET not in assets:
        return foreign or entries  # not a SavedModel of ours: everything in it is someone else's
    allowed = {"variables": VARIABLES_FILE.fullmatch, "assets": assets.__contains__}
    for folder in sorted(set(entries) & set(allowed)):
        inner = os.path.join(path, folder)
        if not tf.io.gfile.isdir(inner):
            foreign.append(folder)
            continue
        for name in sorted(e.rstrip("/") for e in tf.io.gfile.listdir(inner)):
            # A subfolder is never ours (the export writes flat folders).
            if tf.io.gfile.isdir(os.path.join(inner, name)) or not allowed[folder](name):
                foreign.append(f"{folder}/{name}")
    return foreign


def is_hub_export(path: str) -> bool:
    """Whether the folder ``path`` is an earlier export of ours: a SavedModel (``saved_model.pb``) with
    our config asset and nothing, at any depth, that the export does not write."""
    entries = {e.rstrip("/") for e in tf.io.gfile.listdir(path)}
    return ("saved_model.pb" in entries and tf.io.gfile.exists(os.path.join(path, "assets", CONFIG_ASSET))
            and not foreign_entries(path))


def check_export_path(export_path: str) -> None:
    """Refuses (one line) an ``--export_path`` whose contents an export would destroy: a file, or a
    folder holding anything but an earlier export of ours, or a place this user cannot write, or a mount
    point or another user's folder in a sticky folder (which cannot be renamed aside). Called before any work."""
    if not is_remote(export_path):
        _check_writable(export_path)
    if not tf.io.gfile.exists(export_path):
        return
    if not tf.io.gfile.isdir(export_path):
        raise ValueError(f"--export_path={export_path} is a file; expected a folder for the SavedModel "
                         f"(a new one, or an earlier export to replace)")
    entries = tf.io.gfile.listdir(export_path)
    if entries and not is_hub_export(export_path):
        foreign = foreign_entries(export_path) or sorted(e.rstrip("/") for e in entries)
        raise ValueError(f"--export_path={export_path} holds files that are not an export of this tool "
                         f"({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}); not replacing them: "
                         f"give a new or empty folder")


def _check_writable(export_path: str) -> None:
    """The export is written beside ``export_path`` (a temporary folder and the lock), then renamed into
    place: the folder holding it must be one this user can write in (or create). Unchecked, a read-only
    place failed after the checkpoint was read, with the OS's message about the lock file."""
    folder = os.path.dirname(os.path.realpath(export_path))
    while not os.path.lexists(folder):  # created by the export: what counts is the first folder that exists
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        raise ValueError(f"--export_path={export_path}: {folder} is a file; expected a folder to hold the export")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"--export_path={export_path}: cannot write in {folder}; expected a folder this user can "
                         f"write in (the export is written beside --export_path, then renamed into place)")
    # A mount point cannot be renamed aside (EBUSY): that failed after the export was built, in the OS's words.
    # Writing into it instead would replace its contents one entry at a time, not at once.
    if os.path.ismount(os.path.realpath(export_path)):
        raise ValueError(f"--export_path={export_path} is a mount point, which the export cannot replace (it is "
                         f"written beside --export_path, then renamed into place): pass a folder inside it, "
                         f"e.g. --export_path={os.path.join(export_path, 'albert')}")
    _check_sticky_folder(export_path)


def _check_sticky_folder(export_path: str) -> None:
    """In a sticky folder (``/tmp``, mode 1777) only the owner of an entry or of the folder (or root) may
    rename the entry: an earlier export of another user there cannot be moved aside, which failed after the
    export was built (EPERM)."""
    real = os.path.realpath(export_path)
    if not os.path.lexists(real):
        return  # nothing to move aside: the new export is renamed into place, and it is this user's
    parent = os.path.dirname(real)
    entry, folder = os.lstat(real), os.stat(parent)
    user = os.geteuid()
    if folder.st_mode & stat.S_ISVTX and user != 0 and user not in (entry.st_uid, folder.st_uid):
        raise ValueError(f"--export_path={export_path} belongs to another user (uid {entry.st_uid}) in {parent}, "
                         f"a sticky folder (like /tmp) where only its owner can rename it, and the export replaces "
                         f"it by a rename: pass a new folder, or ask its owner to remove it")


def _export_remotely(module: tf.Module, export_path: str, staged: str, config_dir: str) -> None:
    """Remote storage (``gs://``) renames no folder: the export is saved whole beside ``export_path``
    first, so a failed or killed save leaves the previous export as it was; only then is the previous
    one removed and the new one copied into place, ``saved_model.pb`` last (a copy cut short is not
    loadable, and ``check_export_path`` names it)."""
    keep_staged = False
    try:
        tf.saved_model.save(module, staged, signatures=module.signatures())
        check_export_path(export_path)  # still an export of ours
        # From here on the staged export is the only whole one: a failure keeps it and says where it is.
        keep_staged = True
        if tf.io.gfile.exists(export_path):
            tf.io.gfile.rmtree(export_path)
        copies = [(posixpath.join(folder, name), posixpath.join(export_path, folder[len(staged):].lstrip("/"), name))
                  for folder, _, names in tf.io.gfile.walk(staged) for name in names]
        for src, dst in sorted(copies, key=lambda pair: pair[0].endswith("saved_model.pb")):
            tf.io.gfile.makedirs(posixpath.dirname(dst))
            tf.io.gfile.copy(src, dst, overwrite=True)
        keep_staged = False
    except (tf.errors.OpError, OSError) as e:
        if keep_staged:
            raise RuntimeError(f"replacing {export_path} failed ({e}); the new export is whole at {staged}: "
                               f"copy it there, or rerun") from e
        raise
    finally:
        if not keep_staged and tf.io.gfile.exists(staged):
            tf.io.gfile.rmtree(staged)
        shutil.rmtree(config_dir, ignore_errors=True)


def _int_spec(name: str, width: int | None = None) -> tf.TensorSpec:
    return tf.TensorSpec([None, width], tf.int32, name=name)


class HubModule(tf.Module):
    """What export_model.py saves: the pretrainer's variables, the tokenizer and
    the signature functions. It is also a TF2 reusable SavedModel (what ``hub.KerasLayer(path,
    trainable=True)`` fine-tunes): ``__call__`` plus ``variables``, ``trainable_variables`` and
    ``regularization_losses``."""

    # Plain attributes here, not tf.Module's computed properties: the reusable-SavedModel
    # interface needs them saved, and only assigned attributes are.
    variables = trainable_variables = None

    def __init__(self, pretrainer, tokenizer, tokenizer_file: str, do_lower_case: bool, max_seq_length: int,
                 config_file: str | None = None):
        """``tokenizer``: the in-graph (tensorflow-text) tokenizer of the raw-text ``serving_default``; None
        for none (``serving_default`` is then ``tokens``, and no tensorflow-text op is saved)."""
        super().__init__(name="albert_hub_module")
        from albert_tf.weights.kinds import tf1_name_map

        # Call the Keras model without tracking it (tracking would serialize Keras'
        # own layer traces too); its variables are tracked directly, by TF1 name.
        object.__setattr__(self, "_model", pretrainer)
        named = tf1_name_map(pretrainer)
        unnamed = {id(v) for v in pretrainer.variables} - {id(v) for v in named.values()}
        if unnamed:
            raise ValueError(f"{len(unnamed)} variables of the model have no TF1 name to export them under")
        setattr(self, VARIABLES_ATTRIBUTE, dict(named))
        # After tf1_variables: a variable is saved under the first path found to it, which
        # load_checkpoint reads (tf1_variables/<name>). __call__ uses the encoder's alone.
        self.variables = list(pretrainer.encoder.variables)
        self.trainable_variables = list(pretrainer.encoder.trainable_variables)
        self.regularization_losses = []  # ALBERT has no weight regularizer
        # Tracked, its resource is saved (tensorflow-text ops) whether a signature uses it or not.
        self.tokenizer = tokenizer
        self.tokenizer_asset = tf.saved_model.Asset(tokenizer_file)
        if config_file:
            self.config_asset = tf.saved_model.Asset(config_file)
        self.do_lower_case = tf.constant(bool(do_lower_case))
        self.max_seq_length = max_seq_length  # where serve_text truncates raw text
        # The id signatures take what the model can: the original module's took any length up to it.
        self.max_positions = pretrainer.config.max_position_embeddings
        # Ids outside the embedding tables: a message naming the input, not the embedding's gather.
        self.id_limits = embedding_id_limits(pretrainer.config)

    def _encode(self, inputs, training: bool = False):
        out = self._model.encoder({k: inputs[k] for k in ENCODER_INPUTS}, training=training)
        return {"sequence_output": tf.cast(out["sequence_output"], tf.float32),
                "pooled_output": tf.cast(out["pooled_output"], tf.float32)}

    def _ids(self, input_ids, input_mask, segment_ids) -> dict:
        ids = {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids}
        return check_max_length(ids, self.max_positions, "max_position_embeddings", id_limits=self.id_limits)

    def tokens(self, input_ids, input_mask, segment_ids):
        return self._encode(self._ids(input_ids, input_mask, segment_ids))

    @tf.function
    def __call__(self, inputs, training=False):
        """The reusable-SavedModel forward pass: ``inputs`` a dict of input_ids, input_mask and
        segment_ids -> the ``tokens`` outputs; ``training`` (a Python bool) turns dropout on."""
        return self._encode(self._ids(*(inputs[name] for name in ENCODER_INPUTS)), training=training)

    def mlm(self, input_ids, input_mask, segment_ids, mlm_positions):
        """mlm_logits [B, P, V] at mlm_positions [B, P]; the original module's were [B*P, V]."""
        out = self._model({**self._ids(input_ids, input_mask, segment_ids), "masked_lm_positions": mlm_positions},
                          training=False)
        return {name: tf.cast(out[name], tf.float32) for name in ("mlm_logits", "sequence_output", "pooled_output")}

    def sop(self, input_ids, input_mask, segment_ids):
        encoded = self._model.encoder(self._ids(input_ids, input_mask, segment_ids), training=False)
        logits = self._model.sentence_order(encoded["pooled_output"])
        return {"sop_log_probs": tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1),
                "sequence_output": tf.cast(encoded["sequence_output"], tf.float32),
                "pooled_output": tf.cast(encoded["pooled_output"], tf.float32)}

    def tokenization_info(self):
        return {"vocab_file": self.tokenizer_asset.asset_path, "do_lower_case": self.do_lower_case}

    def serve_text(self, text):
        inputs = pack_token_ids(self.tokenizer.tokenize(text), None, self.max_seq_length,
                                self.tokenizer.cls_id, self.tokenizer.sep_id, pad_to_longest=True)
        outputs = self._encode(inputs)
        outputs.update(input_ids=inputs["input_ids"], input_mask=inputs["input_mask"])
        return outputs

    def signatures(self) -> dict:
        ids = [_int_spec(n) for n in ENCODER_INPUTS]
        for training in (False, True):  # the traces a reloaded __call__ chooses between
            self.__call__.get_concrete_function({n: _int_spec(n) for n in ENCODER_INPUTS}, training=training)
        tokens = tf.function(self.tokens, input_signature=ids).get_concrete_function()
        if self.tokenizer is not None:
            serving = tf.function(self.serve_text, input_signature=[tf.TensorSpec([None], tf.string, name="text")])
            serving = serving.get_concrete_function()
        else:  # ids only: TF Serving's default signature is `tokens`
            serving = tokens
        return {
            "tokens": tokens,
            "mlm": tf.function(self.mlm, input_signature=ids + [_int_spec("mlm_positions")]).get_concrete_function(),
            "sop": tf.function(self.sop, input_signature=ids).get_concrete_function(),
            "tokenization_info": tf.function(self.tokenization_info, input_signature=[]).get_concrete_function(),
            "serving_default": serving,
        }


def export_hub_module(pretrainer, export_path: str, spm_model_file: str | None = None,
                      vocab_file: str | None = None, do_lower_case: bool = True,
                      max_seq_length: int = 128, serving_precision: str = DEFAULT_SERVING_PRECISION,
                      text_signature: bool = True) -> str:
    """Writes the SavedModel to `export_path` (via a temporary folder, then a rename), replacing an
    earlier export there; anything else there is refused (``check_export_path``).
    `serving_precision`: what the graph computes in (`albert_tf.modeling.serving_precision`).
    `text_signature`: False leaves out the raw-text `serving_default` (it is `tokens` then) and with it
    every tensorflow-text op (`max_seq_length` is unused then).
    Returns `export_path` (absolute when local; a symlink's own path, not its target)."""
    check_export_path(export_path)
    if bool(spm_model_file) == bool(vocab_file):
        raise ValueError("give exactly one of spm_model_file (SentencePiece) or vocab_file (WordPiece)")
    tokenizer_file = vocab_file or spm_model_file
    if not text_signature:
        from albert_tf.vocab_check import tokenizer_vocab_size

        tokenizer, vocab_size = None, tokenizer_vocab_size(spm_model_file, vocab_file)
    else:
        if vocab_file:
            from albert_tf.tokenization.tf_wordpiece import TFWordPieceTokenizer

            tokenizer = TFWordPieceTokenizer(vocab_file, do_lower_case)
        else:
            from albert_tf.tokenization import TFTokenizer

            tokenizer = TFTokenizer(spm_model_file, do_lower_case)
        vocab_size = tokenizer.vocab_size
        if max_seq_length > pretrainer.config.max_position_embeddings:
            raise ValueError(f"--max_seq_length={max_seq_length} exceeds max_position_embeddings "
                             f"({pretrainer.config.max_position_embeddings})")
    if vocab_size != pretrainer.config.vocab_size:
        raise ValueError(f"the tokenizer has {vocab_size} pieces but the ALBERT config's "
                         f"vocab_size is {pretrainer.config.vocab_size}: wrong tokenizer file for this model?")
    pretrainer = model_for_serving(pretrainer, serving_precision)
    config_dir = tempfile.mkdtemp()
    config_file = os.path.join(config_dir, CONFIG_ASSET)  # the asset keeps the file's name
    pretrainer.config.to_json_file(config_file)
    module = HubModule(pretrainer, tokenizer, tokenizer_file, do_lower_case, max_seq_length, config_file)
    unique = f"{TMP_MARK}{uuid.uuid4().hex}"  # names nobody else's file can have
    if is_remote(export_path):
        # Beside it under a name that does not start with its name (listings go by prefix).
        staged = posixpath.join(posixpath.dirname(export_path), f"{unique}-export-{posixpath.basename(export_path)}")
        _export_remotely(module, export_path, staged, config_dir)
        return export_path
    # Through a symlink (a serving path pointing at a version folder): into its target, as the original's
    # save into the path did; renaming the link aside would leave the target stale and a stray link.
    given = os.path.abspath(export_path)  # what the user named, for the summary line
    export_path = os.path.realpath(export_path)
    tmp, old = f"{export_path}{unique}-export", f"{export_path}{unique}-old"
    os.makedirs(os.path.dirname(export_path), exist_ok=True)
    try:
        # One export into a path at a time; under its lock, the folders a killed one left are that path's.
        with RunLock(export_path + LOCK_SUFFIX, what=f"--export_path={export_path}",
                     take_over_hint=f"delete {export_path}{LOCK_SUFFIX}"):
            _recover_killed_export(export_path)
            with faults.disk_full_as_one_line(f"the export {given}", "what was written of it is removed and an "
                                              "earlier export there is unchanged; free space and rerun"):
                tf.saved_model.save(module, tmp, signatures=module.signatures())
            give_umask_modes(tmp)
            check_export_path(export_path)  # still an export of ours (nothing was added while this one was written)
            try:
                if os.path.exists(export_path):  # keep the previous export until the new one is in place
                    os.replace(export_path, old)
                os.replace(tmp, export_path)
            except OSError as e:  # what check_export_path could not foresee (EBUSY, EXDEV, EPERM): one line
                raise ValueError(f"--export_path={given}: cannot rename the new export into place ({e.strerror}); "
                                 f"nothing there was changed: pass a new folder, or one inside it") from e
    finally:
        if not os.path.exists(export_path) and os.path.exists(old):
            os.replace(old, export_path)  # interrupted between the renames: the previous export goes back
        _remove(tmp)
        _remove(old)
        shutil.rmtree(config_dir, ignore_errors=True)
    return given


def _recover_killed_export(export_path: str) -> None:
    """What a killed export (SIGKILL: no ``finally``) left beside ``export_path``: the previous export it had
    moved aside goes back when nothing replaced it; half-written new ones and superseded old ones go."""
    folder, name = os.path.split(export_path)
    left = re.compile(re.escape(name) + re.escape(TMP_MARK) + r"[0-9a-f]{32}-(export|old)")
    found = sorted((os.path.join(folder, n) for n in os.listdir(folder) if left.fullmatch(n)),
                   key=lambda p: os.lstat(p).st_mtime)
    moved_aside = [p for p in found if p.endswith("-old")]
    if moved_aside and not os.path.exists(export_path):
        os.replace(moved_aside[-1], export_path)
        logging.warning("%s: put back the previous export, which a killed export had moved aside", export_path)
    for path in found:
        if os.path.lexists(path):
            logging.warning("Removing %s, left by a killed export", path)
            _remove(path)


def _remove(path: str) -> None:
    """Removes a folder this export wrote or moved aside; a symlink (an earlier version moved a linked
    --export_path aside) is unlinked: rmtree refuses one, and its target is not ours."""
    if os.path.islink(path):
        os.unlink(path)
    else:
        shutil.rmtree(path, ignore_errors=True)
