"""Built-in synthetic data for `make demo`: written here, no third-party text.

A tiny world of people, towns, jobs and pets, rendered from templates:
- a pretraining corpus of short "diaries": one sentence per line, documents
  separated by blank lines, days in order (so sentence order is learnable);
- a sentiment task in the GLUE SST-2 file format (`sentence<TAB>label`);
- a reading-comprehension set in the SQuAD 1.1 JSON format.
Everything is drawn from a seeded generator, so the files are reproducible.
"""
from __future__ import annotations

import json
import os
import random

from albert_tf.fileio import atomic_write_text

NAMES = ["alice", "bruno", "chen", "dara", "emil", "fatima", "goran", "hana", "ivan", "julia", "kofi",
         "lena", "marco", "nadia", "oscar", "priya", "quinn", "rosa", "sami", "tara"]
TOWNS = ["paris", "lisbon", "oslo", "cairo", "lima", "quito", "dublin", "tokyo", "nairobi", "vienna", "perth",
         "madrid"]
JOBS = ["baker", "doctor", "pilot", "farmer", "teacher", "painter", "nurse", "driver", "singer", "tailor"]
PETS = ["cat", "dog", "parrot", "horse", "rabbit", "goat"]
FOODS = ["bread", "rice", "soup", "apples", "fish", "cheese", "noodles", "beans"]
GOOD = ["wonderful", "delightful", "excellent", "charming", "superb", "lovely", "brilliant", "pleasant"]
BAD = ["terrible", "awful", "dreadful", "boring", "horrible", "dull", "miserable", "poor"]
THINGS = ["film", "meal", "trip", "concert", "book", "party", "game", "show"]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth"]


def _diary(rng: random.Random) -> list[str]:
    name, town, job, pet = rng.choice(NAMES), rng.choice(TOWNS), rng.choice(JOBS), rng.choice(PETS)
    lines = [f"{name} is a {job} who lives in {town} with a {pet}."]
    for day in range(rng.randint(3, 7)):
        food, place = rng.choice(FOODS), rng.choice(TOWNS)
        event = rng.choice([
            f"on the {ORDINALS[day]} day {name} travelled to {place} and ate {food}.",
            f"on the {ORDINALS[day]} day the {pet} of {name} refused to eat {food}.",
            f"on the {ORDINALS[day]} day {name} worked as a {job} in {place}.",
        ])
        lines.append(event)
    lines.append(f"at the end of the week {name} went back home to {town}.")
    return lines


def _opinions(rng: random.Random) -> list[str]:
    return [_review(rng)[0] for _ in range(rng.randint(2, 5))]


def _facts(rng: random.Random) -> list[str]:
    return _paragraph(rng, 0)["context"].replace(". ", ".\n").splitlines()


def write_corpus(path: str, num_documents: int = 1500, seed: int = 1) -> str:
    """Diaries, opinion pieces and fact sheets: the words every demo task uses."""
    rng = random.Random(seed)
    kinds = [_diary, _diary, _opinions, _facts]
    documents = ["\n".join(rng.choice(kinds)(rng)) for _ in range(num_documents)]
    return atomic_write_text(path, "\n\n".join(documents) + "\n")


def _review(rng: random.Random) -> tuple[str, int]:
    label = rng.randint(0, 1)
    word = rng.choice(GOOD if label else BAD)
    thing, name = rng.choice(THINGS), rng.choice(NAMES)
    template = rng.choice(["the {t} was {w} .", "{n} said the {t} in {c} was {w} .",
                           "what a {w} {t} , {n} thought .", "everyone agreed that the {t} felt {w} ."])
    return template.format(t=thing, w=word, n=name, c=rng.choice(TOWNS)), label


def write_sentiment_task(data_dir: str, seed: int = 2, train: int = 800, dev: int = 200, test: int = 100) -> str:
    """SST-2 layout: train/dev `sentence<TAB>label` with a header, test `index<TAB>sentence`."""
    rng = random.Random(seed)
    folder = os.path.join(data_dir, "SST-2")
    os.makedirs(folder, exist_ok=True)
    for split, count in (("train", train), ("dev", dev)):
        rows = ["sentence\tlabel"] + [f"{s}\t{label}" for s, label in (_review(rng) for _ in range(count))]
        atomic_write_text(os.path.join(folder, f"{split}.tsv"), "\n".join(rows) + "\n")
    rows = ["index\tsentence"] + [f"{i}\t{_review(rng)[0]}" for i in range(test)]
    atomic_write_text(os.path.join(folder, "test.tsv"), "\n".join(rows) + "\n")
    return folder


def _paragraph(rng: random.Random, index: int) -> dict:
    people = rng.sample(NAMES, 3)
    facts = [(p, rng.choice(TOWNS), rng.choice(JOBS), rng.choice(PETS)) for p in people]
    context, qas = "", []
    for n, (person, town, job, pet) in enumerate(facts):
        for sentence, question, answer in (
            (f"{person.title()} lives in {town.title()}. ", f"Where does {person.title()} live?", town.title()),
            (f"{person.title()} works as a {job}. ", f"What is the job of {person.title()}?", job),
            (f"{person.title()} has a {pet}. ", f"Which pet does {person.title()} have?", pet),
        ):
            start = len(context) + sentence.index(answer)
            context += sentence
            qas.append({"id": f"q{index}_{n}_{len(qas)}", "question": question,
                        "answers": [{"text": answer, "answer_start": start}]})
    return {"context": context.strip(), "qas": qas}


def write_squad(path: str, num_paragraphs: int, seed: int) -> str:
    rng = random.Random(seed)
    data = {"version": "1.1", "data": [{"title": "demo_world",
                                        "paragraphs": [_paragraph(rng, i) for i in range(num_paragraphs)]}]}
    return atomic_write_text(path, json.dumps(data, indent=1))


def train_sentencepiece(corpus: str, model_prefix: str, vocab_size: int = 300) -> str:
    """A SentencePiece model with the original ALBERT spm_train settings, scaled down:
    pad 0, unk 1, no bos/eos, control symbols [CLS] [SEP] [MASK], the same
    user-defined symbols, character coverage 0.99995.

    One change: BPE instead of the original's unigram. On a templated corpus of a
    couple of hundred distinct words the unigram trainer cannot form whole-word
    pieces (it stops near 180 pieces and splits "alice" into "a l ice"), which makes
    the demo's tasks needlessly hard; BPE gives whole words. Real corpora: unigram."""
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=corpus, model_prefix=model_prefix, vocab_size=vocab_size, model_type="bpe",
        pad_id=0, unk_id=1, bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        user_defined_symbols=["(", ")", '"', "-", ".", "–", "£", "€"], character_coverage=0.99995,
        shuffle_input_sentence=True, input_sentence_size=1_000_000, hard_vocab_limit=False, minloglevel=2)
    return model_prefix + ".model"
