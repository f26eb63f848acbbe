"""Features: layout and truncation as the original, TFRecord round trip, cache keys, no dropped rows."""
import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.data import datasets
from albert_tf.glue import features as F
from albert_tf.glue.processors import InputExample, get_processor, get_task_spec


class WordTokenizer:
    """Whitespace tokenizer with a fixed id per word: makes positions easy to check."""

    def __init__(self):
        self.vocab = {"[CLS]": 2, "[SEP]": 3}
        self.calls = 0

    def tokenize(self, text):
        self.calls += 1
        return text.lower().split()

    def convert_tokens_to_ids(self, tokens):
        return [self.vocab.setdefault(t, 10 + len(self.vocab)) for t in tokens]


def test_truncate_seq_pair_trims_longer_side_ties_trim_b():
    a, b = list("abcdefgh"), list("xyz")
    F.truncate_seq_pair(a, b, 7)
    assert (a, b) == (list("abcd"), list("xyz"))
    a, b = list("abcd"), list("wxyz")
    F.truncate_seq_pair(a, b, 5)  # (4,4)→(4,3)→(3,3)→(3,2)
    assert (a, b) == (list("abc"), list("wx"))
    a, b = list("ab"), list("uvwxyz")
    F.truncate_seq_pair(a, b, 10)
    assert (a, b) == (list("ab"), list("uvwxyz"))


def test_pair_layout_and_padding():
    tok = WordTokenizer()
    spec = get_task_spec("rte")
    f = F.convert_example(InputExample("0", "A b c", "d e", "not_entailment"), spec, 10, tok)
    cls, sep = 2, 3
    ids = tok.convert_tokens_to_ids(["a", "b", "c", "d", "e"])
    assert f.input_ids == [cls, *ids[:3], sep, *ids[3:], sep, 0, 0]
    assert f.input_mask == [1] * 8 + [0] * 2
    assert f.segment_ids == [0] * 5 + [1] * 3 + [0] * 2
    assert f.label_id == 1 and f.is_real_example


def test_truncation_to_max_seq_length():
    tok = WordTokenizer()
    spec = get_task_spec("mrpc")
    f = F.convert_example(InputExample("0", "a1 a2 a3 a4 a5 a6", "b1 b2", "1"), spec, 8, tok)
    # 8 - 3 = 5 tokens: B (2) kept whole, A cut to 3.
    assert f.input_ids == tok.convert_tokens_to_ids(["[CLS]", "a1", "a2", "a3", "[SEP]", "b1", "b2", "[SEP]"])
    assert f.segment_ids == [0, 0, 0, 0, 0, 1, 1, 1]
    single = F.convert_example(InputExample("0", "w1 w2 w3 w4 w5 w6 w7", None, "1"),
                               get_task_spec("cola"), 5, tok)
    assert single.input_ids == tok.convert_tokens_to_ids(["[CLS]", "w1", "w2", "w3", "[SEP]"])
    assert single.input_mask == [1] * 5 and single.segment_ids == [0] * 5


def test_labels_regression_and_test_rows():
    tok = WordTokenizer()
    assert F.convert_example(InputExample("0", "a", "b", 3.8), get_task_spec("sts-b"), 8, tok).label_id == 3.8
    assert F.convert_example(InputExample("0", "a", "b", None), get_task_spec("mnli"), 8, tok).label_id == 0
    assert F.convert_example(InputExample("0", "a", "b", "neutral"), get_task_spec("mnli"), 8, tok).label_id == 2


def _glue_with_stsb(tmp_path, write_tsv, n_rows=5, score="2.5"):
    header = ["index", "genre", "filename", "year", "old_index", "source1", "source2",
              "sentence1", "sentence2", "score"]
    rows = [[str(i), "g", "f", "y", "o", "s", "s", f"first {i} words", f"second {i}", score]
            for i in range(n_rows)]
    write_tsv(tmp_path / "glue" / "STS-B" / "dev.tsv", [header, *rows])
    return tmp_path / "glue"


def _batches(dataset):
    return [{k: v.numpy() for k, v in b.items()} for b in dataset]


def test_cache_roundtrip_and_eval_padding(tmp_path, write_tsv, example_feature_order):
    data_dir = _glue_with_stsb(tmp_path, write_tsv)
    tok = WordTokenizer()
    processor = get_processor("sts-b")
    cache = F.cached_features(processor, data_dir, "dev", tmp_path / "cache", tok, "tok-a", 12)
    assert cache.num_records == 5 and cache.schema == F.REGRESSION_SCHEMA
    batches = _batches(datasets.eval_dataset(cache, batch_size=2))
    assert len(batches) == 3  # 5 real rows + 1 padding row: nothing dropped
    real = np.concatenate([b["is_real_example"] for b in batches])
    assert real.tolist() == [1, 1, 1, 1, 1, 0]
    assert batches[0]["label_ids"].dtype == np.float32 and batches[0]["input_ids"].dtype == np.int32
    np.testing.assert_allclose(np.concatenate([b["label_ids"] for b in batches])[:5], 2.5)
    expected = F.convert_example(processor.get_dev_examples(data_dir)[1], processor.spec, 12, tok)
    assert batches[0]["input_ids"][1].tolist() == expected.input_ids
    assert batches[0]["segment_ids"][1].tolist() == expected.segment_ids
    assert batches[2]["input_mask"][1].sum() == 0  # the padding row
    # The original's record format: parse with its feature names and types.
    record = next(iter(tf.data.TFRecordDataset(cache.record_file)))
    parsed = tf.io.parse_single_example(record, F.feature_spec(12, regression=True))
    assert sorted(parsed) == ["input_ids", "input_mask", "is_real_example", "label_ids", "segment_ids"]
    # Written in deterministic map order (byte order for these names), so a rerun writes the same bytes.
    assert example_feature_order(record.numpy()) == ["input_ids", "input_mask", "is_real_example", "label_ids", "segment_ids"]


def test_cache_reused_until_an_input_changes(tmp_path, write_tsv):
    data_dir = _glue_with_stsb(tmp_path, write_tsv)
    processor, tok, cache_dir = get_processor("sts-b"), WordTokenizer(), tmp_path / "cache"
    first = F.cached_features(processor, data_dir, "dev", cache_dir, tok, "tok-a", 12)
    calls = tok.calls
    again = F.cached_features(processor, data_dir, "dev", cache_dir, tok, "tok-a", 12)
    assert again == first and tok.calls == calls  # reused, nothing re-tokenized
    other_len = F.cached_features(processor, data_dir, "dev", cache_dir, tok, "tok-a", 16)
    other_tok = F.cached_features(processor, data_dir, "dev", cache_dir, tok, "tok-b", 12)
    assert len({first.record_file, other_len.record_file, other_tok.record_file}) == 3
    _glue_with_stsb(tmp_path, write_tsv, score="4.0")  # same size, new contents
    changed = F.cached_features(processor, data_dir, "dev", cache_dir, tok, "tok-a", 12)
    assert changed.record_file != first.record_file
    label = next(iter(datasets.eval_dataset(changed, 5)))["label_ids"].numpy()
    np.testing.assert_allclose(label, 4.0)
    assert not [n for n in os.listdir(cache_dir) if n.endswith(".tmp")]


def test_failed_build_leaves_nothing(tmp_path, write_tsv):
    data_dir = _glue_with_stsb(tmp_path, write_tsv)

    class Broken(WordTokenizer):
        def tokenize(self, text):
            if "3" in text:
                raise RuntimeError("tokenizer failed")
            return super().tokenize(text)

    with pytest.raises(RuntimeError):
        F.cached_features(get_processor("sts-b"), data_dir, "dev", tmp_path / "cache", Broken(), "t", 12)
    assert not (tmp_path / "cache").exists()  # not even the folder the build made for the cache


def test_training_dataset_is_seeded_and_full_batches(tmp_path, write_tsv):
    data_dir = _glue_with_stsb(tmp_path, write_tsv, n_rows=7)
    cache = F.cached_features(get_processor("sts-b"), data_dir, "dev", tmp_path / "c", WordTokenizer(), "t", 12)
    context = tf.distribute.InputContext(num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1)

    def first_ids(seed):
        ds = datasets.train_dataset_fn(cache, 3, seed)(context)
        return [b["input_ids"][:, 2].numpy().tolist() for b in ds.take(4)]

    assert first_ids(1) == first_ids(1)
    assert all(len(b) == 3 for b in first_ids(1))
    assert first_ids(1) != first_ids(2)


def test_real_tokenizer_on_mrpc_dev(shared):
    from albert_tf.tokenization import FullTokenizer

    spm = shared("data", "spm", "30k-clean.model")
    tok = FullTokenizer(spm_model_file=str(spm), do_lower_case=True)
    example = get_processor("mrpc").get_dev_examples(shared("data", "glue"))[0]
    f = F.convert_example(example, get_task_spec("mrpc"), 32, tok)
    a, b = tok.tokenize(example.text_a), tok.tokenize(example.text_b)
    assert len(a) + len(b) > 29  # this pair needs truncation at length 32
    F.truncate_seq_pair(a, b, 29)
    assert f.input_ids == [2, *tok.convert_tokens_to_ids(a), 3, *tok.convert_tokens_to_ids(b), 3]
    assert f.input_ids[1:4] == tok.convert_tokens_to_ids(["▁he", "▁said", "▁the"])
    assert f.label_id == 1 and sum(f.input_mask) == 32
    from albert_tf.tokenization import tokenizer_fingerprint

    fp_lower = tokenizer_fingerprint(str(spm), None, True)
    assert fp_lower != tokenizer_fingerprint(str(spm), None, False)


def test_conversion_logs_progress_with_the_count_of_rows(tmp_path, monkeypatch, write_tsv):
    """Converting a large file (MNLI, QQP: minutes) logs records done of the file's rows, the rate and the
    ETA, as the original's "Writing example N of M" did; it printed nothing until the end."""
    from albert_tf import progress

    monkeypatch.setattr(progress, "PROGRESS_SECONDS", 0.0)  # a line after each record
    logged = []
    monkeypatch.setattr(progress.logging, "info", lambda message, *args: logged.append(message % args))
    rows = [["index", "question", "sentence", "label"]] + [[str(i), f"q {i}", f"s {i}", "entailment"]
                                                          for i in range(5)]
    write_tsv(tmp_path / "QNLI" / "dev.tsv", rows)
    F.cached_features(get_processor("qnli"), tmp_path, "dev", tmp_path / "cache", WordTokenizer(), "words", 16)
    lines = [line for line in logged if line.startswith("Converting ") and ": record " in line]
    assert [line.split(": record ")[1].split(",")[0] for line in lines] == ["1/5", "2/5", "3/5", "4/5", "5/5"]
    assert "records/s" not in lines[-1] and "examples/s = " in lines[-1] and "ETA" in lines[-1]


def test_a_run_building_the_same_features_is_waited_for_and_its_cache_reused(tmp_path, write_tsv, monkeypatch):
    """GLUE's cache names hold the cache key, so two runs sharing --cached_dir at one name have the same
    settings (a sweep over learning rates): the second waits for the first's build and reuses it, rather
    than build it again beside it (their renames interleaving) or stop. Its lock lasts only the build."""
    import json
    import socket
    import subprocess
    import types

    import albert_tf.data.feature_cache as feature_cache
    from albert_tf.processes import process_start_ticks
    from albert_tf.run_lock import output_dir_lock

    data_dir = _glue_with_stsb(tmp_path, write_tsv)
    processor, tok, cache_dir = get_processor("sts-b"), WordTokenizer(), tmp_path / "cache"
    built = F.cached_features(processor, data_dir, "dev", cache_dir, tok, "tok-a", 12)  # the other run's result
    finished = {p: open(p, "rb").read() for p in (built.record_file, built.side_file)}
    for p in finished:
        os.remove(p)
    calls, lock_file = tok.calls, built.record_file + ".lock"
    other = subprocess.Popen(["sleep", "300"])  # the other run, building
    pauses, warnings = [], []

    def other_run_finishes(seconds):
        pauses.append(seconds)
        for p, data in finished.items():
            with open(p, "wb") as f:
                f.write(data)
        os.remove(lock_file)

    try:
        with open(lock_file, "w") as f:
            json.dump({"host": socket.gethostname(), "pid": other.pid,
                       "start_ticks": process_start_ticks(other.pid), "started": "?"}, f)
        monkeypatch.setattr(feature_cache, "time", types.SimpleNamespace(sleep=other_run_finishes), raising=False)
        monkeypatch.setattr(feature_cache.logging, "warning", lambda *a: warnings.append(a[0] % a[1:]))
        with output_dir_lock(str(tmp_path / "out")):
            mine = F.cached_features(processor, data_dir, "dev", cache_dir, tok, "tok-a", 12)
            locked_in_run = os.path.exists(lock_file)
    finally:
        other.kill()
        other.wait()
    assert mine.reused and mine.side == built.side and tok.calls == calls and len(pauses) == 1
    assert not locked_in_run  # not held for the run: no run could write other records at this name
    assert len(warnings) == 1 and "Waiting for the run building" in warnings[0] and built.record_file in warnings[0]
    assert f"pid {other.pid}," in warnings[0]
