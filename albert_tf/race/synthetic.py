"""A templated data set in RACE's format, for tests and `make demo`: no third-party text.

Each article introduces two people (middle level) or three (high level) and states
two kinds of fact for each, one sentence per fact ("Alice lives in Oslo.", "Alice
has a red kite.", ...), shuffled with a filler sentence that names nobody. Articles
are short (about 35 and 50 tokens with the 30k-clean model) so that the demo's
64-token sequences hold them whole. Each question asks for one fact of one person,
as a question ("What colour is the kite of Alice?") or, about one time in three,
as a cloze with a blank ("The kite of Alice is _ ."). The four options are values
of the asked kind; the answer is the only option that a sentence of the article
pairs with the person. Distractors are values the article does not mention, except
in a `binding_share` of questions where they start with the other people's values
of that kind, so that finding which option the article mentions is not enough and
the person must be matched too.

Words come from `albert_tf.demo_data`, so the demo's small SentencePiece model
knows them. Everything is drawn from generators seeded by (seed, split, level):
the same arguments write the same bytes, and one split's size does not change
another's content.
"""
from __future__ import annotations

import json
import os
import random

from albert_tf.demo_data import FOODS, JOBS, NAMES, PETS, TOWNS
from albert_tf.fileio import atomic_write_text
from albert_tf.race.data import LETTERS, LEVELS, NUM_CHOICES, SPLITS

COLOURS = ["red", "blue", "green", "yellow", "black", "white", "brown", "pink"]
OBJECTS = ["ball", "hat", "kite", "bike", "boat", "coat", "cup", "bag"]
FILLERS = [
    "The sun was shining that morning.", "It rained for most of the afternoon.",
    "Everyone was busy that week.", "The streets were quiet after dark.",
    "Nobody remembered the exact date.", "There was a small market near the river.",
    "The bus was late again.", "Later that day the wind grew stronger.",
]


def _title(word: str) -> str:
    return word[:1].upper() + word[1:]


# kind -> (values, fact sentence, question, cloze); {n} person, {v} value, {o} object
KINDS = {
    "town": ([_title(t) for t in TOWNS], "{n} lives in {v}.", "Where does {n} live?", "{n} lives in _ ."),
    "job": (JOBS, "{n} works as a {v}.", "What is the job of {n}?", "{n} works as a _ ."),
    "pet": (PETS, "{n} has a {v} at home.", "Which animal does {n} have at home?", "{n} has a _ at home."),
    "food": (FOODS, "{n} likes to eat {v}.", "What does {n} like to eat?", "{n} likes to eat _ ."),
    "colour": (COLOURS, "{n} has a {v} {o}.", "What colour is the {o} of {n}?", "The {o} of {n} is _ ."),
}
CLOZE_SHARE = 1 / 3


def make_article(rng: random.Random, level: str, article_id: str, num_questions: int,
                 binding_share: float, context_sentences: int | None = None) -> dict:
    """One RACE record: {"article", "questions", "options", "answers", "id"}. With `context_sentences`, the
    article keeps the sentences that state its questions' answers and only that many of the others."""
    middle = level == "middle"
    people = [_title(n) for n in rng.sample(NAMES, 2 if middle else 3)]
    # Two kinds of fact, stated for every person; values are distinct per kind, so
    # each fact sentence pairs its value with one person only.
    values = {kind: dict(zip(people, rng.sample(pool, len(people)))) for kind, (pool, *_) in KINDS.items()}
    objects = dict(zip(people, rng.sample(OBJECTS, len(people))))
    kinds = rng.sample(sorted(KINDS), 2)
    stated = [(p, kind) for p in people for kind in kinds]
    sentences = {fact: KINDS[fact[1]][1].format(n=fact[0], v=values[fact[1]][fact[0]], o=objects[fact[0]])
                 for fact in stated}
    filler = rng.choice(FILLERS)
    order = [*stated, None]  # None: the filler sentence
    rng.shuffle(order)

    questions, options, answers = [], [], []
    asked = rng.sample(stated, min(num_questions, len(stated)))
    for person, kind in asked:
        pool, _, question, cloze = KINDS[kind]
        answer = values[kind][person]
        in_article = {values[kind][p] for p, k in stated if k == kind}
        mentioned = sorted(in_article - {answer})
        unmentioned = [v for v in pool if v not in in_article]
        rng.shuffle(mentioned)
        rng.shuffle(unmentioned)
        ranked = mentioned + unmentioned if rng.random() < binding_share else unmentioned + mentioned
        choices = ranked[: NUM_CHOICES - 1]
        label = rng.randrange(NUM_CHOICES)
        choices.insert(label, answer)
        template = cloze if rng.random() < CLOZE_SHARE else question
        questions.append(template.format(n=person, o=objects[person]))
        options.append(choices)
        answers.append(LETTERS[label])
    if context_sentences is not None:
        others = [fact for fact in order if fact not in asked]
        kept = set(asked) | set(rng.sample(others, min(context_sentences, len(others))))
        order = [fact for fact in order if fact in kept]
    article = " ".join(filler if fact is None else sentences[fact] for fact in order)
    return {"article": article, "questions": questions, "options": options, "answers": answers,
            "id": article_id}


def write_race(output_dir: str | os.PathLike, train: int = 400, dev: int = 100, test: int = 100, seed: int = 3,
               questions_per_article: int = 4, binding_share: float = 0.25,
               context_sentences: int | None = None) -> str:
    """Writes ``<output_dir>/RACE/{train,dev,test}/{middle,high}/all.txt`` with the given
    number of articles per split (half middle, half high; middle gets the odd one);
    returns `output_dir`, the value for --data_dir. `context_sentences` (None: all) shortens
    each article to its questions' answer sentences plus that many others. A tiny model trained
    from scratch through run_race.py learns the full stories (binding_share=0, 2000 training
    articles) well above chance: tests/race/test_run_race.py has the recipe."""
    sizes = {"train": train, "dev": dev, "test": test}
    if min(sizes.values()) < 0 or questions_per_article < 1 or not 0 <= binding_share <= 1 \
            or (context_sentences is not None and context_sentences < 0):
        raise ValueError(f"invalid synthetic RACE sizes {sizes}, questions_per_article={questions_per_article}, "
                         f"binding_share={binding_share}, context_sentences={context_sentences}")
    for split in SPLITS:
        for level in LEVELS:
            count = (sizes[split] + 1) // 2 if level == "middle" else sizes[split] // 2
            rng = random.Random(f"{seed}/{split}/{level}")
            lines = [json.dumps(make_article(rng, level, f"{level}{i}.txt", questions_per_article, binding_share,
                                             context_sentences)) for i in range(count)]
            atomic_write_text(os.path.join(os.fspath(output_dir), "RACE", split, level, "all.txt"),
                              "".join(line + "\n" for line in lines))
    return os.fspath(output_dir)
