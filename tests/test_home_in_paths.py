"""``--input_file=~/corpus.txt``: no shell expands a ``~`` after ``=``, and TensorFlow does not either (the
original did not find the input, and wrote outputs into a folder named ``~`` in the current folder). The
drivers read a leading ``~`` of a path flag as the home folder, as a shell would."""
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]  # driver_cases runs the drivers there


def test_a_leading_tilde_in_path_flags_is_the_home_folder(shared, tmp_path, monkeypatch, driver_cases):
    home = tmp_path / "home ü"
    (home / "corpus").mkdir(parents=True)
    (home / "corpus" / "text.txt").write_text("The cat sat on the mat.\nIt was warm.\n\nA dog barked.\nIt ran.\n")
    monkeypatch.setenv("HOME", str(home))
    results = driver_cases("create_pretraining_data", {"tilde": [
        "--input_file=~/corpus/text.txt", "--output_file=~/out/a.tfrecord,~/out/b.tfrecord",
        f"--spm_model_file={shared('data', 'spm', '30k-clean.model')}", "--max_seq_length=32",
        "--max_predictions_per_seq=4", "--dupe_factor=1", "--num_workers=1"]})
    assert results["tilde"]["code"] == 0, results["tilde"]["stderr"]
    assert (home / "out" / "a.tfrecord").is_file() and (home / "out" / "b.tfrecord").is_file()
    assert not (REPO / "~").exists()  # where the original made its folder named "~"


def test_the_demos_output_dir_with_a_leading_tilde_is_the_home_folder(tmp_path, monkeypatch):
    """`python -m albert_tf.demo --output_dir=~/albert_demo` (or `make demo DEMO_DIR=~/albert_demo`) made a
    folder named "~" in the current folder, where the drivers read the same flag as the home folder."""
    from albert_tf import demo, demo_data

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)

    class Started(Exception):
        pass

    def first_step(*args, **kwargs):  # the demo's folder is made by then; its minutes of work are not needed
        raise Started

    monkeypatch.setattr(demo_data, "write_corpus", first_step)
    with pytest.raises(Started):
        demo.main(["--output_dir=~/albert_demo"])
    assert (home / "albert_demo").is_dir()
    assert not (work / "~").exists()
    makefile = (REPO / "Makefile").read_text()
    assert "--output_dir='$(DEMO_DIR)'" in makefile and "DEMO_DIR ?= demo_output" in makefile
