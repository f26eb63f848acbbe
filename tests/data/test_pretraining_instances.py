"""The instance algorithm's pieces: word-start rule, truncation, SOP cases, permutation, WordPiece mode."""
import random

import numpy as np
import tensorflow as tf

from albert_tf.pretraining_data.features import parse_example
from albert_tf.pretraining_data.instances import (
    InstanceOptions,
    InstanceStats,
    VocabInfo,
    create_instances_from_document,
    is_start_piece_sp,
    truncate_seq_pair,
)
from albert_tf.pretraining_data.pipeline import create_pretraining_data


def test_start_piece_rule():
    for piece in ["▁the", "<unk>", ",", ".", "'", "2", "1,000", "é", "北京", "▁", "ed2"]:
        assert is_start_piece_sp(piece), piece
    for piece in ["ing", "Ab", "xt", ".,", "s-"]:
        assert not is_start_piece_sp(piece), piece


def test_truncate_seq_pair_trims_longer_side():
    a, b = list(range(10)), list(range(100, 103))
    truncate_seq_pair(a, b, 8, random.Random(0))
    assert len(a) == 5 and len(b) == 3 and b == [100, 101, 102]
    assert a == list(range(a[0], a[0] + 5))  # trimmed only at the ends


def _vocab():
    # ids 0..4 specials; 10..19 word starts, 20..29 continuations
    is_start = bytes(1 if i < 20 else 0 for i in range(30))
    return VocabInfo(cls_id=2, sep_id=3, mask_id=4, vocab_size=30, is_start=is_start)


def test_single_sentence_documents_take_b_from_another_document():
    docs = [[[10, 20, 21, 11]], [[12, 13, 22]], [[14, 15, 16, 17]]]
    stats = InstanceStats()
    options = InstanceOptions(max_seq_length=16, max_predictions_per_seq=4, short_seq_prob=0.0)
    instances = create_instances_from_document(docs, 0, options, _vocab(), random.Random(3), stats)
    assert len(instances) == 1 and instances[0].is_random_next
    assert stats.sop_random_document == 1 and stats.sop_swapped == stats.sop_in_order == 0
    tokens = instances[0].tokens
    first_sep = instances[0].segment_ids.index(1) - 1
    assert tokens[0] == 2 and tokens[first_sep] == 3 and tokens[-1] == 3


def test_multi_sentence_documents_swap_about_half():
    docs = [[[10, 11], [12, 13], [14, 15], [16, 17]] * 3 for _ in range(4)]
    stats = InstanceStats()
    options = InstanceOptions(max_seq_length=9, max_predictions_per_seq=2, short_seq_prob=0.0)
    rng = random.Random(5)
    for _ in range(300):
        create_instances_from_document(docs, 0, options, _vocab(), rng, stats)
    assert stats.sop_random_document == 0
    assert abs(stats.sop_swapped / (stats.sop_swapped + stats.sop_in_order) - 0.5) < 0.05


def _small_corpus(tmp_path):
    corpus = tmp_path / "small.txt"
    text = "\n".join(f"The quick brown fox number {i} jumps over the lazy dog again." for i in range(40))
    corpus.write_text(text + "\n\n" + text.replace("fox", "cat") + "\n", encoding="utf-8")
    return corpus


def test_do_permutation_doubles_masked_slots(tmp_path, spm_model, make_config):
    out = tmp_path / "perm.tfrecord"
    create_pretraining_data(make_config(_small_corpus(tmp_path), spm_model, [out], do_permutation=True,
                                        max_seq_length=32, max_predictions_per_seq=4))
    ds = tf.data.TFRecordDataset(str(out)).map(lambda s: parse_example(s, 32, 8))
    rows = list(ds.as_numpy_iterator())
    assert rows and all(r["masked_lm_positions"].shape == (8,) for r in rows)
    assert max(int(r["masked_lm_weights"].sum()) for r in rows) > 4  # permuted positions too


def test_wordpiece_vocab_mode(tmp_path, make_config):
    words = ["the", "quick", "brown", "fox", "cat", "number", "jumps", "over", "lazy", "dog", "again", "."]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words + [str(i) for i in range(10)] + ["##0"]
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    out = tmp_path / "wp.tfrecord"
    summary = create_pretraining_data(make_config(_small_corpus(tmp_path), None, [out], vocab_file=str(vocab_file),
                                                  max_seq_length=32, max_predictions_per_seq=5))
    assert summary["instances"] > 0
    assert summary["vocab_size"] == len(vocab) and summary["vocab_type"] == "wordpiece"
    rows = list(tf.data.TFRecordDataset(str(out)).map(lambda s: parse_example(s, 32, 5)).as_numpy_iterator())
    ids = np.concatenate([r["input_ids"] for r in rows])
    assert ids.max() < len(vocab)
    for r in rows:  # one [CLS], first; a masked position may also hold id 2 (a random replacement)
        masked = r["masked_lm_positions"][r["masked_lm_weights"] > 0]
        unmasked_cls = [i for i in np.nonzero(r["input_ids"] == 2)[0] if i not in masked]
        assert unmasked_cls == [0]
    # "10" .. "39" split as "1", "##0": a "##" piece never starts a word.
    hash0 = vocab.index("##0")
    seen = 0
    for r in rows:
        masked = set(r["masked_lm_positions"][r["masked_lm_weights"] > 0].tolist())
        for i in np.nonzero(r["input_ids"] == hash0)[0]:
            if i not in masked:
                assert r["token_boundary"][i] == 0
                seen += 1
    assert seen > 0


def test_unknown_pieces_start_words_by_their_text_as_in_the_original(tmp_path, spm_model, make_config,
                                                                    botchan_corpus):
    """Cased text with 30k-clean (a lower-case vocabulary): 'Hello' is '▁', 'H', 'ello' and 'H' is unknown.
    The original decided word starts by the piece's text ('H' continues the word); the unk id's own piece
    '<unk>' would start one. token_boundary (and so whole-word masking) must follow the text, and the
    records must hold only the vocabulary's ids (the unk id for every unknown piece)."""
    import sentencepiece

    from albert_tf.pretraining_data.reading import tokenize_documents
    from albert_tf.tokenization import FullTokenizer, preprocess_text

    # Lines without digits: there SentencePiece's own pieces are the original's (no digit-comma rule).
    lines = [line for line in botchan_corpus.read_text(encoding="utf-8").splitlines()
             if line.strip() and not any(ch.isdigit() for ch in line)][:400]
    sp = sentencepiece.SentencePieceProcessor(model_file=spm_model)
    pieces = [piece for line in lines for piece in sp.encode(preprocess_text(line, lower=False), out_type=str)]
    expected = [is_start_piece_sp(piece) for piece in pieces]
    unknown_continuations = sum(not start and sp.piece_to_id(piece) == sp.unk_id()
                                for piece, start in zip(pieces, expected))
    assert unknown_continuations > 100  # the case under test is common in cased text

    tokenizer = FullTokenizer(spm_model_file=spm_model, do_lower_case=False)
    vocab = VocabInfo.from_tokenizer(tokenizer)
    documents, _ = tokenize_documents(tokenizer, False, [lines])
    got = [bool(vocab.is_start[i]) for document in documents for sentence in document for i in sentence]
    assert got == expected

    corpus = tmp_path / "cased.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "cased.tfrecord"
    create_pretraining_data(make_config(corpus, spm_model, [out], do_lower_case=False))
    unk_inside_words = 0
    for record in tf.data.TFRecordDataset(str(out)).map(lambda s: parse_example(s, 64, 10)).as_numpy_iterator():
        ids, boundary = record["input_ids"], record["token_boundary"]
        assert ids.max() < tokenizer.vocab_size and record["masked_lm_ids"].max() < tokenizer.vocab_size
        unk_inside_words += int(np.sum((ids == sp.unk_id()) & (boundary == 0)))
    assert unk_inside_words > 0
