"""The synthetic RACE set: valid RACE files, reproducible, answers stated in the
article (checked by a matcher that knows no template: the answer must be the only
option that shares an article sentence with the asked person), clozes included."""
import collections
import re

import pytest

from albert_tf.demo_data import NAMES
from albert_tf.race.data import LEVELS, SPLITS, read_race
from albert_tf.race.synthetic import write_race


def written(root, **kwargs):
    """Bytes of every file write_race(root, **kwargs) writes."""
    write_race(root, **kwargs)
    return {(s, lv): (root / "RACE" / s / lv / "all.txt").read_bytes() for s in SPLITS for lv in LEVELS}


def words(text):
    return set(re.findall(r"[a-z]+", text.lower()))


def supported_options(ex):
    """Options that some sentence of the article pairs with the person asked about."""
    person = [w for w in re.findall(r"[A-Za-z]+", ex.question) if w.lower() in NAMES]
    assert len(person) == 1, ex.question
    sentences = [words(s) for s in re.split(r"(?<=\.)\s+", ex.article)]
    return [o for o in ex.options if any(person[0].lower() in s and words(o) <= s for s in sentences)]


def test_same_arguments_same_bytes_and_splits_independent(tmp_path):
    a = written(tmp_path / "a", train=12, dev=6, test=4, seed=5)
    b = written(tmp_path / "b", train=12, dev=6, test=4, seed=5)
    c = written(tmp_path / "c", train=12, dev=6, test=4, seed=6)
    d = written(tmp_path / "d", train=30, dev=6, test=4, seed=5)
    assert a == b
    assert all(a[k] != c[k] for k in a)
    assert a[("dev", "high")] == d[("dev", "high")] and a[("train", "high")] != d[("train", "high")]
    assert d[("train", "high")].startswith(a[("train", "high")])  # more articles extend the same stream


def test_sizes_and_format(tmp_path):
    root = write_race(tmp_path, train=9, dev=4, test=1, questions_per_article=3)
    for split, articles in (("train", 9), ("dev", 4), ("test", 1)):
        examples = read_race(root, split)  # valid RACE: the reader's checks pass
        per_level = collections.Counter(e.level for e in examples)
        assert per_level["middle"] == 3 * ((articles + 1) // 2) and per_level["high"] == 3 * (articles // 2)
        assert len({(e.level, e.id) for e in examples}) == articles
        for ex in examples:
            assert len(set(ex.options)) == 4, ex


@pytest.fixture(scope="module")
def train_examples(tmp_path_factory):
    root = write_race(tmp_path_factory.mktemp("race"), train=300, dev=0, test=0, seed=11)
    return read_race(root, "train")


def test_every_answer_is_stated_in_the_article(train_examples):
    assert len(train_examples) == 1200
    for ex in train_examples:
        assert supported_options(ex) == [ex.options[ex.label]], ex


def test_questions_and_clozes_and_balanced_labels(train_examples):
    clozes = [ex for ex in train_examples if "_" in ex.question]
    assert 0.25 < len(clozes) / len(train_examples) < 0.42
    assert all(ex.question.count("_") == 1 for ex in clozes)
    assert all(ex.question.endswith("?") for ex in train_examples if "_" not in ex.question)
    shares = collections.Counter(ex.label for ex in train_examples)
    assert sorted(shares) == [0, 1, 2, 3] and min(shares.values()) / len(train_examples) > 0.2


def test_binding_share_puts_other_peoples_values_among_the_options(tmp_path):
    def distractors_in_article(share):
        root = write_race(tmp_path / str(share), train=100, dev=0, test=0, binding_share=share)
        found = total = 0
        for ex in read_race(root, "train"):
            text = words(ex.article)
            others = [o for i, o in enumerate(ex.options) if i != ex.label]
            found += sum(words(o) <= text for o in others)
            total += len(others)
        return found / total

    low, high = distractors_in_article(0.0), distractors_in_article(1.0)
    assert low < 0.15 and high > low + 0.3


@pytest.mark.parametrize("kwargs", [dict(train=-1), dict(questions_per_article=0), dict(binding_share=1.5)])
def test_invalid_arguments(tmp_path, kwargs):
    with pytest.raises(ValueError, match="invalid synthetic RACE"):
        write_race(tmp_path, **kwargs)


@pytest.mark.parametrize("context", [0, 2])
def test_short_articles_keep_every_answer_and_that_many_other_sentences(tmp_path, context):
    full = read_race(write_race(tmp_path / "full", train=40, dev=0, test=0, questions_per_article=2,
                                binding_share=0.0), "train")
    short = read_race(write_race(tmp_path / "short", train=40, dev=0, test=0, questions_per_article=2,
                                 binding_share=0.0, context_sentences=context), "train")
    # The first article asks the same questions; its text is a subset of the full one's sentences.
    # (Later articles differ: choosing the kept sentences draws from the same generator.)
    assert [(e.question, e.options, e.label) for e in short[:2]] == [(e.question, e.options, e.label)
                                                                     for e in full[:2]]
    assert set(re.split(r"(?<=\.)\s+", short[0].article)) <= set(re.split(r"(?<=\.)\s+", full[0].article))
    for ex in short:
        assert len(re.split(r"(?<=\.)\s+", ex.article)) == 2 + context  # the two asked facts + `context` others
        assert supported_options(ex) == [ex.options[ex.label]]


def test_negative_context_is_refused(tmp_path):
    with pytest.raises(ValueError, match="context_sentences=-1"):
        write_race(tmp_path, context_sentences=-1)
