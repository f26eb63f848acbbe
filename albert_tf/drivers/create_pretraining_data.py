"""Create ALBERT pretraining TFRecords (masked LM + sentence order) from raw text.

Same flags, defaults and output format as Google's create_pretraining_data.py
(all instances of all passes in one random order; "random other documents"
from the whole corpus), plus: --num_workers (parallel, same output whatever the
count), --num_output_shards, --skip_invalid_lines, --block_size_mb,
--shuffle_bucket_mb (memory bounds), --tmp_dir (temporary disk space, about the
output's size). Memory does not grow with the corpus; TensorFlow is not needed.
Input: one sentence per line, blank lines between documents.

--runner=beam runs the whole tool as an Apache Beam pipeline (pip install 'albert_tf[beam]'), with
--beam_pipeline_options passed to Beam (default: the Python direct runner on this machine; Dataflow,
Flink and Spark in the README): the same output bytes as the local tool for the same flags.

  python create_pretraining_data.py --input_file=corpus/*.txt
    --output_file=out/train.tfrecord --spm_model_file=30k-clean.model
    --max_seq_length=128 --dupe_factor=5 --num_workers=4
"""
import os
import signal
import sys

from absl import app, flags

from albert_tf.cli import closing_summary, reports_errors
from albert_tf.pretraining_data.instances import InstanceOptions
from albert_tf.pretraining_data.beam import DEFAULT_PIPELINE_OPTIONS
from albert_tf.pretraining_data.pipeline import (
    PipelineConfig,
    create_pretraining_data,
    default_summary_file,
    resolve_input_files,
    resolve_output_files,
)

FLAGS = flags.FLAGS

flags.DEFINE_string("input_file", None, "Input raw text file, glob, or comma-separated list of them.")
flags.DEFINE_string("output_file", None,
                    "Output TFRecord file, or comma-separated list of files (instances go round-robin), "
                    "or a prefix when --num_output_shards > 1.")
flags.DEFINE_string("vocab_file", None,
                    "The vocabulary file (WordPiece vocab.txt). Not needed with --spm_model_file.")
flags.DEFINE_string("spm_model_file", None, "The SentencePiece model file (e.g. 30k-clean.model).")
flags.DEFINE_bool("do_lower_case", True,
                  "Whether to lower case the input text. True for uncased models, False for cased ones.")
flags.DEFINE_bool("do_whole_word_mask", True, "Whether to mask whole words rather than single pieces.")
flags.DEFINE_bool("do_permutation", False, "Whether to do the permutation training.")
flags.DEFINE_bool("favor_shorter_ngram", True, "Whether to give shorter n-grams higher probability (1/n).")
flags.DEFINE_bool("random_next_sentence", False,
                  "Whether to also take B from a random other document with probability 0.5 "
                  "(instead of sentence-order swaps).")
flags.DEFINE_integer("max_seq_length", 512, "Maximum sequence length.")
flags.DEFINE_integer("ngram", 3, "Maximum n-gram length (in words) to mask.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation (output is reproducible from it).")
flags.DEFINE_integer("dupe_factor", 40, "Number of times to duplicate the input data (with different masks).")
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float("short_seq_prob", 0.1,
                   "Probability of creating sequences which are shorter than the maximum length.")
flags.DEFINE_integer("num_workers", 0,
                     "Worker processes (0: one per CPU core). The output does not depend on it.")
flags.DEFINE_integer("num_output_shards", 1,
                     "Write this many files <output_file>-0000i-of-0000N (instances go round-robin).")
flags.DEFINE_bool("skip_invalid_lines", False,
                  "Count and skip input lines that are not valid UTF-8 instead of failing.")
flags.DEFINE_float("block_size_mb", 1.0,
                   "Documents are processed in blocks of about this much text (the unit of parallel work). Peak "
                   "memory grows with it, not with the corpus. The output does not depend on it.")
flags.DEFINE_float("shuffle_bucket_mb", 64.0,
                   "The final shuffle sorts at most this many MB of instances in memory at once in each worker. "
                   "The output does not depend on it.")
flags.DEFINE_string("input_file_mode", "r",
                    "The original's open() mode for the input files (\"r\" or \"rb\"); accepted for "
                    "compatibility with no effect: input is always read as UTF-8 bytes here.")
flags.DEFINE_string("tmp_dir", None,
                    "Directory for temporary files (tokenized corpus, about half the input; shuffle buckets, about "
                    "the output's size), removed at the end. Default: the directory of the (first) output file.")
flags.DEFINE_enum("runner", "local", ["local", "beam"],
                  "local: this machine's processes (--num_workers). beam: an Apache Beam pipeline, same output.")
flags.DEFINE_string("beam_pipeline_options", DEFAULT_PIPELINE_OPTIONS,
                    "With --runner=beam: Beam's pipeline options, as on a command line (e.g. \"--runner=DataflowRunner "
                    "--project=P --region=R --temp_location=gs://B/tmp --setup_file=./setup.py\"). Default: the "
                    "Python direct runner (add --direct_running_mode=multi_processing --direct_num_workers=N).")


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects CPU pinning / container limits
    except AttributeError:
        return os.cpu_count() or 1


def _input_files(outputs: tuple[str, ...]) -> tuple[str, ...]:
    if FLAGS.runner == "beam":
        from albert_tf.pretraining_data.beam_io import resolve_inputs  # gs:// and other Beam file systems

        return resolve_inputs(FLAGS.input_file, outputs)[0]
    return resolve_input_files(FLAGS.input_file, outputs)


def _run(config: PipelineConfig) -> dict:
    if FLAGS.runner == "local":
        return create_pretraining_data(config)
    from albert_tf.pretraining_data.beam import create_pretraining_data_beam

    return create_pretraining_data_beam(config, FLAGS.beam_pipeline_options)


def _import_beam() -> None:
    import logging

    logging.getLogger("apache_beam").setLevel(logging.WARNING)  # not every worker's start and stop
    logging.disable(logging.WARNING)  # importing Beam warns about optional Google Cloud clients it lacks
    try:
        import apache_beam  # noqa: F401
    except ImportError:
        raise ValueError("--runner=beam needs Apache Beam: pip install 'albert_tf[beam]'") from None
    finally:
        logging.disable(logging.NOTSET)


def config_from_flags() -> PipelineConfig:
    num_workers = FLAGS.num_workers if FLAGS.num_workers > 0 else _usable_cpus()
    options = InstanceOptions(
        max_seq_length=FLAGS.max_seq_length,
        max_predictions_per_seq=FLAGS.max_predictions_per_seq,
        masked_lm_prob=FLAGS.masked_lm_prob,
        short_seq_prob=FLAGS.short_seq_prob,
        ngram=FLAGS.ngram,
        favor_shorter_ngram=FLAGS.favor_shorter_ngram,
        do_whole_word_mask=FLAGS.do_whole_word_mask,
        do_permutation=FLAGS.do_permutation,
        random_next_sentence=FLAGS.random_next_sentence,
    )
    outputs = resolve_output_files(FLAGS.output_file, FLAGS.num_output_shards)
    return PipelineConfig(
        input_files=_input_files(outputs),
        output_files=outputs,
        vocab_file=FLAGS.vocab_file,
        spm_model_file=FLAGS.spm_model_file,
        do_lower_case=FLAGS.do_lower_case,
        options=options,
        random_seed=FLAGS.random_seed,
        dupe_factor=FLAGS.dupe_factor,
        num_workers=num_workers,
        skip_invalid_lines=FLAGS.skip_invalid_lines,
        block_size_mb=FLAGS.block_size_mb,
        shuffle_bucket_mb=FLAGS.shuffle_bucket_mb,
        tmp_dir=FLAGS.tmp_dir,
        summary_file=default_summary_file(FLAGS.output_file),
    )


def _terminate(signum, frame):
    # As for Ctrl-C: unwind, so that temporary files and partial outputs are removed.
    raise SystemExit(128 + signum)


@reports_errors
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if FLAGS.input_file_mode not in ("r", "rb"):
        raise ValueError(f"--input_file_mode={FLAGS.input_file_mode!r}: expected \"r\" or \"rb\"")
    if FLAGS.runner == "beam":
        _import_beam()
    signal.signal(signal.SIGTERM, _terminate)
    try:
        summary = _run(config_from_flags())
    except KeyboardInterrupt:
        # Cleaned up already. Returned, not raised: reports_errors would import TensorFlow (seconds) to
        # classify any exception that leaves main.
        sys.stderr.write("create_pretraining_data: interrupted; temporary files removed\n")
        return 128 + signal.SIGINT
    except SystemExit as stop:
        sys.stderr.write("create_pretraining_data: terminated; temporary files removed\n")
        return stop.code
    outputs = {"instances": summary["instances"], "output_files": summary["output_files"],
               "summary": summary["summary_file"]}
    print(closing_summary("create_pretraining_data", outputs), flush=True)  # stdout, as every driver's


def run():
    """Console-script entry point (albert-create-pretraining-data)."""
    flags.mark_flags_as_required(["input_file", "output_file"])
    app.run(main)


if __name__ == "__main__":
    run()
