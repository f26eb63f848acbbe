"""create_pretraining_data as an Apache Beam pipeline (--runner=beam): the same files as the local tool,
on one machine's DirectRunner or on Dataflow, Flink or Spark.

The pipeline (stages in `beam_stages`, files in `beam_io`):

  input byte ranges -> read and tokenize (documents numbered in corpus order from per-range counts)
  documents -> plans of every pass -> requests keyed by the drawn "other document"
  join(documents, requests) on the other document -> fragments keyed by the requesting document
  join(documents, fragments) on the document -> instances, each with its 64-bit key, by key range
  group by key range -> sort within the range -> each shard's share as a piece -> pieces concatenated

The global shuffle is the engine's: key ranges, a group by range, a sort inside each range (as
TensorFlow Datasets' BeamWriter), with ranges sized so that one fits a worker's memory; the order is
that of (key, pass, document, instance), which is the local tool's order. No worker holds the corpus.

Outputs and pieces are written under a temporary directory next to the first output (or --tmp_dir)
and renamed into place only when the pipeline has succeeded; on any failure that directory is
removed and a data error (file:line, empty input) is raised with the local tool's message.
Pipeline options are checked before anything runs (a bad value or an option Beam does not know is
one line). While the pipeline runs, this process's stderr (which local worker processes inherit)
goes to a temporary file: a data error then shows only its line, any other failure replays it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import io
import json
import logging
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
import traceback
import uuid
from typing import IO, Iterator

from albert_tf.fileio import signals_deferred, sync_to_disk, umask_mode
from albert_tf.pretraining_data.config import (
    PipelineConfig,
    PretrainingDataError,
    check_tokenizer,
    validate,
)
from albert_tf.pretraining_data.outputs import (WRITE_PROBLEMS, check_outputs, outputs_locked, part_name,
                                                reporting_write_problems, summary_path)
from albert_tf.pretraining_data.summary import build_summary, write_summary_json

# Beam's own DirectRunner first tries to download the Prism runner; the Python one runs offline.
DEFAULT_PIPELINE_OPTIONS = "--runner=FnApiRunner"


def _build(pipeline, config: PipelineConfig, sizes: tuple[int, ...], temp_dir: str, typecode: str,
           max_int: int, record_bytes: int) -> None:
    import apache_beam as beam
    from apache_beam.pvalue import AsSingleton

    from albert_tf.pretraining_data import beam_stages as st
    from albert_tf.pretraining_data.beam_io import file_ranges, write_bytes
    from albert_tf.pretraining_data.pipeline import choose_num_buckets

    range_bytes = max(1, int(config.block_size_mb * (1 << 20)))
    num_shards = len(config.output_files)
    files = list(enumerate(zip(config.input_files, sizes)))
    blocks = (pipeline | "Files" >> beam.Create(files)
              | "Ranges" >> beam.FlatMap(lambda f: file_ranges(f[0], f[1][0], f[1][1], range_bytes))
              | "Spread" >> beam.Reshuffle()
              | "Tokenize" >> beam.ParDo(st.TokenizeRange(config, typecode)))
    offsets = AsSingleton(blocks | "Counts" >> beam.Map(lambda b: (b[0], len(b[1])))
                          | "AllCounts" >> beam.combiners.ToList()
                          | "Offsets" >> beam.Map(st.document_offsets))
    facts = (blocks | "Facts" >> beam.Map(lambda b: b[2]) | "SumFacts" >> beam.combiners.ToList()
             | "CheckFacts" >> beam.Map(lambda f: st.checked_facts(st.sum_facts(f), config)))
    num_documents = AsSingleton(facts | "NumDocs" >> beam.Map(lambda f: dict(zip(st.FACT_FIELDS, f))["documents"]))
    num_buckets = AsSingleton(facts | "NumBuckets" >> beam.Map(
        lambda f: choose_num_buckets(config, st.corpus_facts(f)[0], record_bytes)))
    documents = blocks | "Number" >> beam.FlatMap(st.number_documents, offsets)

    requests = documents | "Plan" >> beam.FlatMap(st.requests, num_documents, config, typecode)
    fragments = ({"documents": documents, "requests": requests} | "JoinOther" >> beam.CoGroupByKey()
                 | "Fragments" >> beam.FlatMap(st.fragments, typecode))
    made = ({"documents": documents, "fragments": fragments} | "JoinFragments" >> beam.CoGroupByKey()
            | "Instances" >> beam.ParDo(st.MakeInstances(config, typecode, max_int), num_documents,
                                        num_buckets).with_outputs(st.STATS, main="instances"))
    instances = made.instances
    stats = AsSingleton(made[st.STATS] | "MergeStats" >> beam.CombineGlobally(st.MergeStats()))
    first = AsSingleton(instances | "Buckets" >> beam.Keys() | "PerBucket" >> beam.combiners.Count.PerElement()
                        | "BucketCounts" >> beam.combiners.ToList() | "Firsts" >> beam.Map(st.first_instances))
    pieces = (instances | "GroupRange" >> beam.GroupByKey()
              | "SortRange" >> beam.FlatMap(st.write_bucket, first, num_shards, temp_dir))
    shards = pipeline | "Shards" >> beam.Create([(j, None) for j in range(num_shards)])
    written = ({"shards": shards, "pieces": pieces} | "JoinShards" >> beam.CoGroupByKey()
               | "WriteShards" >> beam.Map(st.write_shard, temp_dir))

    def report(_, facts, stats, num_buckets, shards_written):
        payload = {"facts": list(facts), "stats": dataclasses.asdict(stats), "buckets": num_buckets,
                   "shards": sorted(shards_written)}
        write_bytes(f"{temp_dir}/report.json", [json.dumps(payload).encode()])

    (pipeline | "One" >> beam.Create([None])
     | "Report" >> beam.Map(report, AsSingleton(facts), stats, num_buckets, beam.pvalue.AsList(written)))


def data_error_message(error: BaseException) -> str | None:
    """The PretrainingDataError message inside a pipeline failure (a runner wraps or re-raises it, or
    passes a worker's traceback as text), without the runner's step suffix."""
    text = "".join(traceback.format_exception(error))
    found = re.findall(r"PretrainingDataError: (.+)", text)
    if not found:
        return None
    return re.sub(r"\s*\[while running '[^']*'\]$", "", found[0].strip())


def write_problem(error: BaseException) -> OSError | None:
    """The OSError of a write the storage refused inside a pipeline failure (a worker's OSError reaches the
    runner as text: "OSError: [Errno 28] No space left on device [while running ...]"), else None. It keeps
    the file the text names: EACCES may be an input a worker cannot read, which is not a write problem."""
    text = "".join(traceback.format_exception(error))
    for code, reason, _, filename in re.findall(r"\[Errno (\d+)\] ([^:\n[]*)(?:: (['\"])(.*?)\3)?", text):
        if int(code) in WRITE_PROBLEMS:
            return OSError(int(code), reason.strip(), filename or None)
    return None


def checked_pipeline_options(text: str):
    """Beam's ``PipelineOptions`` of ``--beam_pipeline_options``, parsed now: a value Beam rejects or an
    option it does not know is a ``PretrainingDataError`` naming it (Beam's parser would print its usage
    and exit 2 at run time, or silently drop the unknown option, e.g. a misspelt --runner)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    try:
        options = PipelineOptions(shlex.split(text))
    except ValueError as e:  # unbalanced quotes
        raise PretrainingDataError(f"--beam_pipeline_options={text!r}: {e}") from None
    usage = io.StringIO()
    logging.disable(logging.WARNING)  # Beam's "Discarding unparseable args": an error here, below
    try:
        with contextlib.redirect_stderr(usage):
            known = options.get_all_options()
            given = options.get_all_options(retain_unknown_options=True)
    except SystemExit:  # argparse's way of rejecting a value
        reason = usage.getvalue().strip().splitlines()[-1].split("error: ", 1)[-1]
        raise PretrainingDataError(f"--beam_pipeline_options={text!r}: {reason}") from None
    finally:
        logging.disable(logging.NOTSET)
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise PretrainingDataError(f"--beam_pipeline_options={text!r}: Beam has no option "
                                   f"{', '.join('--' + name for name in unknown)}")
    return options


@contextlib.contextmanager
def _stderr_to(log: IO[bytes]) -> Iterator[None]:
    """Points this process's stderr (file descriptor 2, inherited by local worker processes) at ``log``."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _run_quietly(pipeline):
    """Runs ``pipeline`` to its end with the runner's and workers' logs held back: a data error is the
    local tool's one line (its worker traceback says nothing more); any other failure shows them."""
    with tempfile.TemporaryFile() as log:
        try:
            with _stderr_to(log):
                return pipeline.run().wait_until_finish()
        except Exception as error:  # noqa: BLE001 -- a data error inside the pipeline becomes the tool's error
            message = data_error_message(error)
            if message is not None:
                raise PretrainingDataError(message) from None
            problem = write_problem(error)
            if problem is not None:  # a worker could not write (full disk, ...): the local tool's line, below
                raise problem from None
            log.seek(0)
            sys.stderr.write(log.read().decode(errors="replace"))
            raise


def create_pretraining_data_beam(config: PipelineConfig, pipeline_options: str = DEFAULT_PIPELINE_OPTIONS) -> dict:
    """Runs the whole tool as a Beam pipeline; returns the summary (also written as JSON). An output that
    cannot be written is the local runner's one line."""
    with reporting_write_problems(config):
        return _create_pretraining_data_beam(config, pipeline_options)


def _create_pretraining_data_beam(config: PipelineConfig, pipeline_options: str) -> dict:
    import apache_beam as beam
    from apache_beam.io.filesystems import FileSystems

    from albert_tf.pretraining_data import beam_io as bio
    from albert_tf.pretraining_data import beam_stages as st
    from albert_tf.pretraining_data.document_store import token_typecode
    from albert_tf.pretraining_data.features import ExampleSerializer
    from albert_tf.pretraining_data.options import InstanceStats

    options = checked_pipeline_options(pipeline_options)
    validate(config, check_inputs=False)
    tokenizer = check_tokenizer(dataclasses.replace(config, vocab_file=bio.local_copy(config.vocab_file),
                                                    spm_model_file=bio.local_copy(config.spm_model_file)))
    vocab = {"vocab_size": tokenizer.vocab_size,
             "vocab_type": "sentencepiece" if tokenizer.sp_model is not None else "wordpiece"}
    sizes = tuple(m.size_in_bytes for path in config.input_files
                  for m in FileSystems.match([path])[0].metadata_list)
    if len(sizes) != len(config.input_files):
        raise PretrainingDataError(f"--input_file: not found: {', '.join(config.input_files)}")
    max_int = max(tokenizer.vocab_size, config.options.max_seq_length)
    record_bytes = ExampleSerializer(config.options.max_seq_length, config.options.num_masked_slots,
                                     max_int).max_record_bytes()
    check_outputs(config, "beam")
    with outputs_locked(config):  # local outputs (remote storage has no atomic create to lock with)
        start = time.monotonic()
        staged: list[str] = []
        temp_dir = bio.make_temp_dir(config.output_files[0], config.tmp_dir)
        try:
            pipeline = beam.Pipeline(options=options)
            _build(pipeline, config, sizes, temp_dir, token_typecode(tokenizer.vocab_size), max_int, record_bytes)
            state = _run_quietly(pipeline)
            if str(state) not in ("DONE", "PipelineState.DONE"):
                raise RuntimeError(f"the Beam pipeline ended in state {state}")
            with FileSystems.open(f"{temp_dir}/report.json", compression_type=bio.RAW) as f:
                report = json.loads(f.read().decode())
            if report["shards"] != list(range(len(config.output_files))):
                raise RuntimeError(f"the pipeline wrote shards {report['shards']} of {len(config.output_files)}")
            facts, counters = st.corpus_facts(tuple(report["facts"]))
            stats = InstanceStats(**report["stats"])
            for name in ("ngram_draws", "masked_ngram_words"):  # JSON made the n-gram lengths strings
                setattr(stats, name, {int(n): count for n, count in getattr(stats, name).items()})
            shuffle = {"engine": "beam", "buckets": report["buckets"], "pipeline_options": pipeline_options}
            # Local outputs first go beside their final names (a copy when --tmp_dir is on another file
            # system, where a rename fails): what can fail (a full disk) fails before the summary is written.
            staged = [_stage_beside(st.temp_output(temp_dir, j), output)
                      for j, output in enumerate(config.output_files)]
            output_bytes = [FileSystems.get_filesystem(part).size(part) for part in staged]  # renamed as they are
            summary = build_summary(config, stats, counters, facts, vocab, shuffle, time.monotonic() - start,
                                    output_bytes)
            summary["settings"]["runner"] = "beam"
            summary_file = summary_path(config)
            # The summary first, as the local runner: it marks the outputs as this tool's (check_outputs).
            for part in staged:  # as the local runner: on disk before the renames
                if not bio.is_remote(part):
                    sync_to_disk(part)
            with signals_deferred():  # as the local runner: Ctrl-C or SIGTERM waits for the last rename
                if bio.is_remote(summary_file):
                    bio.write_bytes(summary_file, [(json.dumps(summary, indent=2) + "\n").encode()])
                else:
                    write_summary_json(summary_file, summary)
                for source, output in zip(staged, config.output_files):
                    if bio.is_remote(output) or bio.is_remote(source):
                        FileSystems.rename([source], [output])
                    else:
                        os.replace(source, output)
        finally:
            bio.remove_tree(temp_dir)
            for part in staged:
                if not bio.is_remote(part) and os.path.exists(part):
                    os.remove(part)
        summary["summary_file"] = summary_file
        return summary


def _stage_beside(source: str, output: str) -> str:
    """Where the pipeline's ``source`` waits for its rename to local ``output``: a part file beside it,
    moved there by a rename, or copied when ``source`` is on another file system (``--tmp_dir``). A
    remote output is renamed from ``source`` itself."""
    from albert_tf.pretraining_data import beam_io as bio

    if bio.is_remote(output) or bio.is_remote(source):
        return source
    part = part_name(output, uuid.uuid4().hex)
    try:
        os.replace(source, part)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        try:
            shutil.copyfile(source, part)
            os.chmod(part, umask_mode())
        except BaseException:
            if os.path.exists(part):
                os.remove(part)
            raise
    return part
