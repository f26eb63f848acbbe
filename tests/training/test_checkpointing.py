"""Atomic checkpoint writes, the state file, keep-max, the best checkpoint and eval_results.txt."""
import pytest
import tensorflow as tf

from albert_tf.training import checkpointing


def make_checkpoint(value: float) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(w=tf.Variable([value, value]))


def save(output_dir, step, value, keep=5):
    prefix = checkpointing.write_checkpoint_atomically(
        make_checkpoint(value), checkpointing.checkpoint_prefix(str(output_dir), step))
    checkpointing.update_state_file(str(output_dir), prefix, keep)
    return prefix


def test_state_file_keep_max_and_deletion(tmp_path):
    for step in (1, 2, 3):
        save(tmp_path, step, float(step), keep=2)
    (tmp_path / "model.ckpt-3.input-0.index").write_text("x")  # an input state beside it
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-3")
    assert checkpointing.all_checkpoints(str(tmp_path)) == [str(tmp_path / "model.ckpt-2"),
                                                            str(tmp_path / "model.ckpt-3")]
    assert not list(tmp_path.glob("model.ckpt-1.*"))
    save(tmp_path, 4, 4.0, keep=2)
    assert not list(tmp_path.glob("model.ckpt-2.*"))
    assert (tmp_path / "model.ckpt-3.input-0.index").exists()
    save(tmp_path, 5, 5.0, keep=2)
    assert not list(tmp_path.glob("model.ckpt-3*")), "input states go with their checkpoint"
    assert not list(tmp_path.glob("*.tmp-*"))


def test_relative_output_dir(tmp_path, monkeypatch):
    """A relative --output_dir: the state file's entries must resolve once, not twice."""
    monkeypatch.chdir(tmp_path)
    for step in (1, 2):
        save("out", step, float(step), keep=5)
    assert checkpointing.all_checkpoints("out") == ["out/model.ckpt-1", "out/model.ckpt-2"]
    save("out", 3, 3.0, keep=2)
    assert checkpointing.all_checkpoints("out") == ["out/model.ckpt-2", "out/model.ckpt-3"]
    assert not list((tmp_path / "out").glob("model.ckpt-1.*"))


def test_interrupted_save_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    save(tmp_path, 1, 1.0)
    real_rename = tf.io.gfile.rename

    def crash_on_index(src, dst, overwrite=False):
        if dst.endswith(".index"):
            raise OSError("disk full (simulated)")
        return real_rename(src, dst, overwrite=overwrite)

    monkeypatch.setattr(tf.io.gfile, "rename", crash_on_index)
    with pytest.raises(OSError, match="simulated"):
        save(tmp_path, 2, 2.0)
    monkeypatch.setattr(tf.io.gfile, "rename", real_rename)

    latest = tf.train.latest_checkpoint(str(tmp_path))
    assert latest == str(tmp_path / "model.ckpt-1")
    restored = make_checkpoint(0.0)
    restored.read(latest).assert_consumed()
    assert restored.w.numpy().tolist() == [1.0, 1.0]
    assert list(tmp_path.glob("*.tmp-*"))  # the crash left temporaries ...
    checkpointing.remove_stale_temporaries(str(tmp_path))
    assert not list(tmp_path.glob("*.tmp-*"))  # ... which the next run removes


def test_state_file_is_replaced_atomically(tmp_path, monkeypatch):
    save(tmp_path, 1, 1.0)
    monkeypatch.setattr(tf.io.gfile, "rename", lambda *a, **k: (_ for _ in ()).throw(OSError("crash")))
    with pytest.raises(OSError):
        checkpointing.update_state_file(str(tmp_path), str(tmp_path / "model.ckpt-9"), 5)
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-1")


def test_best_checkpoint_keeper(tmp_path):
    keeper = checkpointing.BestCheckpointKeeper(str(tmp_path), "accuracy")
    assert keeper.read() == (-1, -1, None)
    assert keeper.update(save(tmp_path, 10, 1.0), {"accuracy": 0.5})
    assert not keeper.update(save(tmp_path, 20, 2.0), {"accuracy": 0.4})
    assert keeper.read() == (20, 10, 0.5)
    assert (tmp_path / "best_trial.txt").read_text() == "20:10:0.5"
    assert keeper.update(save(tmp_path, 30, 3.0), {"accuracy": 0.7})
    restored = make_checkpoint(0.0)
    restored.read(str(tmp_path / "model.ckpt-best")).assert_consumed()
    assert restored.w.numpy().tolist() == [3.0, 3.0]
    # keep_checkpoint_max never deletes the best copy.
    checkpointing.delete_checkpoint(str(tmp_path / "model.ckpt-best"))
    assert (tmp_path / "model.ckpt-best.index").exists()
    lower = checkpointing.BestCheckpointKeeper(str(tmp_path / "sub"), "loss", higher_is_better=False)
    tf.io.gfile.makedirs(str(tmp_path / "sub"))
    assert lower.update(str(tmp_path / "model.ckpt-10"), {"loss": 2.0})
    assert lower.update(str(tmp_path / "model.ckpt-20"), {"loss": 1.0})
    with pytest.raises(KeyError, match="no 'loss'"):
        lower.update(str(tmp_path / "model.ckpt-10"), {"accuracy": 1.0})


def test_eval_results_file(tmp_path):
    path = str(tmp_path / "eval_results.txt")
    checkpointing.write_eval_results(path, {"masked_lm_accuracy": 0.5, "global_step": 10, "loss": 2.25})
    assert open(path).read() == "global_step = 10\nloss = 2.25\nmasked_lm_accuracy = 0.5\n"
    checkpointing.write_eval_results(path, {"global_step": 20}, append=True)
    assert open(path).read().endswith("masked_lm_accuracy = 0.5\nglobal_step = 20\n")
    assert checkpointing.read_eval_results(path)["global_step"] == "20"
