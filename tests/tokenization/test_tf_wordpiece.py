"""The in-graph WordPiece tokenizer (for vocab.txt releases) agrees with FullTokenizer."""
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
