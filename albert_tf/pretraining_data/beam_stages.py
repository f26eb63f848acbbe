"""The work of the Beam pipeline's stages, one DoFn or function each (wired in `beam`).

Documents travel as `document_store` records keyed by their corpus index; the draws are those of the
local tool (`workers.make_instances`): for pass p and document d, `plan_document` then
`instances_from_plans` with random.Random(document_seed(seed, p, d)), then one 64-bit sort key per
instance from the same generator. The "other document" fragments come from a join keyed by the drawn
document: `requests` emits (other, request), `fragments` answers each at the other document, and
`MakeInstances` receives its document's fragments in a second join keyed by the document.
"""
from __future__ import annotations

import collections
import random
from array import array
from typing import Iterable, Iterator

import apache_beam as beam
from apache_beam import pvalue
from apache_beam.transforms.window import GlobalWindows

from albert_tf.pretraining_data.document_store import decode_document, encode_document
from albert_tf.pretraining_data.external_shuffle import bucket_of
from albert_tf.pretraining_data.beam_io import InputRange, concatenate, local_copy, read_range, write_bytes
from albert_tf.pretraining_data.config import PipelineConfig, check_nonempty
from albert_tf.pretraining_data.features import ExampleSerializer
from albert_tf.pretraining_data.instances import instances_from_plans, other_fragment, plan_document
from albert_tf.pretraining_data.masking import VocabInfo
from albert_tf.pretraining_data.options import InstanceStats
from albert_tf.pretraining_data.reading import CorpusFacts, ReadCounters, tokenize_documents
from albert_tf.pretraining_data.workers import document_seed, ordered_key
from albert_tf.data.tfrecord import frame_record
from albert_tf.tokenization import FullTokenizer

STATS = "stats"
# Corpus facts summed over ranges: lines, invalid lines skipped, bytes, documents, sentences, tokens.
FACT_FIELDS = ("lines", "invalid_lines_skipped", "bytes_read", "documents", "sentences", "tokens")


def _tokenizer(config: PipelineConfig) -> FullTokenizer:
    return FullTokenizer(vocab_file=local_copy(config.vocab_file), do_lower_case=config.do_lower_case,
                         spm_model_file=local_copy(config.spm_model_file))


class TokenizeRange(beam.DoFn):
    """An input range -> (range index, its documents as store records, its facts)."""

    def __init__(self, config: PipelineConfig, typecode: str):
        self.config, self.typecode = config, typecode

    def setup(self):
        self.tokenizer = _tokenizer(self.config)

    def process(self, r: InputRange) -> Iterator[tuple]:
        counters = ReadCounters()
        raw_documents = read_range(r, self.config.skip_invalid_lines, counters)
        documents, sentences = tokenize_documents(self.tokenizer, self.config.do_lower_case, raw_documents)
        records = [encode_document(d, self.typecode) for d in documents]
        tokens = sum(len(s) for d in documents for s in d)
        facts = (counters.lines, counters.invalid_lines_skipped, counters.bytes_read, len(records), sentences, tokens)
        yield r.index, records, facts


def document_offsets(counts: Iterable[tuple[tuple[int, int], int]]) -> dict:
    """(range index, documents) pairs -> {range index: the corpus index of its first document}."""
    offsets, running = {}, 0
    for index, n in sorted(counts):
        offsets[index] = running
        running += n
    return offsets


def number_documents(block: tuple, offsets: dict) -> Iterator[tuple[int, bytes]]:
    index, records, _ = block
    for i, record in enumerate(records):
        yield offsets[index] + i, record


def sum_facts(facts: Iterable[tuple]) -> tuple:
    return tuple(map(sum, zip(*facts))) if facts else (0,) * len(FACT_FIELDS)


def corpus_facts(facts: tuple) -> tuple[CorpusFacts, ReadCounters]:
    named = dict(zip(FACT_FIELDS, facts))
    return (CorpusFacts(named["documents"], named["sentences"], named["tokens"]),
            ReadCounters(named["lines"], named["invalid_lines_skipped"], named["bytes_read"]))


def checked_facts(facts: tuple, config: PipelineConfig) -> tuple:
    check_nonempty(config, dict(zip(FACT_FIELDS, facts))["documents"])  # "no text found", as the local tool
    return facts


def requests(document: tuple[int, bytes], num_documents: int, config: PipelineConfig,
             typecode: str) -> Iterator[tuple[int, tuple[int, int, int, float, int]]]:
    """(other document, (document, pass, j, start share, target length)) for each plan whose B comes
    from another document: the j-th such plan of this document in pass p."""
    d, record = document
    lengths = [len(s) for s in decode_document(record, typecode)]
    for p in range(config.dupe_factor):
        plans = plan_document(lengths, d, num_documents, config.options,
                              random.Random(document_seed(config.random_seed, p, d)))
        for j, plan in enumerate(plan for plan in plans if plan.other >= 0):
            yield plan.other, (d, p, j, plan.other_start, plan.target_b_length)


def fragments(joined: tuple, typecode: str) -> Iterator[tuple[int, tuple[int, int, bytes]]]:
    """At the other document: each request's B, sent back keyed by the requesting document."""
    _, groups = joined
    if not groups["requests"]:
        return
    (record,) = groups["documents"]
    document = decode_document(record, typecode)
    for d, p, j, start, target in groups["requests"]:
        yield d, (p, j, array(typecode, other_fragment(document, start, target)).tobytes())


class MakeInstances(beam.DoFn):
    """A document with its fragments -> (bucket, (key, pass, document, k, framed record)) for all passes;
    the instance statistics of each bundle go to the STATS output."""

    def __init__(self, config: PipelineConfig, typecode: str, max_int: int):
        self.config, self.typecode, self.max_int = config, typecode, max_int

    def setup(self):
        options = self.config.options
        self.vocab = VocabInfo.from_tokenizer(_tokenizer(self.config))
        self.serializer = ExampleSerializer(options.max_seq_length, options.num_masked_slots, self.max_int)

    def start_bundle(self):
        self.stats = InstanceStats()

    def process(self, joined: tuple, num_documents: int, num_buckets: int) -> Iterator[tuple[int, tuple]]:
        d, groups = joined
        (record,) = groups["documents"]
        document = decode_document(record, self.typecode)
        lengths = [len(s) for s in document]
        received: dict = collections.defaultdict(dict)
        for p, j, blob in groups["fragments"]:
            tokens = array(self.typecode)
            tokens.frombytes(blob)
            received[p][j] = tokens.tolist()
        config, serialize = self.config, self.serializer.serialize_instance
        for p in range(config.dupe_factor):
            rng = random.Random(document_seed(config.random_seed, p, d))
            plans = plan_document(lengths, d, num_documents, config.options, rng)
            got = received[p]
            instances = instances_from_plans(document, plans, [got[j] for j in range(len(got))], config.options,
                                             self.vocab, rng, self.stats)
            for k, inst in enumerate(instances):
                framed = frame_record(serialize(inst.tokens, inst.segment_ids, inst.token_boundary,
                                                inst.masked_lm_positions, inst.masked_lm_ids,
                                                int(inst.is_random_next)))
                if config.shuffle:
                    key = rng.getrandbits(64)
                else:
                    key = ordered_key(p, d, k, num_documents, config.dupe_factor)
                yield bucket_of(key, num_buckets), (key, p, d, k, framed)

    def finish_bundle(self):
        yield pvalue.TaggedOutput(STATS, GlobalWindows.windowed_value(self.stats))


class MergeStats(beam.CombineFn):
    def create_accumulator(self) -> InstanceStats:
        return InstanceStats()

    def add_input(self, accumulator: InstanceStats, stats: InstanceStats) -> InstanceStats:
        accumulator.merge(stats)
        return accumulator

    def merge_accumulators(self, accumulators: Iterable[InstanceStats]) -> InstanceStats:
        merged = InstanceStats()
        for stats in accumulators:
            merged.merge(stats)
        return merged

    def extract_output(self, accumulator: InstanceStats) -> InstanceStats:
        return accumulator


def piece_path(temp_dir: str, bucket: int, shard: int) -> str:
    return f"{temp_dir}/piece-{bucket:05d}-{shard:05d}"


def temp_output(temp_dir: str, shard: int) -> str:
    return f"{temp_dir}/output-{shard:05d}"


def first_instances(bucket_counts: Iterable[tuple[int, int]]) -> dict[int, int]:
    """(bucket, instances) pairs -> the global position of each bucket's first instance."""
    first, running = {}, 0
    for bucket, n in sorted(bucket_counts):
        first[bucket] = running
        running += n
    return first


def write_bucket(grouped: tuple, first: dict[int, int], num_shards: int, temp_dir: str) -> Iterator[tuple[int, int]]:
    """One key range, sorted by (key, pass, document, k): instance i of the whole order goes to shard
    i % num_shards, as the local tool's round-robin; each shard's share is a piece file. Yields
    (shard, bucket) for each piece written."""
    bucket, entries = grouped
    records = [entry[4] for entry in sorted(entries, key=lambda e: e[:4])]
    for shard in range(num_shards):
        share = records[(shard - first[bucket]) % num_shards :: num_shards]
        if share:
            write_bytes(piece_path(temp_dir, bucket, shard), share)
            yield shard, bucket


def write_shard(joined: tuple, temp_dir: str) -> int:
    """A shard's pieces, in bucket (key range) order, concatenated into its temporary output."""
    shard, groups = joined
    buckets = sorted(groups["pieces"])
    concatenate([piece_path(temp_dir, b, shard) for b in buckets], temp_output(temp_dir, shard))
    return shard
