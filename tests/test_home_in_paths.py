"""``--input_file=~/corpus.txt``: no shell expands a ``~`` after ``=``, and TensorFlow does not either (the
original did not find the input, and wrote outputs into a folder named ``~`` in the current folder). The
drivers read a leading ``~`` of a path flag as the home folder, as a shell would."""
import pathlib

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
