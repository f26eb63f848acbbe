"""TFTokenizer: same ids as the reference in graph mode, inside tf.data and after a SavedModel round trip."""
import pytest
import tensorflow as tf

from albert_tf.tokenization import TFTokenizer


_CACHE = {}


@pytest.fixture
def tf_tokenizer(shared):
    # One instance per test module, so its tf.functions are traced once.
    path = shared("data", "spm", "30k-clean.model")
    if path not in _CACHE:
        _CACHE[path] = TFTokenizer(path, do_lower_case=True)
    return _CACHE[path]


def test_all_reference_lines(tf_tokenizer, reference_rows):
    texts = tf.constant([row["text"] for row in reference_rows])
    ids = tf_tokenizer.tokenize(texts)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    pieces = tf_tokenizer.tokenize_pieces(texts).to_list()
    id_rows = ids.to_list()
    bad = [
        row["text"]
        for row, got_ids, got_pieces in zip(reference_rows, id_rows, pieces)
        if got_ids != row["ids"] or [p.decode("utf-8") for p in got_pieces] != row["pieces"]
    ]
    assert not bad, f"{len(bad)} of 848 lines differ, first: {bad[:3]}"


def test_special_ids(tf_tokenizer):
    assert (tf_tokenizer.cls_id, tf_tokenizer.sep_id, tf_tokenizer.mask_id) == (2, 3, 4)
    assert tf_tokenizer.vocab_size == 30000


def test_inside_tf_data(tf_tokenizer, reference_rows):
    rows = reference_rows[:40]
    ds = tf.data.Dataset.from_tensor_slices([row["text"] for row in rows]).batch(8)
    ds = ds.map(tf_tokenizer.tokenize)
    got = [ids for batch in ds for ids in batch.to_list()]
    assert got == [row["ids"] for row in rows]


def test_saved_model_round_trip(tf_tokenizer, reference_rows, tmp_path):
    export_dir = str(tmp_path / "tokenizer")
    tf.saved_model.save(tf_tokenizer, export_dir)
    restored = tf.saved_model.load(export_dir)
    rows = reference_rows[:30]
    got = restored.tokenize(tf.constant([row["text"] for row in rows])).to_list()
    assert got == [row["ids"] for row in rows]
    assert restored.tokenize(rows[0]["text"]).to_list() == [rows[0]["ids"]]  # one string: one row


def test_cased(shared):
    cased = TFTokenizer(shared("data", "spm", "30k-clean.model"), do_lower_case=False)
    pieces = cased.tokenize_pieces(tf.constant(["This is a test"])).to_list()[0]
    assert [p.decode("utf-8") for p in pieces] == ["▁", "T", "his", "▁is", "▁a", "▁test"]


def test_errors(tmp_path, shared):
    with pytest.raises(FileNotFoundError, match="not found"):
        TFTokenizer(tmp_path / "missing.model")
    bogus = tmp_path / "bogus.model"
    bogus.write_bytes(b"\x00\x01 not a model")
    with pytest.raises(ValueError, match="is not a SentencePiece model"):
        TFTokenizer(bogus)
    with pytest.raises(ValueError, match=r"\[CLS\]"):
        TFTokenizer(shared("data", "spm", "sentencepiece_test_model.model"))


def test_matches_python_on_unicode_edge_cases(tf_tokenizer, shared):
    # Beyond the reference: whitespace outside ASCII, compatibility forms, case edge cases, empty input.
    from albert_tf.tokenization import FullTokenizer

    python = FullTokenizer(spm_model_file=shared("data", "spm", "30k-clean.model"))
    texts = ["a ¨b ¨", "ﬁne ﬂow", "İstanbul", "ΣΑΣ ΟΔΟΣ", "x\u0301y", "\u3000full\u2003width ", "½ ², 3²,",
             "Ⅻ, ①,", "٣,٤", "1,000,\u00a0", "\x1cA\x1fB\x85C", "", "   ", "ǅemal", "ẞtraße", "ﬀ1,",
             "The first part.\x00 The second part", "a\x00b"]  # tf.strings.lower alone stops at a NUL
    got = tf_tokenizer.tokenize(tf.constant(texts)).to_list()
    assert got == [python.tokenize_to_ids(t) for t in texts]


def test_matches_python_on_real_mrpc_numbers(tf_tokenizer, shared):
    """Every MRPC sentence with a digit: numbers like "1,666.58", "(888)" or "$900000" split into pieces
    that score exactly the same either way ("666" as 6|66 or 66|6). tensorflow-text's SentencepieceTokenizer
    broke such ties otherwise than the Python tokenizer the drivers use (4 of these sentences differed)."""
    from albert_tf.glue.processors import get_processor
    from albert_tf.tokenization import FullTokenizer

    python = FullTokenizer(spm_model_file=shared("data", "spm", "30k-clean.model"))
    glue = shared("data", "glue")
    processor = get_processor("mrpc")
    texts = sorted({text for split in ("train", "dev", "test") for example in processor.iter_examples(glue, split)
                    for text in (example.text_a, example.text_b) if any(c.isdigit() for c in text)})
    assert len(texts) > 2000
    got = tf_tokenizer.tokenize(tf.constant(texts)).to_list()
    bad = [(text, ids) for text, ids in zip(texts, got) if ids != python.tokenize_to_ids(text)]
    assert not bad, f"{len(bad)} of {len(texts)} differ, first: {bad[:2]}"


def test_one_string_is_one_row_and_more_dimensions_a_clear_error(tf_tokenizer, spm_model_path):
    """tensorflow-text's tokenizers take a scalar string; ours gave TensorFlow's binding error for it.
    A scalar is a batch of one (the ragged [N, None] type stays the same); a 2-D batch is refused
    with a message naming what is expected, not tokenized cell by cell."""
    from albert_tf.tokenization import FullTokenizer

    python = FullTokenizer(spm_model_file=spm_model_path)
    text = "Hello, 1,000, worlds!"
    assert tf_tokenizer.tokenize(text).to_list() == [python.tokenize_to_ids(text)]
    assert tf_tokenizer.tokenize(tf.constant(text)).to_list() == [python.tokenize_to_ids(text)]
    assert [[p.decode("utf-8") for p in row] for row in tf_tokenizer.tokenize_pieces(text).to_list()] == [
        python.tokenize(text)]
    assert tf_tokenizer.tokenize(tf.constant([], tf.string)).to_list() == []
    for method in (tf_tokenizer.tokenize, tf_tokenizer.tokenize_pieces):
        with pytest.raises(tf.errors.InvalidArgumentError, match="expects one string or a 1-D batch of strings"):
            method(tf.constant([["a b", "c"]]))


def test_long_texts_start_as_in_python(tf_tokenizer, spm_model_path, shared):
    """Documented limit (README, "very long texts"): past about 85,000 characters both tokenizers' float32
    path scores round near-equal segmentations differently. The start of a text never depends on what
    follows it (no piece spans a space), so the first 15,000 ids, far more than serving keeps, are Python's."""
    import json

    from albert_tf.tokenization import FullTokenizer

    python = FullTokenizer(spm_model_file=spm_model_path)
    contexts = [paragraph["context"]
                for name in ("dev-v1.1.Super_Bowl_50.json", "dev-v2.0.first5articles.json",
                             "train-v1.1.University_of_Notre_Dame.json")
                for article in json.loads(shared("data", "squad", name).read_text(encoding="utf-8"))["data"]
                for paragraph in article["paragraphs"]]
    texts = [" ".join(contexts), shared("data", "corpus", "botchan.txt").read_text(encoding="utf-8")]
    assert min(map(len, texts)) > 180_000
    got = tf_tokenizer.tokenize(tf.constant(texts)).to_list()
    for text, ids in zip(texts, got):
        expected = python.tokenize_to_ids(text)
        assert ids[:15_000] == expected[:15_000]
        # Python's own: the ids of a prefix of the text alone (whole words, 70,000 characters) start it.
        prefix_ids = python.tokenize_to_ids(text[:text.index(" ", 70_000)])
        assert len(prefix_ids) > 14_000 and prefix_ids == expected[:len(prefix_ids)]
