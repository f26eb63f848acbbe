"""Converts ALBERT checkpoints between Google's TF1 format, albert_tf's and
Hugging Face's (a transformers folder: config.json + model.safetensors).

  python convert_checkpoint.py --checkpoint_to_convert=albert_base/model.ckpt-best \
      --albert_config_file=albert_base/albert_config.json \
      --converted_checkpoint=converted/model.ckpt --direction=tf1_to_tf2

  python convert_checkpoint.py --checkpoint_to_convert=albert_base/model.ckpt-best \
      --albert_config_file=albert_base/albert_config.json --spm_model_file=albert_base/30k-clean.model \
      --converted_checkpoint=albert_base_hf --direction=tf1_to_hf

`tf2_to_tf1` writes Google's variable names, so the original code and other
tools read our checkpoints; `*_to_hf` writes a folder transformers loads. For a
Hugging Face input --albert_config_file may be omitted: its config.json is used
and written beside the output as albert_config.json. Optimizer slots and
global_step are not carried over.
"""
from __future__ import annotations

from absl import flags

from albert_tf.cli import entry_point, reports_errors, require_flags
from albert_tf.conversion import DIRECTIONS, model_kinds, model_kinds_help

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint_to_convert", None, "Checkpoint prefix or directory to read, or a Hugging Face "
                    "folder (config.json + model.safetensors, or shards with model.safetensors.index.json).")
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the model (optional for a Hugging Face "
                    "input, whose config.json is used).")
flags.DEFINE_string("converted_checkpoint", None, "Prefix to write, e.g. out/model.ckpt; for *_to_hf the "
                    "folder to write.")
flags.DEFINE_enum("converted_model", "auto", list(model_kinds()), model_kinds_help())
flags.DEFINE_enum("direction", "tf1_to_tf2", list(DIRECTIONS),
                  "tf1: Google's names; tf2: albert_tf's checkpoints; hf: a Hugging Face transformers folder.")
flags.DEFINE_string("spm_model_file", None, "*_to_hf: the SentencePiece model, written as the folder's "
                    "tokenizer (spiece.model + tokenizer_config.json).")
flags.DEFINE_bool("do_lower_case", True, "*_to_hf with --spm_model_file: whether the tokenizer lower-cases.")
flags.DEFINE_bool("allow_missing_heads", False,
                  "Leave head variables the checkpoint lacks at their initial values "
                  "(TF-Hub modules have no sentence-order head, transformers' AlbertForMaskedLM neither, "
                  "nor a pooler).")
flags.DEFINE_bool("init_from_group0", False,
                  "Read every group's weights from group_0 (start a multi-group model "
                  "from a one-group checkpoint).")
REQUIRED = ("checkpoint_to_convert", "converted_checkpoint")


@reports_errors
def main(argv) -> int:
    del argv
    require_flags(FLAGS, *REQUIRED)
    from albert_tf.conversion import convert

    done = convert(FLAGS.checkpoint_to_convert, FLAGS.converted_checkpoint, FLAGS.direction,
                   kind=FLAGS.converted_model, config_file=FLAGS.albert_config_file,
                   spm_model_file=FLAGS.spm_model_file, do_lower_case=FLAGS.do_lower_case,
                   allow_missing_heads=FLAGS.allow_missing_heads, init_from_group0=FLAGS.init_from_group0)
    print(done.report.summary())
    if done.already_there:  # an earlier run of this command, interrupted after its files were in place
        print(f"{done.written} already holds this {done.kind} checkpoint ({FLAGS.direction}), byte for byte: "
              f"kept as it is")
    else:
        print(f"wrote {done.kind} checkpoint ({FLAGS.direction}) to {done.written}")
    if done.config_written:
        print(f"wrote its config to {done.config_written}")
    return 0


run = entry_point(main)


if __name__ == "__main__":
    run()
