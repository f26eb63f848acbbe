"""--export_dir in a place the export cannot be written (a file at its name or above it, a folder this user
cannot write in) is one line before any work: the export comes after training and prediction, which
such a place made fail at their very end."""
import os

from albert_tf.squad.export import check_export_dir


def test_run_classifier_refuses_an_export_dir_under_a_file_before_any_work(glue_slices, tiny_config_file, spm_model,
                                                                           tmp_path, driver_errors):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("mine\n")
    base = ["--task_name=MRPC", f"--data_dir={glue_slices}", f"--albert_config_file={tiny_config_file}",
            f"--spm_model_file={spm_model}", "--max_seq_length=32", "--do_train", "--do_predict",
            "--train_step=2", "--train_batch_size=8", "--save_checkpoints_steps=2", "--iterations_per_loop=2"]
    results = driver_errors({
        "file": [*base, f"--output_dir={tmp_path / 'out1'}", f"--export_dir={a_file}"],
        "under a file": [*base, f"--output_dir={tmp_path / 'out2'}", f"--export_dir={a_file / 'versions'}"],
    })
    for name, export_dir in (("file", a_file), ("under a file", a_file / "versions")):
        assert results[name]["code"] == 1, name
        assert results[name]["stderr"] == (f"run_classifier.py: error: --export_dir={export_dir}: {a_file} is a "
                                           f"file; expected a folder for the exported versions\n"), name
    assert not (tmp_path / "out1").exists() and not (tmp_path / "out2").exists()  # nothing trained or written
    assert a_file.read_text() == "mine\n"


def test_squad_refuses_an_export_dir_it_cannot_write_in(tmp_path, monkeypatch):
    # Root may write anywhere: the permission is what os.access says, as for a user without it.
    readonly = tmp_path / "shared exports"
    readonly.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (os.fspath(path) != str(readonly)
                                                               and real_access(path, mode, **kw)))
    expected = f"--export_dir={{}}: cannot write in {readonly}; expected a folder this user can write in"
    assert check_export_dir(str(readonly)) == [expected.format(readonly)]
    assert check_export_dir(str(readonly / "squad" / "v1")) == [expected.format(readonly / "squad" / "v1")]
    assert check_export_dir(str(tmp_path / "mine")) == []
    assert list(readonly.iterdir()) == [] and not (tmp_path / "mine").exists()
