"""SentencePiece loading and ALBERT's piece rules (encode_pieces / encode_ids)."""
from __future__ import annotations

import os

import sentencepiece as sentencepiece_lib

SPIECE_UNDERLINE = "\u2581"  # "▁": SentencePiece's word-start marker
REQUIRED_PIECES = ("[CLS]", "[SEP]", "[MASK]")


def read_model_bytes(spm_model_file: str | os.PathLike) -> bytes:
    """Reads a SentencePiece model file, failing clearly if it is missing."""
    from albert_tf.fileio import is_dir, read_bytes  # local, or gs:// through tf.io.gfile

    path = os.fspath(spm_model_file)
    data = read_bytes(path)
    if data is None and is_dir(path):
        raise IsADirectoryError(f"{path} is a folder; expected the SentencePiece model file (such as "
                                f"30k-clean.model)")
    if data is None:
        raise FileNotFoundError(f"SentencePiece model file not found: {path}")
    return data


def load_spm_model(spm_model_file: str | os.PathLike) -> sentencepiece_lib.SentencePieceProcessor:
    """Loads and validates a SentencePiece model for ALBERT.

    Raises FileNotFoundError if the file is missing, ValueError if it is not a
    SentencePiece model or lacks one of [CLS], [SEP], [MASK].
    """
    path = os.fspath(spm_model_file)
    return load_spm_model_from_bytes(read_model_bytes(path), source=path)


def load_spm_model_from_bytes(
    model_bytes: bytes, source: str = "<bytes>"
) -> sentencepiece_lib.SentencePieceProcessor:
    """Same as `load_spm_model` for a serialized model; `source` names it in errors."""
    sp_model = sentencepiece_lib.SentencePieceProcessor()
    try:
        sp_model.LoadFromSerializedProto(model_bytes)
    except Exception as err:  # sentencepiece raises RuntimeError/OSError
        raise ValueError(
            f"{source} is not a SentencePiece model (expected a *.model file such as 30k-clean.model): {err}"
        ) from None
    if sp_model.GetPieceSize() <= 0:
        raise ValueError(f"{source} is not a usable SentencePiece model: it has no pieces")
    missing = [p for p in REQUIRED_PIECES if not _has_piece(sp_model, p)]
    if missing:
        raise ValueError(
            f"SentencePiece model {source} lacks the piece(s) {', '.join(missing)} that ALBERT needs "
            f"(an ALBERT model such as 30k-clean.model defines [CLS], [SEP] and [MASK])"
        )
    return sp_model


def has_cased_pieces(sp_model: sentencepiece_lib.SentencePieceProcessor) -> bool:
    """Whether a piece other than the control ones ([CLS], [SEP], [MASK], <unk>, ...) has an upper-case
    letter: none in an uncased model such as every ALBERT release's 30k-clean.model."""
    pieces = sp_model.id_to_piece(list(range(sp_model.GetPieceSize())))
    return any(piece != piece.lower() and piece not in REQUIRED_PIECES and not sp_model.IsControl(i)
               and not sp_model.IsUnknown(i) for i, piece in enumerate(pieces))


def warn_if_capitals_become_unknown(spm_model_file: str | None, do_lower_case: bool) -> None:
    """The one check of every driver that tokenizes: ``--do_lower_case=false`` with an uncased SentencePiece
    model is accepted, as the original, but every capital letter then becomes <unk>: one warning."""
    if do_lower_case or not spm_model_file:
        return
    if not has_cased_pieces(load_spm_model(spm_model_file)):
        from absl import logging

        logging.warning("--do_lower_case=false but --spm_model_file=%s has no piece with an upper-case letter "
                        "(an uncased model): every capital letter becomes <unk>. Use --do_lower_case=true "
                        "with this model", spm_model_file)


def _has_piece(sp_model: sentencepiece_lib.SentencePieceProcessor, piece: str) -> bool:
    piece_id = sp_model.PieceToId(piece)
    return sp_model.IdToPiece(piece_id) == piece


def needs_comma_split(piece: str) -> bool:
    """ALBERT's digit-comma rule: a piece longer than one character ending in a digit then ','."""
    return len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit()


def split_digit_comma(sp_model: sentencepiece_lib.SentencePieceProcessor, piece: str) -> list[str]:
    """Re-encodes a piece like '▁1,000,' as ['▁1,000', ','] (see the reference README, rule 3).

    Google's code meant this; under Python 3 its '▁' comparison mixed bytes and
    str and never fired. We follow the intent, which the reference vectors encode.
    """
    cur_pieces = sp_model.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
    if cur_pieces and piece[0] != SPIECE_UNDERLINE and cur_pieces[0][0] == SPIECE_UNDERLINE:
        if len(cur_pieces[0]) == 1:
            cur_pieces = cur_pieces[1:]
        else:
            cur_pieces[0] = cur_pieces[0][1:]
    cur_pieces.append(piece[-1])
    return cur_pieces


def encode_pieces(
    sp_model: sentencepiece_lib.SentencePieceProcessor,
    text: str,
    return_unicode: bool = True,
    sample: bool = False,
) -> list[str]:
    """SentencePiece pieces of `text` with ALBERT's digit-comma rule applied.

    `text` should already be `preprocess_text`-ed. `return_unicode` is kept for
    signature compatibility with Google's code (pieces are always str here).
    `sample=True` uses subword sampling (nbest 64, alpha 0.1) as the original.
    """
    del return_unicode
    if sample:
        pieces = sp_model.SampleEncodeAsPieces(text, 64, 0.1)
    else:
        pieces = sp_model.EncodeAsPieces(text)
    new_pieces: list[str] = []
    for piece in pieces:
        if needs_comma_split(piece):
            new_pieces.extend(split_digit_comma(sp_model, piece))
        else:
            new_pieces.append(piece)
    return new_pieces


def encode_ids(
    sp_model: sentencepiece_lib.SentencePieceProcessor, text: str, sample: bool = False
) -> list[int]:
    """Ids of `encode_pieces(sp_model, text)` (unknown pieces map to the unk id)."""
    return [sp_model.PieceToId(piece) for piece in encode_pieces(sp_model, text, sample=sample)]
