"""FullTokenizer: Google's ALBERT tokenizer API (SentencePiece or WordPiece)."""
from __future__ import annotations

import os
from typing import Iterable

from albert_tf.tokenization import spm as spm_utils
from albert_tf.tokenization.text import preprocess_text
from albert_tf.tokenization.wordpiece import BasicTokenizer, WordpieceTokenizer, load_vocab


class FullTokenizer:
    """Runs end-to-end tokenization, as Google's `tokenization.FullTokenizer`.

    With `spm_model_file`, `tokenize(text)` applies
    `preprocess_text(text, lower=do_lower_case)` itself (Google's left that to
    the caller; applying it twice gives the same pieces) and then the
    SentencePiece piece rules. Without it, BERT's BasicTokenizer + WordPiece
    on `vocab_file` (vocab.txt) are used.
    """

    def __init__(
        self,
        vocab_file: str | os.PathLike | None = None,
        do_lower_case: bool = True,
        spm_model_file: str | os.PathLike | None = None,
    ):
        self.do_lower_case = do_lower_case
        self.sp_model = None
        self.spm_model_file = os.fspath(spm_model_file) if spm_model_file else None
        if spm_model_file:
            self.sp_model = spm_utils.load_spm_model(spm_model_file)
            self.vocab = {self.sp_model.IdToPiece(i): i for i in range(self.sp_model.GetPieceSize())}
            # Ids whose piece triggers the digit-comma rule, plus unk (whose surface
            # piece is unknown): only texts containing them need the slow path.
            self._slow_path_ids = frozenset(
                [i for piece, i in self.vocab.items() if spm_utils.needs_comma_split(piece)]
                + [self.sp_model.unk_id()]
            )
        else:
            if not vocab_file:
                raise ValueError("FullTokenizer needs a vocab_file or an spm_model_file")
            self.vocab = load_vocab(vocab_file)
            self.basic_tokenizer = BasicTokenizer(do_lower_case=do_lower_case)
            self.wordpiece_tokenizer = WordpieceTokenizer(vocab=self.vocab)
        self.inv_vocab = {v: k for k, v in self.vocab.items()}

    @property
    def vocab_size(self) -> int:
        return self.sp_model.GetPieceSize() if self.sp_model is not None else len(self.vocab)

    def tokenize(self, text: str | bytes) -> list[str]:
        if self.sp_model is not None:
            return spm_utils.encode_pieces(self.sp_model, preprocess_text(text, lower=self.do_lower_case))
        return [
            sub_token
            for token in self.basic_tokenizer.tokenize(text)
            for sub_token in self.wordpiece_tokenizer.tokenize(token)
        ]

    def tokenize_to_ids(self, text: str | bytes) -> list[int]:
        """`convert_tokens_to_ids(tokenize(text))`, faster (used by the data tools)."""
        if self.sp_model is None:
            return self.convert_tokens_to_ids(self.tokenize(text))
        return self.encode_preprocessed_ids(preprocess_text(text, lower=self.do_lower_case))

    def encode_preprocessed_ids(self, text: str) -> list[int]:
        """Ids of already `preprocess_text`-ed text (SentencePiece mode only)."""
        ids = self.sp_model.EncodeAsIds(text)
        if self._slow_path_ids.isdisjoint(ids):
            return ids
        return spm_utils.encode_ids(self.sp_model, text)

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
        if self.sp_model is not None:
            return [self.sp_model.PieceToId(token) for token in tokens]
        ids = []
        for token in tokens:
            try:
                ids.append(self.vocab[token])
            except KeyError:
                raise KeyError(f"token {token!r} is not in the vocabulary") from None
        return ids

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
        if self.sp_model is not None:
            return [self.sp_model.IdToPiece(int(i)) for i in ids]
        return [self.inv_vocab[int(i)] for i in ids]
