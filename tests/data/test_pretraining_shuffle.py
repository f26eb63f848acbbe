"""The output order and the "random other document", measured on a corpus whose every token says which
document and sentence it comes from: one uniform permutation of all instances of all passes, B from
anywhere in the corpus, the same bytes whatever the workers or memory settings, temporaries removed."""
import os
import random
import signal
import subprocess
import sys
import time
import tracemalloc

import numpy as np
import pytest

from albert_tf.pretraining_data import pipeline as pretraining_pipeline
from albert_tf.pretraining_data.pipeline import create_pretraining_data

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
NUM_DOCS, MAX_SENTENCES = 300, 30
SEQ, PREDICTIONS = 64, 10


def _tag(doc, sentence):
    return f"d{doc}s{sentence}"


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """(corpus, vocab): NUM_DOCS documents of 3..30 sentences; sentence s of document d is the one-piece word
    'd<d>s<s>' 3..12 times (WordPiece vocab with every tag), so any token names its document and sentence."""
    folder = tmp_path_factory.mktemp("tagged")
    rng = random.Random(0)
    lines = []
    for doc in range(NUM_DOCS):
        for sentence in range(rng.randint(3, MAX_SENTENCES)):
            lines.append(" ".join([_tag(doc, sentence)] * rng.randint(3, 12)))
        lines.append("")
    corpus = folder / "tagged.txt"
    corpus.write_text("\n".join(lines), encoding="utf-8")
    vocab = folder / "vocab.txt"
    words = SPECIALS + [_tag(d, s) for d in range(NUM_DOCS) for s in range(MAX_SENTENCES)]
    vocab.write_text("\n".join(words) + "\n", encoding="utf-8")
    return corpus, vocab


_RUNS = {}


def _run(tagged, make_config, folder, name, **overrides):
    """Runs (cached per settings) and returns (records as raw bytes, parsed rows, summary)."""
    key = (name, tuple(sorted(overrides.items())))
    if key not in _RUNS:
        corpus, vocab = tagged
        out = folder / f"{name}.tfrecord"
        settings = dict(max_seq_length=SEQ, max_predictions_per_seq=PREDICTIONS, dupe_factor=4,
                        block_size_mb=0.005)
        settings.update(overrides)
        summary = create_pretraining_data(make_config(corpus, None, [out], vocab_file=str(vocab), **settings))
        raw = _raw_records(out)
        _RUNS[key] = (raw, _parse(raw), summary)
    return _RUNS[key]


def _raw_records(path):
    import tensorflow as tf

    return list(tf.data.TFRecordDataset(str(path)).as_numpy_iterator())


def _parse(raw):
    import tensorflow as tf

    from albert_tf.pretraining_data.features import parse_example

    return {k: v.numpy() for k, v in parse_example(tf.constant(raw), SEQ, PREDICTIONS).items()}


def _sources(rows):
    """Per instance: (label, [(doc, sentence)] of A, of B), from the unmasked tokens (masked positions
    take their original ids from masked_lm_ids)."""
    out = []
    for k in range(len(rows["input_ids"])):
        ids = rows["input_ids"][k].copy()
        m = int(rows["masked_lm_weights"][k].sum())
        ids[rows["masked_lm_positions"][k][:m]] = rows["masked_lm_ids"][k][:m]
        n = int(rows["input_mask"][k].sum())
        first_sep = int((rows["segment_ids"][k][:n] == 0).sum()) - 1
        tags = [divmod(int(t) - len(SPECIALS), MAX_SENTENCES) for t in ids[:n]]
        out.append((int(rows["next_sentence_labels"][k][0]), tags[1:first_sep], tags[first_sep + 1 : n - 1]))
    return out


def _source_docs(sources):
    docs = []
    for _, a, _ in sources:
        assert len({d for d, _ in a}) == 1, "segment A mixes documents"
        docs.append(a[0][0])
    return np.array(docs)


def _spearman(x, y):
    def ranks(v):
        order = np.argsort(v, kind="stable")
        r = np.empty(len(v))
        r[order] = np.arange(len(v))
        for value in np.unique(v):  # ties share their mean rank
            r[v == value] = r[v == value].mean()
        return r

    return float(np.corrcoef(ranks(np.asarray(x)), ranks(np.asarray(y)))[0, 1])


def test_output_is_one_uniform_permutation(tagged, make_config, tmp_path):
    raw, rows, summary = _run(tagged, make_config, tmp_path, "shuffled")
    docs = _source_docs(_sources(rows))
    n = len(docs)
    assert n == summary["instances"] > 2500

    # Position carries no information about the source document (the old block-wise order: +0.47).
    assert abs(_spearman(np.arange(n), docs)) < 4 / np.sqrt(n)
    # Neighbours from the same document as often as in a random order: sum n_d (n_d - 1) / (n (n - 1)).
    counts = np.bincount(docs)
    expected = float((counts * (counts - 1)).sum()) / (n * (n - 1))
    observed = float(np.mean(docs[1:] == docs[:-1]))
    assert abs(observed - expected) < 4 * np.sqrt(expected / (n - 1)), (observed, expected)
    # All dupe_factor passes are mixed: each pass's instances are spread over the whole output.
    # (The unshuffled run below shows the same measures catch generation order.)
    unshuffled_raw, unshuffled_rows, _ = _run(tagged, make_config, tmp_path, "unshuffled", shuffle=False)
    unshuffled_docs = _source_docs(_sources(unshuffled_rows))
    assert abs(_spearman(np.arange(n), unshuffled_docs)) > 0.2
    assert np.mean(unshuffled_docs[1:] == unshuffled_docs[:-1]) > 10 * expected

    # Every generated instance exactly once: the same multiset of records as the run written in
    # generation order, in another order.
    assert sorted(raw) == sorted(unshuffled_raw) and raw != unshuffled_raw


def test_other_document_is_drawn_from_the_whole_corpus(tagged, make_config, tmp_path):
    _, rows, _ = _run(tagged, make_config, tmp_path, "random_next", random_next_sentence=True)
    far, expected, seen = 0, 0.0, 0
    for label, a, b in _sources(rows):
        a_doc = a[0][0]
        b_docs = {d for d, _ in b}
        assert len(b_docs) == 1, "segment B mixes documents"
        b_doc = b_docs.pop()
        b_sentences = [s for _, s in b]
        # B is consecutive sentences of its document, tokenized like any other (the tags survive).
        assert b_sentences == sorted(b_sentences) and set(b_sentences) == set(range(b_sentences[0],
                                                                                      b_sentences[-1] + 1))
        assert label == int(b_doc != a_doc)  # with random_next_sentence: label 1 <=> another document
        if b_doc == a_doc:
            continue
        seen += 1
        far += abs(b_doc - a_doc) > NUM_DOCS / 4
        # For a uniform draw among the other documents: P(more than a quarter of the corpus away).
        expected += sum(abs(d - a_doc) > NUM_DOCS / 4 for d in range(NUM_DOCS) if d != a_doc) / (NUM_DOCS - 1)
    assert seen > 1000
    share, expected = far / seen, expected / seen
    assert abs(expected - 0.56) < 0.02  # the brief's figure for a uniform draw
    assert abs(share - expected) < 0.04, (share, expected)


def test_sentence_order_labels_from_the_records(tagged, make_config, tmp_path):
    """SOP (no random_next_sentence): label 0 = A then B of one document in order, label 1 = swapped
    (B precedes A) or B from another document (single-segment chunks); swaps are half of the pairs."""
    _, rows, _ = _run(tagged, make_config, tmp_path, "shuffled")
    in_order = swapped = other = 0
    for label, a, b in _sources(rows):
        a_doc, b_doc = a[0][0], b[0][0]
        if a_doc != b_doc:
            assert label == 1
            other += 1
            continue
        a_sentences, b_sentences = {s for _, s in a}, {s for _, s in b}
        if label == 0:
            assert max(a_sentences) < min(b_sentences)
            in_order += 1
        else:
            assert max(b_sentences) < min(a_sentences)
            swapped += 1
    assert in_order + swapped > 2000 and other > 0
    assert abs(swapped / (in_order + swapped) - 0.5) < 0.03


def test_same_bytes_whatever_workers_blocks_and_buckets(tagged, make_config, tmp_path, monkeypatch):
    raw, _, summary = _run(tagged, make_config, tmp_path, "shuffled")
    out = tmp_path / "w2.tfrecord"
    corpus, vocab = tagged
    create_pretraining_data(make_config(corpus, None, [out], vocab_file=str(vocab), max_seq_length=SEQ,
                                        max_predictions_per_seq=PREDICTIONS, dupe_factor=4, num_workers=2,
                                        block_size_mb=0.02))
    assert _raw_records(out) == raw

    # Pieces appended through user space where the kernel cannot copy (another file system, old kernels).
    def no_kernel_copy(*args):
        raise OSError("copy_file_range not supported (simulated)")

    with monkeypatch.context() as patch:
        patch.setattr(os, "copy_file_range", no_kernel_copy, raising=False)
        create_pretraining_data(make_config(corpus, None, [out], vocab_file=str(vocab), max_seq_length=SEQ,
                                            max_predictions_per_seq=PREDICTIONS, dupe_factor=4))
    assert _raw_records(out) == raw

    # Few buckets and little sort memory: buckets (each in files of both workers) are split on disk,
    # never sorted whole, and sorted by both workers at once.
    monkeypatch.setattr(pretraining_pipeline, "MAX_BUCKETS", 2)
    monkeypatch.setattr(pretraining_pipeline, "_max_open_files", lambda: 2)
    limit_mb = 0.1
    small = create_pretraining_data(make_config(corpus, None, [out], vocab_file=str(vocab), max_seq_length=SEQ,
                                                max_predictions_per_seq=PREDICTIONS, dupe_factor=4, num_workers=2,
                                                block_size_mb=0.005, shuffle_bucket_mb=limit_mb))
    assert _raw_records(out) == raw
    assert small["shuffle"]["buckets"] == 2 and small["shuffle"]["bucket_splits"] > 2
    assert 0 < small["shuffle"]["largest_sorted_bytes"] <= limit_mb * 2**20
    assert summary["shuffle"]["temporary_bytes"] > os.path.getsize(out)  # buckets hold the whole output


def _scratch_is_empty(scratch):
    return sorted(os.listdir(scratch)) == []


def test_temporaries_removed_on_success_and_error(tagged, make_config, tmp_path, monkeypatch):
    corpus, vocab = tagged
    scratch = tmp_path / "scratch"
    out = tmp_path / "out.tfrecord"

    def config():
        return make_config(corpus, None, [out], vocab_file=str(vocab), max_seq_length=SEQ,
                           max_predictions_per_seq=PREDICTIONS, dupe_factor=1, tmp_dir=str(scratch))

    create_pretraining_data(config())
    assert _scratch_is_empty(scratch)
    os.remove(out)
    os.remove(f"{out}.summary.json")

    # Failures in each phase after the temporaries exist: nothing left, no output.
    def fail(*args, **kwargs):
        assert os.listdir(scratch), "the failure should come while temporaries exist"
        raise OSError("disk full (simulated)")

    for target, name in ((pretraining_pipeline, "make_instances"), (pretraining_pipeline, "write_bucket")):
        with monkeypatch.context() as patch:
            patch.setattr(target, name, fail)
            with pytest.raises(OSError, match="simulated"):
                create_pretraining_data(config())
        assert _scratch_is_empty(scratch)
        assert sorted(os.listdir(tmp_path)) == ["scratch"]


@pytest.mark.parametrize("signum,workers", [(signal.SIGINT, 2), (signal.SIGTERM, 1)], ids=["SIGINT", "SIGTERM"])
def test_temporaries_removed_on_interrupt(signum, workers, botchan_corpus, spm_model, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(botchan_corpus.read_bytes() * 4)
    proc = subprocess.Popen(
        [sys.executable, os.path.join(REPO, "create_pretraining_data.py"), f"--input_file={corpus}",
         f"--output_file={tmp_path}/out.tfrecord", f"--spm_model_file={spm_model}", f"--tmp_dir={scratch}",
         "--max_seq_length=128", "--dupe_factor=20", f"--num_workers={workers}", "--block_size_mb=0.1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
        # As from a shell: the signal neither blocked nor ignored, whatever this test process inherited or set.
        preexec_fn=lambda: (signal.pthread_sigmask(signal.SIG_UNBLOCK, [signum]),
                            signal.signal(signum, signal.SIG_DFL)),
    )
    try:
        deadline = time.monotonic() + 120
        # Interrupt once instances are being scattered into bucket files.
        while not any(f.startswith("bucket-") for d in os.listdir(scratch) for f in os.listdir(scratch / d)):
            assert proc.poll() is None and time.monotonic() < deadline, "finished before it could be interrupted"
            time.sleep(0.02)
        proc.send_signal(signum)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, (f"parent's handler: {signal.getsignal(signum)}, blocked: "
                                             f"{signal.pthread_sigmask(signal.SIG_BLOCK, [])}; "
                                             + proc.stderr.read()[-2000:])
    assert _scratch_is_empty(scratch)
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "scratch"]


def test_memory_does_not_grow_with_the_corpus(botchan_corpus, spm_model, make_config, tmp_path):
    """Python heap peak (tracemalloc) of in-process runs on 1x and 3x the book: the same, give or take
    0.5 MB. Holding the 3x corpus's token ids as Python ints would add about 5 MB, its instances 1.3 MB."""
    peaks = {}
    for copies in (1, 3):
        corpus = tmp_path / f"book{copies}.txt"
        corpus.write_bytes(botchan_corpus.read_bytes() * copies)
        config = make_config(corpus, spm_model, [tmp_path / f"out{copies}.tfrecord"], dupe_factor=1,
                             block_size_mb=0.05, shuffle_bucket_mb=0.5)
        tracemalloc.start()
        try:
            summary = create_pretraining_data(config)
            peaks[copies] = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert summary["shuffle"]["largest_sorted_bytes"] <= 0.5 * 2**20
    assert os.path.getsize(tmp_path / "out3.tfrecord") > 2.7 * os.path.getsize(tmp_path / "out1.tfrecord")
    assert peaks[3] - peaks[1] < 0.5e6, peaks
