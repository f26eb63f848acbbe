"""FullTokenizer, preprocess_text, encode_pieces/encode_ids against the reference vectors."""
import types

import pytest

from albert_tf.tokenization import (
    BasicTokenizer,
    FullTokenizer,
    WordpieceTokenizer,
    convert_to_unicode,
    encode_ids,
    encode_pieces,
    preprocess_text,
)


@pytest.fixture
def tokenizer(spm_model_path):
    return FullTokenizer(spm_model_file=spm_model_path, do_lower_case=True)


def test_all_reference_lines_pieces_and_ids(tokenizer, reference_rows):
    mismatches = []
    for row in reference_rows:
        pieces = tokenizer.tokenize(row["text"])
        ids = tokenizer.convert_tokens_to_ids(pieces)
        fast_ids = tokenizer.tokenize_to_ids(row["text"])
        if pieces != row["pieces"] or ids != row["ids"] or fast_ids != row["ids"]:
            mismatches.append((row["text"], pieces, fast_ids))
    assert not mismatches, f"{len(mismatches)} of 848 lines differ, first: {mismatches[:3]}"


def test_module_functions_match_reference(tokenizer, reference_rows):
    sp = tokenizer.sp_model
    for row in reference_rows:
        text = preprocess_text(row["text"], lower=True)
        assert encode_pieces(sp, text) == row["pieces"], row["text"]
        assert encode_ids(sp, text) == row["ids"], row["text"]


def test_tokenize_is_idempotent_with_caller_preprocessing(tokenizer, reference_rows):
    # Google's callers ran preprocess_text themselves; doing both must not change anything.
    for row in reference_rows:
        once = preprocess_text(row["text"], lower=True)
        assert preprocess_text(once, lower=True) == once
        assert tokenizer.tokenize(once) == row["pieces"]


def test_digit_comma_and_accent_cases(tokenizer):
    assert tokenizer.tokenize("Version 3.0,") == ["▁version", "▁3", ".", "0", ","]
    assert tokenizer.tokenize("50,000, 60,000,") == ["▁50,000", ",", "▁", "60,000", ","]
    assert preprocess_text("  Café\tnaïve  ", lower=True) == "cafe naive"
    assert preprocess_text("Café", lower=False) == "Cafe"


def test_do_lower_case_false_keeps_case(spm_model_path):
    cased = FullTokenizer(spm_model_file=spm_model_path, do_lower_case=False)
    assert cased.tokenize("This is a test") == ["▁", "T", "his", "▁is", "▁a", "▁test"]


def test_vocab_and_id_conversion(tokenizer):
    assert len(tokenizer.vocab) == 30000
    assert [tokenizer.vocab[p] for p in ("<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]")] == [0, 1, 2, 3, 4]
    assert tokenizer.inv_vocab[2] == "[CLS]"
    assert tokenizer.convert_ids_to_tokens([48, 25, 21, 1289]) == ["▁this", "▁is", "▁a", "▁test"]
    assert tokenizer.convert_tokens_to_ids(["▁this", "no-such-piece"]) == [48, 1]


def test_missing_model_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        FullTokenizer(spm_model_file=tmp_path / "nope.model")


def test_a_folder_given_as_the_model_file_is_named_as_one(tmp_path):
    """It said "SentencePiece model file not found" of a folder that exists."""
    with pytest.raises(IsADirectoryError, match=f"^{tmp_path} is a folder; expected the SentencePiece model file"):
        FullTokenizer(spm_model_file=tmp_path)


def test_not_a_model(tmp_path):
    bogus = tmp_path / "bogus.model"
    bogus.write_bytes(b"this is not a sentencepiece model")
    with pytest.raises(ValueError, match="is not a SentencePiece model"):
        FullTokenizer(spm_model_file=bogus)


def test_model_without_albert_pieces(shared):
    # A real SentencePiece model trained on botchan: no [CLS]/[SEP]/[MASK].
    with pytest.raises(ValueError, match=r"lacks the piece\(s\) \[CLS\], \[SEP\], \[MASK\]"):
        FullTokenizer(spm_model_file=shared("data", "spm", "sentencepiece_test_model.model"))


def test_no_model_and_no_vocab():
    with pytest.raises(ValueError, match="vocab_file or an spm_model_file"):
        FullTokenizer()


@pytest.fixture
def wordpiece_vocab(tmp_path):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "want", "##ed",
              "runn", "##ing", ",", ".", "!", "hello", "北", "京", "resume", "the"]
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    return path


def test_wordpiece_tokenizer(wordpiece_vocab):
    tok = FullTokenizer(vocab_file=wordpiece_vocab, do_lower_case=True)
    assert tok.tokenize("UNwant\u00E9d,running!") == ["[UNK]", ",", "runn", "##ing", "!"]
    assert tok.tokenize("unaffable  Hello.") == ["un", "##aff", "##able", "hello", "."]
    assert tok.tokenize("北京 Résumé") == ["北", "京", "resume"]
    assert tok.convert_tokens_to_ids(["un", "##aff"]) == [5, 6]
    assert tok.convert_ids_to_tokens([15, 13]) == ["hello", "."]
    assert tok.tokenize_to_ids("the hello") == [19, 15]
    with pytest.raises(KeyError, match="not in the vocabulary"):
        tok.convert_tokens_to_ids(["zzz"])


def test_basic_tokenizer_cased_and_cleaning():
    assert BasicTokenizer(do_lower_case=False).tokenize(" HeLLo\u00A0wOrld!\x00\u200b ") == ["HeLLo", "wOrld", "!"]
    assert BasicTokenizer(do_lower_case=True).tokenize("Héllo?") == ["hello", "?"]
    vocab = {"[UNK]": 0, "want": 1, "##ed": 2}
    assert WordpieceTokenizer(vocab).tokenize("wanted wantx " + "a" * 201) == ["want", "##ed", "[UNK]", "[UNK]"]


def test_wordpiece_missing_vocab(tmp_path):
    with pytest.raises(FileNotFoundError, match="vocab file not found"):
        FullTokenizer(vocab_file=tmp_path / "vocab.txt")


def test_sentencepiece_model_given_as_the_vocab_file_says_where_it_goes(spm_model_path):
    """FullTokenizer's first argument is vocab_file (as the original's), so FullTokenizer("30k-clean.model")
    read the model as a vocab.txt and said only that a line is not valid UTF-8."""
    with pytest.raises(ValueError, match=r"not valid UTF-8; a SentencePiece model \(\*\.model\) goes in spm_model_file"):
        FullTokenizer(str(spm_model_path))


def test_convert_to_unicode():
    assert convert_to_unicode(b"caf\xc3\xa9") == "café"
    assert convert_to_unicode("x") == "x"
    with pytest.raises(ValueError, match="Unsupported string type"):
        convert_to_unicode(3)


def test_model_and_vocab_files_on_a_remote_filesystem(spm_model_path, reference_rows, tmp_path):
    """gs:// tokenizer files go through tf.io.gfile; TensorFlow's ram:// filesystem stands in for a bucket."""
    import uuid

    import tensorflow as tf

    from albert_tf.tokenization.wordpiece import load_vocab

    root = f"ram://tokenizer-{uuid.uuid4().hex}"
    tf.io.gfile.copy(str(spm_model_path), f"{root}/30k-clean.model")
    remote = FullTokenizer(spm_model_file=f"{root}/30k-clean.model", do_lower_case=True)
    for row in reference_rows[:50]:
        assert remote.convert_tokens_to_ids(remote.tokenize(row["text"])) == row["ids"]
    text = "[PAD]\n[UNK]\nhello\tx\n\nhello\nworld\n"  # a repeated token, a blank line (" "), no final blank
    (tmp_path / "vocab.txt").write_text(text, encoding="utf-8")
    with tf.io.gfile.GFile(f"{root}/vocab.txt", "w") as f:
        f.write(text)
    assert load_vocab(f"{root}/vocab.txt") == load_vocab(tmp_path / "vocab.txt") == {
        "[PAD]": 0, "[UNK]": 1, "hello": 2, " ": 3, "world": 4}
    with pytest.raises(FileNotFoundError, match=f"{root}/missing.model"):
        FullTokenizer(spm_model_file=f"{root}/missing.model")


def _lattice_viterbi_pieces(sp, text: str) -> list[str]:
    """SentencePiece's unigram segmentation as the original's era computed it: v0.1.85's Lattice::Viterbi
    (src/unigram_model.cc), in float32 as there. Nodes are every vocabulary piece starting at each
    character, inserted by start position; each node keeps its best predecessor, the first one on a tie
    (strict >). For text that needs no normalization beyond '▁' for spaces and no unknown characters."""
    import numpy as np

    normalized = "▁" + text.replace(" ", "▁")
    longest = max(len(sp.id_to_piece(i)) for i in range(sp.get_piece_size()))
    n = len(normalized)
    ends: list[list[tuple[int, int, np.float32]]] = [[] for _ in range(n + 1)]  # (start, id, backtrace score)
    best_at = {0: (np.float32(0.0), None)}
    nodes_by_start = []
    for start in range(n):
        for length in range(1, min(longest, n - start) + 1):
            piece = normalized[start:start + length]
            piece_id = sp.piece_to_id(piece)
            if sp.id_to_piece(piece_id) == piece and not sp.is_unknown(piece_id) and not sp.is_control(piece_id):
                nodes_by_start.append((start, length, piece_id))
    assert all(any(s == start for s, _, _ in nodes_by_start) for start in range(n)), "unknown character"
    order = {node: k for k, node in enumerate(nodes_by_start)}  # insertion order, as end_nodes_ holds them
    backtrace: dict[tuple, tuple] = {}
    for position in range(n + 1):
        enders = sorted((node for node in nodes_by_start if node[0] + node[1] == position), key=order.get)
        lefts = [(None, np.float32(0.0))] if position == 0 else [(node, backtrace[node][1]) for node in enders]
        for right in [node for node in nodes_by_start if node[0] == position] + ([None] if position == n else []):
            score = np.float32(0.0) if right is None else np.float32(sp.get_score(right[2]))
            best = None
            for left, left_score in lefts:
                total = np.float32(left_score + score)
                if best is None or total > best[1]:
                    best = (left, total)
            if right is None:
                final = best[0]
            else:
                backtrace[right] = best
    pieces, node = [], final
    while node is not None:
        pieces.append(normalized[node[0]:node[0] + node[1]])
        node = backtrace[node][0]
    return pieces[::-1]


@pytest.mark.parametrize("text", ["call to (888) 382-1222.", "$900000 (about r7.5-million)", "about 2.666 million",
                                  "the nasdaq composite index rose 1.666 points",
                                  "the quick brown fox jumps over the lazy dog"])
def test_segmentation_ties_resolve_as_in_the_originals_sentencepiece(tokenizer, text):
    """Repeated digits make ties between segmentations ('888': '8 88' or '88 8', the same pieces in another
    order), decided by float32 sums and the order of the lattice's nodes. The Python path must decide them
    as the SentencePiece of the original's time (0.1.85's Lattice::Viterbi, ported above); sentencepiece
    0.1.99 / 0.2.0 and tensorflow-text's SentencepieceTokenizer decide '888' the other way (the in-graph
    tokenizer uses its FastSentencepieceTokenizer, which agrees: test_tf_tokenizer.py)."""
    pieces = tokenizer.tokenize(text)
    if any(p.endswith(",") and len(p) > 1 for p in pieces):  # the digit-comma rule re-encodes these pieces
        pytest.fail(f"pick a text without the digit-comma rule: {pieces}")
    assert pieces == _lattice_viterbi_pieces(tokenizer.sp_model, text)


def test_do_lower_case_false_with_an_uncased_model_warns_naming_both_flags(spm_model_path, shared, caplog):
    """Every capital letter becomes <unk> then (parity with the original, which said nothing). The one check
    is used by the fine-tuning drivers, export_model and create_pretraining_data (its check_tokenizer here)."""
    from albert_tf.pretraining_data.config import check_tokenizer
    from albert_tf.tokenization.spm import has_cased_pieces, warn_if_capitals_become_unknown

    # Independently, from the model's .vocab text: only the control pieces carry a capital.
    vocab = shared("data", "spm", "30k-clean.vocab").read_text(encoding="utf-8").splitlines()
    assert {line.split("\t")[0] for line in vocab if line.split("\t")[0].lower() != line.split("\t")[0]} == {
        "[CLS]", "[SEP]", "[MASK]"}
    cased_model = shared("data", "spm", "sentencepiece_test_model.model")  # pieces like ▁The, ▁I
    assert not has_cased_pieces(load_model(spm_model_path)) and has_cased_pieces(load_model(cased_model))
    expected = (f"--do_lower_case=false but --spm_model_file={spm_model_path} has no piece with an upper-case "
                f"letter (an uncased model): every capital letter becomes <unk>. Use --do_lower_case=true with "
                f"this model")
    with caplog.at_level("WARNING"):
        warn_if_capitals_become_unknown(str(spm_model_path), do_lower_case=False)
        assert [r.getMessage() for r in caplog.records] == [expected]
        caplog.clear()
        warn_if_capitals_become_unknown(str(spm_model_path), do_lower_case=True)
        warn_if_capitals_become_unknown(None, do_lower_case=False)
        assert caplog.records == []
        check_tokenizer(types.SimpleNamespace(vocab_file=None, spm_model_file=str(spm_model_path),
                                              do_lower_case=False))
        assert [r.getMessage() for r in caplog.records] == [expected]


def load_model(path):
    import sentencepiece

    return sentencepiece.SentencePieceProcessor(model_file=str(path))
