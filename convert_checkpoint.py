"""Converts ALBERT checkpoints between Google's TF1 format and albert_tf's.

  python convert_checkpoint.py --checkpoint_to_convert=albert_base/model.ckpt-best \
      --albert_config_file=albert_base/albert_config.json \
      --converted_checkpoint=converted/model.ckpt --direction=tf1_to_tf2

`tf2_to_tf1` writes Google's variable names, so the original code and other
tools read our checkpoints. Optimizer slots and global_step are not carried over.
"""
from __future__ import annotations

from absl import app, flags

from albert_tf.cli import reports_errors

FLAGS = flags.FLAGS
flags.DEFINE_string("checkpoint_to_convert", None, "Checkpoint prefix or directory to read.")
flags.DEFINE_string("albert_config_file", None, "albert_config.json of the model.")
flags.DEFINE_string("converted_checkpoint", None, "Prefix to write, e.g. out/model.ckpt.")
flags.DEFINE_enum("converted_model", "pretrainer", ["encoder", "pretrainer"],
                  "Convert the encoder only, or encoder + MLM + sentence-order heads.")
flags.DEFINE_enum("direction", "tf1_to_tf2", ["tf1_to_tf2", "tf2_to_tf1"],
                  "tf1_to_tf2: Google's names -> albert_tf; tf2_to_tf1: the reverse.")
flags.DEFINE_bool("allow_missing_heads", False,
                  "Leave head variables the checkpoint lacks at their initial values "
                  "(TF-Hub modules have no sentence-order head).")
flags.DEFINE_bool("init_from_group0", False,
                  "Read every group's weights from group_0 (start a multi-group model "
                  "from a one-group checkpoint).")
for _name in ("checkpoint_to_convert", "albert_config_file", "converted_checkpoint"):
    flags.mark_flag_as_required(_name)


@reports_errors
def main(argv) -> int:
    del argv
    from albert_tf import AlbertConfig, AlbertModel, AlbertPretrainer
    from albert_tf.checkpoints import CheckpointError, load_checkpoint, save_model_checkpoint, save_tf1_checkpoint

    config = AlbertConfig.from_json_file(FLAGS.albert_config_file)
    model_class = AlbertModel if FLAGS.converted_model == "encoder" else AlbertPretrainer
    model = model_class(config)
    report = load_checkpoint(model, FLAGS.checkpoint_to_convert, allow_missing_heads=FLAGS.allow_missing_heads,
                             init_from_group0=FLAGS.init_from_group0)
    expected = "tf1" if FLAGS.direction == "tf1_to_tf2" else "tf2"
    if report.format != expected:
        raise CheckpointError(f"--direction={FLAGS.direction} expects a {expected} checkpoint, but "
                              f"{report.path} is in {report.format} format")
    print(report.summary())
    save = save_model_checkpoint if FLAGS.direction == "tf1_to_tf2" else save_tf1_checkpoint
    path = save(model, FLAGS.converted_checkpoint)
    print(f"wrote {FLAGS.converted_model} checkpoint ({FLAGS.direction}) to {path}")
    return 0


def run() -> None:
    app.run(main)


if __name__ == "__main__":
    run()
