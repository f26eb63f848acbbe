"""Runs every command of the README's `bash` blocks, in order, on tiny data.

The README is written for real releases and data; here `$ALBERT_DIR` holds a tiny
random model in Google's format, `$GLUE_DIR` and `$SQUAD_DIR` small slices of the
shared data, `$RACE_DIR` a few synthetic RACE-format articles, and each driver gets
flags appended (absl: the last value wins) that
shrink sequence lengths and step counts. Commands run in README order because later
ones read earlier ones' outputs, as a user's would.
"""
import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Appended to each driver's command: tiny shapes and step counts.
SHRINK = {
    "create_pretraining_data.py": "--max_seq_length=64 --max_predictions_per_seq=10 --dupe_factor=1",
    "run_pretraining.py": ("--max_seq_length=64 --max_predictions_per_seq=10 --train_batch_size=8 "
                           "--eval_batch_size=8 --num_train_steps=4 --num_warmup_steps=1 --save_checkpoints_steps=2 "
                           "--iterations_per_loop=2 --log_steps=2 --max_eval_steps=2"),
    "run_classifier.py": ("--max_seq_length=32 --train_step=4 --warmup_step=1 --save_checkpoints_steps=2 "
                          "--train_batch_size=8 --eval_batch_size=8 --predict_batch_size=8 --iterations_per_loop=2"),
    "run_squad.py": ("--max_seq_length=64 --doc_stride=32 --max_query_length=16 --train_batch_size=8 "
                     "--predict_batch_size=8 --num_train_epochs=0.3 --iterations_per_loop=2"),
    "run_race.py": ("--max_seq_length=64 --max_qa_length=16 --train_step=4 --warmup_step=1 --save_checkpoints_steps=2 "
                    "--train_batch_size=8 --eval_batch_size=8 --predict_batch_size=8 --iterations_per_loop=2"),
    "export_model.py": "--max_seq_length=32",
}
GLUE_SHRINK = "--train_step=4 --warmup_step=1 --save_checkpoints_steps=2 --train_batch_size=8 --iterations_per_loop=2"


def readme_commands() -> list[str]:
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].strip()
            if line and not line.startswith("#"):
                commands.append(line)
    return commands


COMMANDS = [c for c in readme_commands() if not c.startswith("make ")]


def _subset_squad(src, dst, paragraphs, start=0):
    data = json.load(open(src, encoding="utf-8"))
    article = data["data"][0]
    article["paragraphs"] = article["paragraphs"][start:start + paragraphs]
    data["data"] = [article]
    json.dump(data, open(dst, "w", encoding="utf-8"))


@pytest.fixture(scope="module")
def environment(tmp_path_factory, shared):
    from albert_tf import AlbertConfig, AlbertPretrainer
    from albert_tf.weights import save_tf1_checkpoint

    root = tmp_path_factory.mktemp("readme")
    albert_dir = root / "albert_base"
    albert_dir.mkdir()
    config = AlbertConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    config.to_json_file(str(albert_dir / "albert_config.json"))
    model = AlbertPretrainer(config)
    model(model.dummy_inputs())
    save_tf1_checkpoint(model, str(albert_dir / "model.ckpt-best"))
    os.symlink(shared("data", "spm", "30k-clean.model"), albert_dir / "30k-clean.model")

    glue = root / "glue" / "MRPC"
    glue.mkdir(parents=True)
    for split, rows in (("train", 40), ("dev", 16), ("test", 16)):
        lines = shared("data", "glue", "MRPC", f"{split}.tsv").read_text(encoding="utf-8").splitlines(True)
        (glue / f"{split}.tsv").write_text("".join(lines[:rows + 1]), encoding="utf-8")

    squad = root / "squad"
    squad.mkdir()
    _subset_squad(shared("data", "squad", "train-v1.1.University_of_Notre_Dame.json"), squad / "train-v1.1.json", 2)
    _subset_squad(shared("data", "squad", "dev-v1.1.Super_Bowl_50.json"), squad / "dev-v1.1.json", 2)
    _subset_squad(shared("data", "squad", "dev-v2.0.first5articles.json"), squad / "train-v2.0.json", 2)
    _subset_squad(shared("data", "squad", "dev-v2.0.first5articles.json"), squad / "dev-v2.0.json", 2, start=2)

    my_data = root / "my_data"  # the README's custom-data commands: each format, a few rows
    my_data.mkdir()
    rows = [("a good film", "pos"), ("a bad film", "neg"), ("great fun", "pos"), ("dull", "neg")] * 3
    for split in ("train", "dev", "test"):
        (my_data / f"reviews_{split}.tsv").write_text(
            "text\tlabel\n" + "".join(f"{t}\t{label}\n" for t, label in rows), encoding="utf-8")
        (my_data / f"pairs_{split}.csv").write_text("question,answer,label\n" + "".join(
            f'"{t}, really?",{t},{label == "pos"}\n' for t, label in rows), encoding="utf-8")
        (my_data / f"scores_{split}.jsonl").write_text("".join(
            json.dumps({"review": t, "score": 0.9 if label == "pos" else 0.1}) + "\n" for t, label in rows),
            encoding="utf-8")

    from albert_tf.race.synthetic import write_race

    race = write_race(root / "race", train=6, dev=3, test=3)
    env = dict(os.environ, ALBERT_DIR=str(albert_dir), GLUE_DIR=str(root / "glue"), SQUAD_DIR=str(squad),
               RACE_DIR=race, MY_DATA=str(my_data),
               CORPUS=str(shared("data", "corpus", "sample_text.txt")), OUT=str(root / "out"),
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               PYTHON=sys.executable, MAX_SEQ_LENGTH="32", EXTRA_ARGS=GLUE_SHRINK, TF_CPP_MIN_LOG_LEVEL="2")
    return env


def test_readme_has_the_commands():
    scripts = " ".join(COMMANDS)
    for driver in ("create_pretraining_data.py", "run_pretraining.py", "run_classifier.py", "run_glue.sh",
                   "run_squad.py", "run_race.py", "convert_checkpoint.py", "export_model.py", "albert_tf.squad.evaluate"):
        assert driver in scripts, driver
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    assert text.index("make demo") < text.index("make test") < 600, "the two commands open the README"


@pytest.mark.parametrize("index", range(len(COMMANDS)), ids=[c.split(" --")[0][:60] for c in COMMANDS])
def test_readme_command(environment, index):
    command = COMMANDS[index]
    script = next((s for s in SHRINK if f" {s}" in f" {command}"), None)
    if script:
        command += " " + SHRINK[script]
    done = subprocess.run(["bash", "-c", command], env=environment, cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
