"""Exports an ALBERT checkpoint as a TF2 SavedModel with the original TF-Hub
module's signatures (tokens, mlm, sop, tokenization_info) plus a raw-text
`serving_default` that tokenizes in-graph (tensorflow-text ops; ``--notext_signature``
leaves it out: `serving_default` is then `tokens`, and plain TensorFlow loads the export).

  python export_model.py --albert_config_file=albert_base/albert_config.json \
      --checkpoint=albert_base/model.ckpt-best --spm_model_file=albert_base/30k-clean.model \
      --export_path=exported/albert_base

The original export_to_tfhub.py's form works too: ``--albert_directory`` holding
albert_config.json, the checkpoint (``--checkpoint_name``, default model.ckpt-best)
and 30k-clean.model; the three file flags above default to the files in it.

  python export_model.py --albert_directory=albert_base --export_path=exported/albert_base
"""
from __future__ import annotations

from absl import flags

from albert_tf.cli import entry_point, reports_errors, require_flags
from albert_tf.drivers.finetuning import define_serving_precision_flag, define_text_signature_flag

FLAGS = flags.FLAGS
flags.DEFINE_string("albert_directory", None,
                    "export_to_tfhub.py's form: a folder with albert_config.json, the checkpoint "
                    "(--checkpoint_name) and 30k-clean.model, the defaults of the three file flags.")
flags.DEFINE_string("checkpoint_name", "model.ckpt-best",
                    "With --albert_directory: the checkpoint's name in it (as export_to_tfhub.py).")
flags.DEFINE_bool("use_einsum", True,
                  "Accepted for compatibility, no effect: the original chose tf.einsum or reshape+matmul "
                  "for dense layers (TFLite needed the latter); this port's layers convert either way.")
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the model.")
flags.DEFINE_string("checkpoint", None, "Checkpoint to export (Google TF1, TF-Hub module dir or ours).")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model (English releases).")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt (Chinese releases), instead of --spm_model_file.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case text before tokenizing (as the model was trained).")
flags.DEFINE_string("export_path", None, "SavedModel folder: new, empty or an earlier export of ours (replaced).")
flags.DEFINE_integer("max_seq_length", 128,
                     "Where the raw-text serving signature (serving_default) truncates text. The id signatures "
                     "(tokens, mlm, sop) take any length up to the config's max_position_embeddings, as the "
                     "original module's. Unused with --notext_signature.")
flags.DEFINE_bool("allow_missing_heads", False,
                  "Export even if the checkpoint lacks head weights (e.g. a TF-Hub module's sentence-order "
                  "head); those outputs are then meaningless.")
define_serving_precision_flag()
define_text_signature_flag("serving_default", "serving_default is then the same as tokens, on ids, as the original "
                           "module's signatures")
REQUIRED = ("albert_config_file", "checkpoint", "export_path")
# --albert_directory's files, as export_to_tfhub.py named them.
DIRECTORY_FILES = {"albert_config_file": "albert_config.json", "spm_model_file": "30k-clean.model"}


def _fill_from_albert_directory() -> None:
    """Unset file flags default to the files of --albert_directory (explicit flags win)."""
    import os

    folder = FLAGS.albert_directory
    if not folder:
        return
    if not os.path.isdir(folder):
        raise ValueError(f"--albert_directory={folder}: not a directory")
    for name, filename in DIRECTORY_FILES.items():
        if getattr(FLAGS, name) is None and not (name == "spm_model_file" and FLAGS.vocab_file):
            setattr(FLAGS, name, os.path.join(folder, filename))
    if FLAGS.checkpoint is None:
        FLAGS.checkpoint = os.path.join(folder, FLAGS.checkpoint_name)


def _check_max_seq_length(max_position_embeddings: int) -> None:
    """The text signature truncates at --max_seq_length, which the model's positions must cover: checked
    before the checkpoint is read (export_hub_module checks it too, after a real model's load of minutes)."""
    if FLAGS.text_signature and FLAGS.max_seq_length > max_position_embeddings:
        default = " (its default)" if not FLAGS["max_seq_length"].present else ""
        raise ValueError(f"--max_seq_length={FLAGS.max_seq_length}{default} exceeds max_position_embeddings "
                         f"{max_position_embeddings} of --albert_config_file={FLAGS.albert_config_file}: pass "
                         f"--max_seq_length={max_position_embeddings} or less")


@reports_errors
def main(argv) -> int:
    del argv
    _fill_from_albert_directory()
    require_flags(FLAGS, *REQUIRED)
    from albert_tf import AlbertConfig, AlbertPretrainer, load_checkpoint
    from albert_tf.weights import CheckpointError
    from albert_tf.weights.errors import another_config_line
    from albert_tf.export import check_export_path, export_hub_module
    from albert_tf.tokenization.spm import warn_if_capitals_become_unknown
    from albert_tf.vocab_check import check_tokenizer

    check_export_path(FLAGS.export_path)  # before any work: never replace what we did not write
    config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
    _check_max_seq_length(config.max_position_embeddings)
    check_tokenizer(FLAGS.spm_model_file, FLAGS.vocab_file, config.vocab_size, FLAGS.albert_config_file)
    warn_if_capitals_become_unknown(FLAGS.spm_model_file, FLAGS.do_lower_case)
    model = AlbertPretrainer(config)
    try:
        report = load_checkpoint(model, FLAGS.checkpoint, allow_missing_heads=FLAGS.allow_missing_heads)
    except CheckpointError as e:
        raise ValueError(another_config_line(e, FLAGS.albert_config_file)) from None
    print(report.summary())
    path = export_hub_module(model, FLAGS.export_path, FLAGS.spm_model_file, FLAGS.vocab_file,
                             FLAGS.do_lower_case, FLAGS.max_seq_length, FLAGS.serving_precision,
                             text_signature=FLAGS.text_signature)
    serving = "serving_default" if FLAGS.text_signature else "serving_default = tokens"
    print(f"exported SavedModel ({FLAGS.serving_precision}) to {path} "
          f"(signatures: tokens, mlm, sop, tokenization_info, {serving})")
    return 0


run = entry_point(main)


if __name__ == "__main__":
    run()
