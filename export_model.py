"""Exports an ALBERT checkpoint as a TF2 SavedModel with the original TF-Hub
module's signatures (tokens, mlm, sop, tokenization_info) plus a raw-text
`serving_default` that tokenizes in-graph.

  python export_model.py --albert_config_file=albert_base/albert_config.json \
      --checkpoint=albert_base/model.ckpt-best --spm_model_file=albert_base/30k-clean.model \
      --export_path=exported/albert_base
"""
from __future__ import annotations

from albert_tf.startup import quiet_startup  # first: hides TensorFlow's start-up lines
quiet_startup()

from absl import app, flags

from albert_tf.cli import reports_errors

FLAGS = flags.FLAGS
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the model.")
flags.DEFINE_string("checkpoint", None, "Checkpoint to export (Google TF1, TF-Hub module dir or ours).")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model (English releases).")
flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt (Chinese releases), instead of --spm_model_file.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case text before tokenizing (as the model was trained).")
flags.DEFINE_string("export_path", None, "Folder to write the SavedModel to (replaced if it exists).")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the raw-text serving signature.")
flags.DEFINE_bool("allow_missing_heads", False,
                  "Export even if the checkpoint lacks head weights (e.g. a TF-Hub module's sentence-order "
                  "head); those outputs are then meaningless.")
for _name in ("albert_config_file", "checkpoint", "export_path"):
    flags.mark_flag_as_required(_name)


@reports_errors
def main(argv) -> int:
    del argv
    from albert_tf import AlbertConfig, AlbertPretrainer, load_checkpoint
    from albert_tf.export import export_hub_module
    from albert_tf.vocab_check import check_tokenizer

    config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
    check_tokenizer(FLAGS.spm_model_file, FLAGS.vocab_file, config.vocab_size, FLAGS.albert_config_file)
    model = AlbertPretrainer(config)
    print(load_checkpoint(model, FLAGS.checkpoint, allow_missing_heads=FLAGS.allow_missing_heads).summary())
    path = export_hub_module(model, FLAGS.export_path, FLAGS.spm_model_file, FLAGS.vocab_file,
                             FLAGS.do_lower_case, FLAGS.max_seq_length)
    print(f"exported SavedModel to {path} (signatures: tokens, mlm, sop, tokenization_info, serving_default)")
    return 0


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
