"""BERT's BasicTokenizer + WordPiece, for ALBERT releases that ship a vocab.txt
instead of a SentencePiece model (the Chinese ones)."""
from __future__ import annotations

import os
import unicodedata

from albert_tf.tokenization.text import convert_to_unicode


def load_vocab(vocab_file: str | os.PathLike) -> dict[str, int]:
    """Reads a vocabulary: one token per line, id = line number among distinct tokens.

    As in Google's code, only the first whitespace-separated field counts, so a
    SentencePiece `*.vocab` (piece<TAB>score) also loads; a blank line is " ".
    """
    from albert_tf.fileio import read_bytes  # local, or gs:// through tf.io.gfile

    path = os.fspath(vocab_file)
    data = read_bytes(path)
    if data is None:
        raise FileNotFoundError(f"vocab file not found: {path}")
    vocab: dict[str, int] = {}
    lines = data.split(b"\n")  # at "\n" only, as iterating the file did
    if lines[-1] == b"":
        lines.pop()
    for line_number, raw in enumerate(lines, start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError:
            # FullTokenizer's first argument is vocab_file, so FullTokenizer("30k-clean.model") lands here.
            hint = ("; a SentencePiece model (*.model) goes in spm_model_file (--spm_model_file), not vocab_file"
                    if path.endswith(".model") else "")
            raise ValueError(f"{path}:{line_number}: vocab line is not valid UTF-8{hint}") from None
        token = line.strip().split()[0] if line.strip() else " "
        if token not in vocab:
            vocab[token] = len(vocab)
    if not vocab:
        raise ValueError(f"vocab file {path} is empty")
    return vocab


def _is_whitespace(char: str) -> bool:
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    if char in ("\t", "\n", "\r"):  # counted as whitespace instead
        return False
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char: str) -> bool:
    cp = ord(char)
    # All non-letter/number ASCII counts as punctuation (e.g. "^", "$", "`").
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_cjk_char(cp: int) -> bool:
    """CJK Unified Ideographs blocks (not Hangul/Kana, which are space-separated)."""
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or 0x2B820 <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


class BasicTokenizer:
    """Whitespace/punctuation splitting, CJK isolation, optional lower-casing and accent stripping."""

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case

    def tokenize(self, text: str | bytes) -> list[str]:
        text = self._clean_text(convert_to_unicode(text))
        text = "".join(f" {c} " if _is_cjk_char(ord(c)) else c for c in text)
        split_tokens: list[str] = []
        for token in text.split():
            if self.do_lower_case:
                token = self._strip_accents(token.lower())
            split_tokens.extend(self._split_on_punctuation(token))
        return " ".join(split_tokens).split()

    @staticmethod
    def _strip_accents(text: str) -> str:
        text = unicodedata.normalize("NFD", text)
        return "".join(c for c in text if unicodedata.category(c) != "Mn")

    @staticmethod
    def _split_on_punctuation(text: str) -> list[str]:
        output: list[list[str]] = []
        start_new_word = True
        for char in text:
            if _is_punctuation(char):
                output.append([char])
                start_new_word = True
            else:
                if start_new_word:
                    output.append([])
                start_new_word = False
                output[-1].append(char)
        return ["".join(x) for x in output]

    @staticmethod
    def _clean_text(text: str) -> str:
        output = []
        for char in text:
            cp = ord(char)
            if cp == 0 or cp == 0xFFFD or _is_control(char):
                continue
            output.append(" " if _is_whitespace(char) else char)
        return "".join(output)


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece ("unaffable" -> un ##aff ##able)."""

    def __init__(self, vocab: dict[str, int], unk_token: str = "[UNK]", max_input_chars_per_word: int = 200):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word

    def tokenize(self, text: str | bytes) -> list[str]:
        output_tokens: list[str] = []
        for token in convert_to_unicode(text).split():
            if len(token) > self.max_input_chars_per_word:
                output_tokens.append(self.unk_token)
                continue
            sub_tokens = []
            start = 0
            while start < len(token):
                end = len(token)
                cur_substr = None
                while start < end:
                    substr = token[start:end]
                    if start > 0:
                        substr = "##" + substr
                    if substr in self.vocab:
                        cur_substr = substr
                        break
                    end -= 1
                if cur_substr is None:
                    sub_tokens = None
                    break
                sub_tokens.append(cur_substr)
                start = end
            if sub_tokens is None:
                output_tokens.append(self.unk_token)
            else:
                output_tokens.extend(sub_tokens)
        return output_tokens
