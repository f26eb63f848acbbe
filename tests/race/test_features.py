"""The four inputs of a RACE example against an independent construction: texts
lower-cased by hand, ids straight from sentencepiece (texts without digits or commas,
where ALBERT's piece rules change nothing), [CLS] article [SEP] qa [SEP] assembled
and truncated here as the original's race_utils does it."""
import numpy as np
import pytest

from albert_tf.race import features
from albert_tf.race.data import RaceExample, padding_example

LONG_ARTICLE = " ".join(f"{name} walked to the old mill and sat by the water for a long while." for name in
                        ["Anna", "Boris", "Clara", "David", "Elena", "Frank", "Greta", "Hugo"])


def example(article="Tom has a red ball. Sue has a blue kite.", question="What colour is Tom's ball?",
            options=("red", "blue", "green", "black"), label=0):
    return RaceExample(id="t", question_index=0, level="middle", article=article, question=question,
                       options=tuple(options), label=label)


def expected_inputs(sp, article, qas, max_seq_length, max_qa_length):
    """[4, S] ids / mask / segments built from sentencepiece ids of lower-cased texts."""
    cls, sep = sp.piece_to_id("[CLS]"), sp.piece_to_id("[SEP]")
    ids, mask, seg = (np.zeros((4, max_seq_length), np.int64) for _ in range(3))
    for j, qa in enumerate(qas):
        qa_ids = sp.encode(qa.lower())[-max_qa_length:]
        art_ids = sp.encode(article.lower())
        art_ids = art_ids[: max_seq_length - 3 - len(qa_ids)]
        row = [cls] + art_ids + [sep] + qa_ids + [sep]
        ids[j, : len(row)] = row
        mask[j, : len(row)] = 1
        seg[j, len(art_ids) + 2: len(row)] = 1
    return ids, mask, seg


def test_qa_text_rules():
    assert features.qa_text("what colour is tom's ball?", "red") == "what colour is tom's ball? red"
    assert features.qa_text("tom's ball is _ .", "red") == "tom's ball is red ."
    assert features.qa_text("_ and _ are friends.", "tom") == "tom and tom are friends."  # every blank
    assert features.qa_text("", "red") == " red"


def test_texts_are_cleaned_before_the_rules(tokenizer):
    ex = example(article="  Tom   has a RED ball. ", question="The Ball of  TOM is ＿ .",  # fullwidth low line
                 options=(" Red ", "Blue", "GREEN", "black"))
    article, qas = features.choice_texts(ex, tokenizer)
    assert article == "tom has a red ball."
    # NFKD turns the fullwidth low line into "_" before the cloze rule, as in the original
    assert qas == ["the ball of tom is red .", "the ball of tom is blue .", "the ball of tom is green .",
                   "the ball of tom is black ."]


def test_wordpiece_tokenizers_get_no_clean_up():
    class WordPiece:
        sp_model = None
        do_lower_case = True

    ex = example(question="Tom's  ball is ＿", options=("Red", "b", "c", "d"))
    article, qas = features.choice_texts(ex, WordPiece())
    assert article == ex.article and qas[0] == "Tom's  ball is ＿ Red"


@pytest.mark.parametrize("case", ["fits", "long article", "long question", "qa longer than the sequence"])
def test_inputs_match_independent_construction(tokenizer, sp, case):
    ex, max_seq_length, max_qa_length = {
        "fits": (example(), 64, 16),
        "long article": (example(article=LONG_ARTICLE), 48, 16),
        "long question": (example(question="After the long walk by the river and the quiet evening at the mill "
                                           "what colour was the ball that Tom had?", article=LONG_ARTICLE), 48, 10),
        "qa longer than the sequence": (example(question="Which of the following colours best describes the "
                                                         "ball that Tom took to the park on Sunday?"), 12, 128),
    }[case]
    qas = [f"{ex.question} {option}" for option in ex.options]
    want = expected_inputs(sp, ex.article, qas, max_seq_length, min(max_qa_length, max_seq_length - 3))
    got = features.choice_inputs(ex, tokenizer, max_seq_length, max_qa_length)
    for name, g, w in zip(("input_ids", "input_mask", "segment_ids"), got, want):
        assert g.shape == (4, max_seq_length) and g.dtype == np.int32, name
        np.testing.assert_array_equal(g, w, err_msg=f"{case}: {name}")


def test_layout_of_each_choice(tokenizer, sp):
    cls, sep = sp.piece_to_id("[CLS]"), sp.piece_to_id("[SEP]")
    ex = example(article=LONG_ARTICLE, question="Where did Anna walk to?",
                 options=("the mill", "the park", "a big old house near the station", "home"))
    ids, mask, seg = features.choice_inputs(ex, tokenizer, 40, 6)
    for j, option in enumerate(ex.options):
        length = int(mask[j].sum())
        assert length == 40  # the long article fills the sequence
        seps = np.flatnonzero(ids[j] == sep).tolist()
        assert ids[j, 0] == cls and len(seps) == 2 and seps[1] == length - 1
        qa = ids[j, seps[0] + 1: seps[1]].tolist()
        assert qa == sp.encode(f"where did anna walk to? {option}")[-6:]  # the last max_qa_length tokens
        assert ids[j, 1: seps[0]].tolist() == sp.encode(LONG_ARTICLE.lower())[: 40 - 3 - len(qa)]  # its start
        assert seg[j, : seps[0] + 1].tolist() == [0] * (seps[0] + 1)  # [CLS] article [SEP]
        assert seg[j, seps[0] + 1: length].tolist() == [1] * (length - seps[0] - 1)  # qa [SEP]
    # the option's last token is always kept, even when the question is cut
    assert ids[2, int(mask[2].sum()) - 2] == sp.encode("station")[-1]


def test_short_inputs_are_zero_padded(tokenizer):
    ids, mask, seg = features.choice_inputs(example(), tokenizer, 64, 16)
    for j in range(4):
        n = int(mask[j].sum())
        assert mask[j, :n].all() and not mask[j, n:].any() and not ids[j, n:].any() and not seg[j, n:].any()
        assert 10 < n < 64


def test_padding_example_is_all_zeros(tokenizer):
    for array in features.choice_inputs(padding_example(), tokenizer, 32, 8):
        assert array.shape == (4, 32) and not array.any()


@pytest.mark.parametrize("max_seq_length, max_qa_length, flag", [(3, 2, "--max_seq_length=3"),
                                                                 (64, 0, "--max_qa_length=0")])
def test_impossible_lengths_are_refused(tokenizer, max_seq_length, max_qa_length, flag):
    with pytest.raises(ValueError, match=flag):
        features.choice_inputs(example(), tokenizer, max_seq_length, max_qa_length)


def original_pieces(sp, text):
    """The original's encode_pieces as it ran under Python 3: a piece ending in digit + "," is split
    into the digits' own pieces and ","."""
    pieces = []
    for piece in sp.encode(text, out_type=str):
        if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
            pieces += sp.encode(piece[:-1].replace("\u2581", ""), out_type=str) + [","]
        else:
            pieces.append(piece)
    return pieces


def original_clean(text):
    """The original's preprocess_text(text, lower=True): spaces collapsed, NFKD, accents dropped, lower case."""
    import unicodedata

    text = unicodedata.normalize("NFKD", " ".join(text.strip().split()))
    return "".join(c for c in text if not unicodedata.combining(c)).lower()


def original_inputs(sp, example, max_seq_length, max_qa_length):
    """race_utils' RaceProcessor.read_examples + convert_single_example, written from its rules."""
    context, question = original_clean(example.article), original_clean(example.question)
    ids, mask, seg = (np.zeros((4, max_seq_length), np.int64) for _ in range(3))
    for j, option in enumerate(example.options):
        option = original_clean(option)
        qa = question.replace("_", option) if "_" in question else " ".join([question, option])
        ending = original_pieces(sp, qa)[-max_qa_length:]
        kept = original_pieces(sp, context)
        if len(kept) + len(ending) > max_seq_length - 3:
            kept = kept[: max_seq_length - 3 - len(ending)]
        tokens = ["[CLS]", *kept, "[SEP]", *ending, "[SEP]"]
        ids[j, : len(tokens)] = [sp.piece_to_id(t) for t in tokens]
        mask[j, : len(tokens)] = 1
        seg[j, len(kept) + 2: len(tokens)] = 1
    return ids, mask, seg


CLOZE_CASES = {
    "cloze, two blanks": (example(article="In 1990, 25,000 people came to the Café of Zoë.",
                                  question="_ people came in 1990, and _ stayed.",
                                  options=("25,000", "Ten", "NAÏVE  ones", "")), 64, 16),
    "fullwidth blank, cut article": (example(article=LONG_ARTICLE + " In 2001, 3,400 came.",
                                             question="Anna walked to ＿ by the water, 2,",
                                             options=("the old mill", "1,000 houses", "“home”", "a park")), 40, 8),
    "no blank, digits": (example(article="Tom, 12, has 1,500 cards.", question="How many cards, 1,",
                                 options=("1,500", "15,00", "150", "Ｆｉｆｔｙ")), 32, 128),
}


@pytest.mark.parametrize("case", list(CLOZE_CASES))
def test_cloze_digits_and_unicode_match_the_original_rules(tokenizer, sp, case):
    """The original's clean-up (accents, fullwidth, case), cloze rule (every "_", after the clean-up) and
    digit-comma pieces, against our tokenizer and features."""
    ex, max_seq_length, max_qa_length = CLOZE_CASES[case]
    want = original_inputs(sp, ex, max_seq_length, max_qa_length)
    got = features.choice_inputs(ex, tokenizer, max_seq_length, max_qa_length)
    for name, g, w in zip(("input_ids", "input_mask", "segment_ids"), got, want):
        np.testing.assert_array_equal(g, w, err_msg=f"{case}: {name}")
    assert len(set(map(bytes, got[0]))) == 4  # the four options give four different rows
