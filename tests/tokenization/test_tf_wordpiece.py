"""The in-graph WordPiece tokenizer (for vocab.txt releases) agrees with FullTokenizer."""
import pytest
import tensorflow as tf

from albert_tf.tokenization import FullTokenizer
from albert_tf.tokenization.tf_wordpiece import TFWordPieceTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "quick", "brown", "fox", "jump", "##s",
         "##ed", ",", ".", "!", "hello", "world", "un", "##aff", "##able", "cafe", "中", "国"]
TEXTS = ["The quick brown fox jumps.", "Hello, World!", "unaffable café", "中国 fox jumped", "xyzzy the"]


def test_same_ids_as_python_wordpiece(tmp_path):
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    python = FullTokenizer(vocab_file=str(vocab_file), do_lower_case=True)
    graph = TFWordPieceTokenizer(str(vocab_file), do_lower_case=True)
    got = graph.tokenize(tf.constant(TEXTS)).to_list()
    want = [python.convert_tokens_to_ids(python.tokenize(t)) for t in TEXTS]
    assert got == want
    assert (graph.cls_id, graph.sep_id, graph.vocab_size) == (2, 3, len(VOCAB))


def test_one_string_is_one_row_and_more_dimensions_a_clear_error(tmp_path):
    """As TFTokenizer: a scalar string (which tensorflow-text's tokenizers take) is a batch of one, also after
    a SavedModel round trip; a 2-D batch is refused naming what is expected, not tokenized cell by cell."""
    vocab_file = tmp_path / "vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    python = FullTokenizer(vocab_file=str(vocab_file), do_lower_case=True)
    graph = TFWordPieceTokenizer(str(vocab_file), do_lower_case=True)
    want = [python.convert_tokens_to_ids(python.tokenize(TEXTS[0]))]
    assert graph.tokenize(TEXTS[0]).to_list() == want
    assert graph.tokenize(tf.constant(TEXTS[0])).to_list() == want
    assert graph.tokenize(tf.constant([], tf.string)).to_list() == []
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match="TFWordPieceTokenizer expects one string or a 1-D batch of strings"):
        graph.tokenize(tf.constant([["the fox", "hello"]]))
    tf.saved_model.save(graph, str(tmp_path / "saved"))
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    assert restored.tokenize(TEXTS[0]).to_list() == want
    assert restored.tokenize(tf.constant(TEXTS)).to_list() == graph.tokenize(tf.constant(TEXTS)).to_list()
