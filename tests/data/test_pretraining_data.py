"""create_pretraining_data on the real book text and 30k-clean model: the records' invariants,
the masking statistics measured from the records, and byte-identical output whatever --num_workers.
(Sentence order, measured from records whose tokens name their sentence: test_pretraining_shuffle.py.)"""
import json
import os
import random

import numpy as np
import pytest
import sentencepiece

from albert_tf.pretraining_data.pipeline import create_pretraining_data

CLS, SEP, MASK = 2, 3, 4


def _words(boundary, n, first_sep):
    """Whole words as the masking defines them: a non-start piece joins the previous word."""
    words = []
    for i in range(1, n - 1):
        if i == first_sep:
            continue
        if boundary[i] or not words:
            words.append([i])
        else:
            words[-1].append(i)
    return words


def test_record_structure_and_masking_invariants(botchan_records):
    r = botchan_records
    num = len(r["input_ids"])
    assert num > 3000
    assert r["input_ids"].dtype == np.int32 and r["masked_lm_weights"].dtype == np.float32
    assert r["input_ids"].shape == (num, 64) and r["masked_lm_positions"].shape == (num, 10)
    assert r["next_sentence_labels"].shape == (num, 1)
    for k in range(num):
        n = int(r["input_mask"][k].sum())
        ids, seg, boundary = r["input_ids"][k], r["segment_ids"][k], r["token_boundary"][k]
        assert (r["input_mask"][k][:n] == 1).all() and (r["input_mask"][k][n:] == 0).all()
        assert (ids[n:] == 0).all() and (seg[n:] == 0).all() and (boundary[n:] == 0).all()
        first_sep = int((seg[:n] == 0).sum()) - 1
        # [CLS] A [SEP] B [SEP], both segments non-empty, specials in place (so never masked).
        assert ids[0] == CLS and ids[first_sep] == SEP and ids[n - 1] == SEP
        assert 1 <= first_sep - 1 and first_sep + 1 <= n - 2
        assert (seg[first_sep + 1 : n] == 1).all()
        assert boundary[0] == boundary[first_sep] == boundary[n - 1] == 1
        m = int(r["masked_lm_weights"][k].sum())
        positions = r["masked_lm_positions"][k]
        assert 1 <= m <= 10
        assert (r["masked_lm_weights"][k][:m] == 1).all() and (positions[m:] == 0).all()
        assert (r["masked_lm_ids"][k][m:] == 0).all()
        assert (np.diff(positions[:m]) > 0).all(), "masked positions must be sorted"
        assert positions[0] >= 1 and positions[m - 1] <= n - 2
        assert first_sep not in positions[:m]
        masked = set(positions[:m].tolist())
        for word in _words(boundary, n, first_sep):
            covered = [i in masked for i in word]
            assert all(covered) or not any(covered), f"record {k}: word {word} partly masked"


def test_replacement_shares(botchan_records):
    r = botchan_records
    weights = r["masked_lm_weights"] > 0
    rows = np.nonzero(weights)[0]
    positions = r["masked_lm_positions"][weights]
    labels = r["masked_lm_ids"][weights]
    shown = r["input_ids"][rows, positions]
    total = len(labels)
    assert total > 25000
    mask_share = np.mean(shown == MASK)
    keep_share = np.mean((shown == labels) & (shown != MASK))
    random_share = 1 - mask_share - keep_share
    assert abs(mask_share - 0.8) < 0.03 and abs(keep_share - 0.1) < 0.03 and abs(random_share - 0.1) < 0.03
    assert not np.any(labels == MASK) and not np.any(labels == CLS)


def _masked_runs(flags):
    """Lengths of the runs of consecutive masked words."""
    runs, run = [], 0
    for flag in list(flags) + [False]:
        if flag:
            run += 1
        elif run:
            runs.append(run)
            run = 0
    return runs


def _spec_masking(words, budget, rng, weights=(6, 3, 2)):
    """Which words the spec's masking (ALBERT_SPEC.md) masks: words in random order, for each an n-gram of
    n = 1..3 words with p(n) proportional to 1/n, shorter while over the budget of positions, none
    overlapping a chosen one, until the budget is reached."""
    order = list(range(len(words)))
    rng.shuffle(order)
    covered, chosen, count = set(), set(), 0
    for idx in order:
        if count >= budget:
            break
        n = rng.choices((1, 2, 3), weights)[0]
        while n >= 1:
            ngram = words[idx : idx + n]
            size = sum(len(w) for w in ngram)
            if count + size <= budget:
                break
            n -= 1
        else:
            continue
        positions = {i for w in ngram for i in w}
        if positions & covered:
            continue
        covered |= positions
        count += size
        chosen.update(range(idx, idx + len(ngram)))
    return [i in chosen for i in range(len(words))]


def _run_shares(runs):
    return np.array([np.mean([min(r, 4) == k for r in runs]) for k in (1, 2, 3, 4)])


def test_ngram_lengths_from_the_records(botchan_records):
    """Runs of consecutive masked words in the records (n-grams, merged where adjacent, shortened at the
    budget) against the spec's masking simulated on the same records' words: shares of runs of 1, 2, 3,
    4+ words within 0.03."""
    r = botchan_records
    rng = random.Random(0)
    observed, expected = [], []
    for k in range(len(r["input_ids"])):
        n = int(r["input_mask"][k].sum())
        first_sep = int((r["segment_ids"][k][:n] == 0).sum()) - 1
        words = _words(r["token_boundary"][k], n, first_sep)
        m = int(r["masked_lm_weights"][k].sum())
        masked = set(r["masked_lm_positions"][k][:m].tolist())
        observed += _masked_runs([all(i in masked for i in w) for w in words])
        expected += _masked_runs(_spec_masking(words, min(10, max(1, round(n * 0.15))), rng))
    assert len(observed) > 10000
    assert np.abs(_run_shares(observed) - _run_shares(expected)).max() < 0.03, (
        _run_shares(observed), _run_shares(expected))


def test_summary_statistics(botchan_run, botchan_records, spm_model):
    out, summary = botchan_run
    on_disk = json.loads(open(f"{out}.summary.json", encoding="utf-8").read())
    assert on_disk["instances"] == summary["instances"] == len(botchan_records["input_ids"])
    shares = summary["replacement_shares"]
    assert abs(shares["mask"] - 0.8) < 0.03 and abs(shares["keep"] - 0.1) < 0.03
    assert abs(shares["random"] - 0.1) < 0.03
    labels = botchan_records["next_sentence_labels"][:, 0]
    assert summary["sop_label_counts"] == {"0": int((labels == 0).sum()), "1": int((labels == 1).sum())}
    assert abs(labels.mean() - 0.5) < 0.1
    real_tokens = botchan_records["input_mask"].sum()
    assert summary["mean_tokens"] == pytest.approx(real_tokens / len(labels))
    assert summary["masked_fraction"] == pytest.approx(botchan_records["masked_lm_weights"].sum() / real_tokens)
    assert 0.12 < summary["masked_fraction"] < 0.16
    assert summary["documents"] == 12 and summary["invalid_lines_skipped"] == 0
    # For the trainer's check against albert_config.json's vocab_size.
    assert on_disk["vocab_size"] == sentencepiece.SentencePieceProcessor(model_file=spm_model).get_piece_size()
    assert on_disk["vocab_type"] == "sentencepiece"


def test_same_bytes_with_two_workers_and_shards(botchan_run, botchan_corpus, spm_model, make_config, tmp_path):
    single, summary = botchan_run
    out = tmp_path / "w2.tfrecord"
    summary2 = create_pretraining_data(make_config(botchan_corpus, spm_model, [out], num_workers=2, dupe_factor=4))
    assert out.read_bytes() == single.read_bytes()
    assert summary2["instances"] == summary["instances"]

    # Two shards get the same records round-robin.
    import tensorflow as tf

    shards = [tmp_path / "s0.tfrecord", tmp_path / "s1.tfrecord"]
    sharded = create_pretraining_data(make_config(botchan_corpus, spm_model, shards, num_workers=2, dupe_factor=4))
    parts = [list(tf.data.TFRecordDataset(str(p)).as_numpy_iterator()) for p in shards]
    whole = list(tf.data.TFRecordDataset(str(single)).as_numpy_iterator())
    assert parts[0] == whole[0::2] and parts[1] == whole[1::2]
    # Each output's size as written and its records (run_pretraining compares the size with its input files).
    assert sharded["output_sizes"] == [{"bytes": p.stat().st_size, "records": len(part)}
                                       for p, part in zip(shards, parts)]
    assert json.loads(open(f"{shards[0]}.summary.json").read())["output_sizes"] == sharded["output_sizes"]


def test_seed_changes_output(botchan_corpus, spm_model, make_config, tmp_path):
    outs = []
    for seed in (1, 1, 2):
        out = tmp_path / f"seed{len(outs)}.tfrecord"
        create_pretraining_data(make_config(botchan_corpus, spm_model, [out], dupe_factor=1, random_seed=seed))
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and outs[0] != outs[2]
    assert not [f for f in os.listdir(tmp_path) if ".tmp." in f]


def test_lines_are_the_original_reader_s_carriage_returns_dropped(tmp_path):
    """The original read its input with TensorFlow's GFile.readline, which drops every '\\r': a stray one
    inside a line joined its neighbours ('carriage\\rreturn' one word). This tool read it as a space,
    so such lines made other pieces than the original's. Expected: TensorFlow's own reader."""
    import tensorflow as tf

    from albert_tf.pretraining_data.reading import ReadCounters, iter_blocks

    path = tmp_path / "cr.txt"
    path.write_bytes(b"A lone carriage\rreturn here.\r\nWindows line.\r\n\r\n\rNext\r\rdocument.\r\r\n"
                     b"Old Mac\rline\rends.\n")
    expected, document = [], []
    with tf.io.gfile.GFile(str(path), "r") as f:
        for line in iter(f.readline, ""):
            if line.strip():
                document.append(line)
            elif document:
                expected.append(document)
                document = []
    expected.append(document)
    blocks = iter_blocks((str(path),), 1 << 20, False, ReadCounters())
    assert [document for block, _ in blocks for document in block] == expected


def test_a_document_too_large_for_memory_is_warned_about_as_it_is_read(tmp_path, monkeypatch):
    """A corpus without blank lines is one document, and a document is held whole: memory grew with the
    corpus (16 bytes per byte of text measured) in silence, with no progress line until the document
    ended. Now a warning names the file and line as the document passes LARGE_DOCUMENT_BYTES."""
    from absl import logging

    from albert_tf.pretraining_data import reading

    warnings = []
    monkeypatch.setattr(logging, "warning", lambda fmt, *args: warnings.append(fmt % args))
    monkeypatch.setattr(reading, "LARGE_DOCUMENT_BYTES", 100, raising=False)
    path = tmp_path / "corpus.txt"
    short = "A short document.\n\n"
    long_lines = [f"Sentence number {i} of a long document.\n" for i in range(10)]  # 39-40 bytes each
    path.write_text(short + "".join(long_lines) + "\n" + short + "".join(long_lines), encoding="utf-8")
    blocks = list(reading.iter_blocks((str(path),), 1 << 20, False, reading.ReadCounters()))
    assert [len(document) for block, _ in blocks for document in block] == [1, 10, 1, 10]
    # Crossing 100 bytes on the 3rd line of each long document (lines 3-12 and 16-25): once each.
    assert len(warnings) == 2
    assert warnings[0].startswith(f"{path}:5: one document (no blank line since line 3) is over 0 MB")
    assert warnings[1].startswith(f"{path}:18: one document (no blank line since line 16)")


def test_outputs_reach_the_disk_before_their_renames(botchan_corpus, spm_model, make_config, tmp_path, monkeypatch):
    """Without an fsync before the rename, a power cut soon after the run could leave empty record files under
    a summary that lists them (the renames reached the disk, the data had not)."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append(("sync", os.readlink(f"/proc/self/fd/{fd}"))),
                                                 real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda src, dst: (events.append(("rename", os.path.abspath(src),
                                                                        os.path.abspath(dst))),
                                                         real_replace(src, dst))[1])
    shards = [tmp_path / "s0.tfrecord", tmp_path / "s1.tfrecord"]
    create_pretraining_data(make_config(botchan_corpus, spm_model, shards, dupe_factor=1))
    for shard in shards:
        (src,) = [e[1] for e in events if e[0] == "rename" and e[2] == str(shard)]
        renamed = events.index(("rename", src, str(shard)))
        assert ("sync", src) in events[:renamed], events


def test_progress_lines_report_what_each_phase_counts(spm_model, make_config, tmp_path, capsys):
    """Each phase's progress line gives the counts it makes: tokenizing documents, instances both, writing
    the instances it writes (its lines said "0 documents (0/s)", and tokenizing's "0 instances")."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"Document {d} starts here.\nIt has a second sentence, number {d}.\n"
                              f"And a third one about cats and dogs.\n\n" for d in range(6)), encoding="utf-8")
    capsys.readouterr()
    summary = create_pretraining_data(make_config(corpus, spm_model, [tmp_path / "out.tfrecord"],
                                                  dupe_factor=2, progress_interval=1e-9))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("create_pretraining_data: ")]
    last = {phase: [line for line in lines if line.split()[1] == phase][-1]
            for phase in ("tokenizing", "instances", "writing")}
    documents, instances = summary["documents"], summary["instances"]
    assert documents == 6 and instances > 0
    assert f"| {documents} documents (" in last["tokenizing"] and " instances (" not in last["tokenizing"]
    assert f"| {2 * documents} documents (" in last["instances"]  # each document once per dupe pass
    assert f"| {instances} instances (" in last["instances"]
    assert f"| {instances} instances (" in last["writing"] and " documents (" not in last["writing"], last
