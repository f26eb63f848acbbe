"""The four model inputs of a RACE example, as the original's
`race_utils.convert_single_example` builds them.

Per option j (the original's rules):
- article, question and option each get the tokenizer's text clean-up first
  (SentencePiece: `preprocess_text`, lower-cased with `do_lower_case`; WordPiece:
  none), then the question-option text is the question with every ``_`` replaced
  by the option when the question has one (a cloze), else question and option
  joined by a space;
- tokens ``[CLS] article [SEP] qa [SEP]``: the qa part keeps its *last*
  ``max_qa_length`` tokens (the option is at its end), the article keeps its
  *first* ``max_seq_length - 3 - len(qa)`` tokens when the whole is too long;
- segment ids 0 for ``[CLS] article [SEP]``, 1 for ``qa [SEP]``; input mask 1 on
  tokens; all three zero-padded to ``max_seq_length``.

One case differs: when the qa part is still longer than ``max_seq_length - 3``
after the ``max_qa_length`` cut, the original failed an assertion; here it keeps
its last ``max_seq_length - 3`` tokens and the article none.

A padding example (`data.padding_example`) gives all-zero inputs, as the original.
"""
from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from albert_tf.race.data import NUM_CHOICES, RaceExample
from albert_tf.tokenization.text import convert_to_unicode, preprocess_text

CLS, SEP = "[CLS]", "[SEP]"
BLANK = "_"


class Tokenizer(Protocol):
    """What is used of `albert_tf.tokenization.FullTokenizer`."""

    sp_model: Any
    do_lower_case: bool

    def tokenize(self, text: str) -> list[str]: ...

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]: ...


def clean_text(text: str, tokenizer: Tokenizer) -> str:
    """The original's `process_text`: SentencePiece's clean-up (and lower-casing) or none."""
    if getattr(tokenizer, "sp_model", None) is not None:
        return preprocess_text(text, lower=tokenizer.do_lower_case)
    return convert_to_unicode(text)


def qa_text(question: str, option: str) -> str:
    """Question and option as one text: the option fills every blank of a cloze
    question ("Tom's ball is _ ." -> "Tom's ball is red ."), else follows the question."""
    if BLANK in question:
        return question.replace(BLANK, option)
    return f"{question} {option}"


def choice_texts(example: RaceExample, tokenizer: Tokenizer) -> tuple[str, list[str]]:
    """(article, [qa text of each option]) after the clean-up, before tokenization."""
    question = clean_text(example.question, tokenizer)
    return (clean_text(example.article, tokenizer),
            [qa_text(question, clean_text(option, tokenizer)) for option in example.options])


def check_lengths(max_seq_length: int, max_qa_length: int) -> None:
    if max_seq_length < 4:
        raise ValueError(f"--max_seq_length={max_seq_length} is too small for RACE: [CLS], two [SEP] and at "
                         "least one question/option token need 4")
    if max_qa_length < 1:
        raise ValueError(f"--max_qa_length={max_qa_length} must be at least 1")


def choice_tokens(example: RaceExample, tokenizer: Tokenizer, max_seq_length: int,
                  max_qa_length: int) -> list[tuple[list[str], int]]:
    """Per option: (tokens ``[CLS] article [SEP] qa [SEP]``, length of its first segment)."""
    check_lengths(max_seq_length, max_qa_length)
    article, qas = choice_texts(example, tokenizer)
    article_tokens = tokenizer.tokenize(article)
    qa_budget = min(max_qa_length, max_seq_length - 3)
    choices = []
    for qa in qas:
        qa_tokens = tokenizer.tokenize(qa)[-qa_budget:]
        kept = article_tokens[: max_seq_length - 3 - len(qa_tokens)]
        choices.append(([CLS, *kept, SEP, *qa_tokens, SEP], len(kept) + 2))
    return choices


def choice_inputs(example: RaceExample, tokenizer: Tokenizer, max_seq_length: int,
                  max_qa_length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(input_ids, input_mask, segment_ids), each int32 of shape [4, max_seq_length]."""
    shape = (NUM_CHOICES, max_seq_length)
    input_ids, input_mask, segment_ids = (np.zeros(shape, np.int32) for _ in range(3))
    if not example.is_real:
        check_lengths(max_seq_length, max_qa_length)
        return input_ids, input_mask, segment_ids
    for j, (tokens, first_segment) in enumerate(choice_tokens(example, tokenizer, max_seq_length, max_qa_length)):
        input_ids[j, : len(tokens)] = tokenizer.convert_tokens_to_ids(tokens)
        input_mask[j, : len(tokens)] = 1
        segment_ids[j, first_segment: len(tokens)] = 1
    return input_ids, input_mask, segment_ids
