"""Atomic checkpoint writes, the state file, keep-max, the best checkpoint and eval_results.txt."""
import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.training import checkpoint_evaluation, results
from albert_tf.weights import files


def make_checkpoint(value: float) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(w=tf.Variable([value, value]))


def save(output_dir, step, value, keep=5):
    prefix = files.write_checkpoint_atomically(
        make_checkpoint(value), files.checkpoint_prefix(str(output_dir), step))
    files.update_state_file(str(output_dir), prefix, keep)
    return prefix


def test_state_file_keep_max_and_deletion(tmp_path):
    for step in (1, 2, 3):
        save(tmp_path, step, float(step), keep=2)
    (tmp_path / "model.ckpt-3.input-0.index").write_text("x")  # an input state beside it
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-3")
    assert files.all_checkpoints(str(tmp_path)) == [str(tmp_path / "model.ckpt-2"),
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
    assert files.all_checkpoints("out") == ["out/model.ckpt-1", "out/model.ckpt-2"]
    save("out", 3, 3.0, keep=2)
    assert files.all_checkpoints("out") == ["out/model.ckpt-2", "out/model.ckpt-3"]
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
    assert not list(tmp_path.glob("*.tmp-*"))  # a failed write removes its temporaries ...
    (tmp_path / f".tmp-{'0' * 32}-model.ckpt-3.index").write_text("x")  # ... a killed process cannot
    files.remove_stale_temporaries(str(tmp_path))
    assert not list(tmp_path.glob("*.tmp-*"))  # ... and the next run removes what it left


def test_state_file_is_replaced_atomically(tmp_path, monkeypatch):
    save(tmp_path, 1, 1.0)
    monkeypatch.setattr(os, "replace", lambda *a, **k: (_ for _ in ()).throw(OSError("crash")))
    with pytest.raises(OSError):
        files.update_state_file(str(tmp_path), str(tmp_path / "model.ckpt-9"), 5)
    assert tf.train.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-1")


def test_best_checkpoint_keeper(tmp_path):
    keeper = checkpoint_evaluation.BestCheckpointKeeper(str(tmp_path), "accuracy")
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
    files.delete_checkpoint(str(tmp_path / "model.ckpt-best"))
    assert (tmp_path / "model.ckpt-best.index").exists()
    lower = checkpoint_evaluation.BestCheckpointKeeper(str(tmp_path / "sub"), "loss", higher_is_better=False)
    tf.io.gfile.makedirs(str(tmp_path / "sub"))
    assert lower.update(str(tmp_path / "model.ckpt-10"), {"loss": 2.0})
    assert lower.update(str(tmp_path / "model.ckpt-20"), {"loss": 1.0})
    with pytest.raises(KeyError, match="no 'loss'"):
        lower.update(str(tmp_path / "model.ckpt-10"), {"accuracy": 1.0})


def test_a_nan_metric_is_never_the_best(tmp_path):
    """A NaN first evaluation leaves no best (any later number wins); a NaN later never replaces one."""
    keeper = checkpoint_evaluation.BestCheckpointKeeper(str(tmp_path), "accuracy")
    assert not keeper.update(save(tmp_path, 10, 1.0), {"accuracy": float("nan")})
    assert keeper.read() == (10, -1, None)
    assert not (tmp_path / "model.ckpt-best.index").exists()
    assert keeper.update(save(tmp_path, 20, 2.0), {"accuracy": 0.25})
    assert not keeper.update(save(tmp_path, 30, 3.0), {"accuracy": float("nan")})
    assert keeper.read() == (30, 20, 0.25)
    restored = make_checkpoint(0.0)
    restored.read(str(tmp_path / "model.ckpt-best")).assert_consumed()
    assert restored.w.numpy().tolist() == [2.0, 2.0]
    lower = checkpoint_evaluation.BestCheckpointKeeper(str(tmp_path / "sub"), "loss", higher_is_better=False)
    tf.io.gfile.makedirs(str(tmp_path / "sub"))
    assert lower.update(str(tmp_path / "model.ckpt-20"), {"loss": 1.0})
    assert not lower.update(str(tmp_path / "model.ckpt-30"), {"loss": float("nan")})
    assert lower.read() == (30, 20, 1.0)


def test_eval_results_file(tmp_path):
    path = str(tmp_path / "eval_results.txt")
    plain = results.ResultsLayout()
    results.write_eval_results(path, {"masked_lm_accuracy": 0.5, "global_step": 10, "loss": 2.25},
                               results.ResultsLayout(append=False))
    assert open(path).read() == "global_step = 10\nloss = 2.25\nmasked_lm_accuracy = 0.5\n"
    results.write_eval_results(path, {"global_step": 20}, plain)
    assert open(path).read().endswith("masked_lm_accuracy = 0.5\nglobal_step = 20\n")
    assert results.read_eval_results(path)["global_step"] == "20"


def test_save_hooks_see_each_checkpoint_with_its_weights(toy, toy_data, tmp_path):
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(tmp_path),
                               keep_checkpoint_max=1, dropout=0.0)
    seen = []

    def hook(path):
        reader = tf.train.load_checkpoint(path)  # still on disk: pruning comes with the next save
        saved = reader.get_tensor("model/out/kernel/.ATTRIBUTES/VARIABLE_VALUE")
        seen.append((files.step_of(path), bool((saved == trainer.model.out.kernel.numpy()).all())))

    trainer.add_save_hook(hook)
    trainer.train()
    assert seen == [(4, True), (8, True), (12, True)]


def test_checkpoint_evaluator_scores_each_checkpoint_once_and_keeps_the_best(toy, toy_data, tmp_path):
    scripted = {4: 0.5, 8: 0.9, 12: 0.7}
    calls = []

    def evaluate(path):
        calls.append(files.step_of(path))
        return {"accuracy": scripted[files.step_of(path)], "global_step": files.step_of(path)}

    layout = results.ResultsLayout(best_line=True, separator="-" * 3)
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(tmp_path),
                               keep_checkpoint_max=1, dropout=0.0)
    evaluator = checkpoint_evaluation.CheckpointEvaluator(str(tmp_path), evaluate, "accuracy", layout)
    trainer.add_save_hook(evaluator.after_save)
    trainer.train()
    assert calls == [4, 8, 12]  # every checkpoint, although keep_checkpoint_max=1 deleted two
    assert (tmp_path / "best_trial.txt").read_text() == "12:8:0.9"
    assert (tmp_path / "eval_results.txt").read_text() == (
        "accuracy = 0.5\nglobal_step = 4\nbest = 0.5\n---\n"
        "accuracy = 0.9\nglobal_step = 8\nbest = 0.9\n---\n"
        "accuracy = 0.7\nglobal_step = 12\nbest = 0.9\n---\n")
    best = tf.train.load_checkpoint(str(tmp_path / "model.ckpt-best"))
    assert best.get_tensor("global_step/.ATTRIBUTES/VARIABLE_VALUE") == 8
    # A rerun finds nothing left to evaluate.
    assert checkpoint_evaluation.CheckpointEvaluator(str(tmp_path), evaluate, "accuracy", layout).evaluate_pending() == 0
    assert calls == [4, 8, 12]


def test_results_layouts(tmp_path):
    tuned = results.ResultsLayout(sort_keys=False, append=False, tuned_keys=("best_f1",), tuned_comment="# tuned")
    text = results.format_eval_results({"f1": 0.5, "exact": np.float32(0.25), "best_f1": 0.75, "total": 3}, tuned)
    assert text == "f1 = 0.5\nexact = 0.25\ntotal = 3\n# tuned\nbest_f1 = 0.75\n"
    path = tmp_path / "eval_results.txt"
    results.write_eval_results(path, {"f1": 1.0}, tuned)
    results.write_eval_results(path, {"f1": 2.0}, tuned)  # not appended: one evaluation per file
    assert path.read_text() == "f1 = 2.0\n"


def test_a_full_disk_while_copying_the_best_leaves_the_previous_best_whole(tmp_path, monkeypatch):
    """model.ckpt-best is replaced only once the new copy is complete: a copy that fails (a full disk)
    removes what it wrote, keeps the old best loadable and best_trial.txt as it was, and says so in
    one line."""
    from albert_tf.training import faults

    keeper = checkpoint_evaluation.BestCheckpointKeeper(str(tmp_path), "accuracy")
    assert keeper.update(save(tmp_path, 10, 1.0), {"accuracy": 0.5})
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    copy = tf.io.gfile.copy

    def copy_then_fill_the_disk(src, dst, overwrite=False):
        if src.endswith(".index"):  # the data shard is copied, then the disk is full
            raise tf.errors.ResourceExhaustedError(None, None, f"{dst}; No space left on device")
        copy(src, dst, overwrite)

    monkeypatch.setattr(tf.io.gfile, "copy", copy_then_fill_the_disk)
    newer = save(tmp_path, 20, 2.0)
    with pytest.raises(faults.DiskFullError) as err:
        keeper.update(newer, {"accuracy": 0.9})
    assert "\n" not in str(err.value) and "previous best is unchanged" in str(err.value)
    after = {p.name: p.read_bytes() for p in tmp_path.iterdir() if not p.name.startswith("model.ckpt-20")}
    assert after == dict(before, checkpoint=after["checkpoint"])  # no temporary copy left, old best whole
    monkeypatch.undo()
    assert keeper.read() == (10, 10, 0.5)
    assert keeper.update(newer, {"accuracy": 0.9}) and keeper.read() == (20, 20, 0.9)
    restored = make_checkpoint(0.0)
    restored.read(str(tmp_path / "model.ckpt-best")).assert_consumed()
    assert restored.w.numpy().tolist() == [2.0, 2.0]


def test_replacing_a_checkpoint_removes_the_old_ones_extra_shards(tmp_path):
    save(tmp_path, 10, 1.0)
    (tmp_path / "model.ckpt-best.index").write_bytes(b"an older best, saved in two shards")
    for shard in ("00000", "00001"):
        (tmp_path / f"model.ckpt-best.data-{shard}-of-00002").write_bytes(b"old")
    files.copy_checkpoint(str(tmp_path / "model.ckpt-10"), str(tmp_path / "model.ckpt-best"))
    assert sorted(p.name for p in tmp_path.glob("model.ckpt-best*")) == [
        "model.ckpt-best.data-00000-of-00001", "model.ckpt-best.index"]
    assert files.checkpoint_damage(str(tmp_path / "model.ckpt-best")) is None


@pytest.mark.parametrize("content", [b"", b"20:10", b"twenty:10:0.5", b"\xff\xfe20:10:0.5"])
def test_a_damaged_best_trial_or_eval_results_is_one_line_naming_it(tmp_path, content):
    """best_trial.txt emptied by a power loss, cut short or edited, and an eval_results.txt that is not
    UTF-8: one line naming the file and the way out, not a bare unpacking or codec error."""
    from albert_tf.errors import RunError

    keeper = checkpoint_evaluation.BestCheckpointKeeper(str(tmp_path), "accuracy")
    (tmp_path / "best_trial.txt").write_bytes(content)
    expected = "is not UTF-8 text" if content.startswith(b"\xff") else "not '<last evaluated step>:<best step>"
    with pytest.raises(RunError, match=expected) as raised:
        keeper.update(save(tmp_path, 10, 1.0), {"accuracy": 0.5})
    assert str(tmp_path / "best_trial.txt") in str(raised.value) and "\n" not in str(raised.value)
    assert (tmp_path / "best_trial.txt").read_bytes() == content  # left as it was

    (tmp_path / "eval_results.txt").write_bytes(b"accuracy = 0.5\n\xff\n")
    layout = results.ResultsLayout(append=True)
    with pytest.raises(RunError, match=r"eval_results\.txt is not UTF-8 text \(byte 15\)"):
        results.write_eval_results(tmp_path / "eval_results.txt", {"accuracy": 0.6}, layout)
    assert (tmp_path / "eval_results.txt").read_bytes() == b"accuracy = 0.5\n\xff\n"


def test_a_resumed_run_does_not_score_the_checkpoint_saved_where_it_was_stopped(tmp_path):
    """SIGTERM at step 25 with --save_checkpoints_steps=10 saves model.ckpt-25. An uninterrupted run has no
    such checkpoint, so the resumed run must not score it (it could become model.ckpt-best); the ones on the
    schedule that the stopped run left unscored are scored; an eval-only run (no schedule) scores them all."""
    for step in (10, 20, 25):
        save(tmp_path, step, float(step))
    calls = []

    def evaluate(path):
        calls.append(files.step_of(path))
        return {"accuracy": {10: 0.1, 20: 0.2, 25: 0.9, 30: 0.3}[files.step_of(path)]}

    layout = results.ResultsLayout(sort_keys=True, best_line=True, separator="---")
    evaluator = checkpoint_evaluation.CheckpointEvaluator(str(tmp_path), evaluate, "accuracy", layout)
    assert evaluator.evaluate_pending(lambda step: step % 10 == 0) == 2
    assert calls == [10, 20] and (tmp_path / "best_trial.txt").read_text() == "20:20:0.2"
    evaluator.after_save(save(tmp_path, 30, 30.0))  # the resumed run's next save: 25 is behind it for good
    assert evaluator.pending() == []

    eval_only = tmp_path / "eval_only"
    for step in (10, 20, 25):
        save(eval_only, step, float(step))
    calls.clear()
    checkpoint_evaluation.CheckpointEvaluator(str(eval_only), evaluate, "accuracy", layout).evaluate_pending()
    assert calls == [10, 20, 25]


def test_a_failed_eval_results_write_leaves_the_checkpoint_to_evaluate_again(tmp_path):
    """eval_results.txt is written before best_trial.txt records the step: when that write fails (a folder
    in the way, a full disk), the rerun evaluates the checkpoint again and its block is not lost."""
    for step in (10, 20):
        save(tmp_path, step, float(step))
    layout = results.ResultsLayout(best_line=True, separator="---")

    def evaluate(path):
        return {"accuracy": files.step_of(path) / 100, "global_step": files.step_of(path)}

    (tmp_path / "eval_results.txt").mkdir()  # the first block cannot be written
    evaluator = checkpoint_evaluation.CheckpointEvaluator(str(tmp_path), evaluate, "accuracy", layout)
    with pytest.raises(IsADirectoryError):
        evaluator.evaluate_pending()
    assert evaluator.keeper.read()[0] == -1  # step 10 is not marked as evaluated
    (tmp_path / "eval_results.txt").rmdir()
    evaluator = checkpoint_evaluation.CheckpointEvaluator(str(tmp_path), evaluate, "accuracy", layout)
    assert evaluator.evaluate_pending() == 2
    assert (tmp_path / "eval_results.txt").read_text() == (
        "accuracy = 0.1\nglobal_step = 10\nbest = 0.1\n---\naccuracy = 0.2\nglobal_step = 20\nbest = 0.2\n---\n")
    assert (tmp_path / "best_trial.txt").read_text() == "20:20:0.2"


def test_best_is_compared_as_written_so_a_float32_tie_is_no_win(tmp_path):
    """float32 metrics are written as str(np.float32) (0.1, the original's form); the next checkpoint's
    value is compared with that text's number, so an equal float32 value (0.10000000149 as float64)
    does not beat it."""
    from albert_tf.training.checkpoint_evaluation import BestCheckpointKeeper

    for step in (10, 20):
        tf.train.Checkpoint(w=tf.Variable([float(step)])).write(str(tmp_path / f"model.ckpt-{step}"))
    keeper = BestCheckpointKeeper(str(tmp_path), "eval_accuracy")
    assert keeper.update(str(tmp_path / "model.ckpt-10"), {"eval_accuracy": np.float32(0.1)})
    assert (tmp_path / "best_trial.txt").read_text() == "10:10:0.1"
    assert not keeper.update(str(tmp_path / "model.ckpt-20"), {"eval_accuracy": np.float32(0.1)})
    assert (tmp_path / "best_trial.txt").read_text() == "20:10:0.1"
    assert tf.train.load_variable(str(tmp_path / "model.ckpt-best"), "w/.ATTRIBUTES/VARIABLE_VALUE")[0] == 10.0


@pytest.mark.parametrize("metric,higher_is_better,fraction", [
    ("eval_accuracy", True, 2 / 3),   # float32 text 0.6666667 > 0.6666666666666666
    ("eval_loss", False, 1 / 9),      # float32 text 0.11111111 < 0.1111111111111111
])
def test_a_best_an_earlier_version_wrote_as_float64_ties_with_the_equal_float32(
        tmp_path, metric, higher_is_better, fraction):
    """A resumed run: best_trial.txt from a version that wrote the best as a float64 repr; the next
    checkpoint scores the same fraction, now a float32 metric. A tie is no win (the original's strict
    comparison), whichever way float32 rounds it, so model.ckpt-best stays the earlier checkpoint."""
    from albert_tf.training.checkpoint_evaluation import BestCheckpointKeeper

    for step in (100, 200):
        tf.train.Checkpoint(w=tf.Variable([float(step)])).write(str(tmp_path / f"model.ckpt-{step}"))
    for suffix in (".index", ".data-00000-of-00001"):
        (tmp_path / f"model.ckpt-best{suffix}").write_bytes((tmp_path / f"model.ckpt-100{suffix}").read_bytes())
    (tmp_path / "best_trial.txt").write_text(f"100:100:{fraction!r}")
    keeper = BestCheckpointKeeper(str(tmp_path), metric, higher_is_better)
    assert not keeper.update(str(tmp_path / "model.ckpt-200"), {metric: np.float32(fraction)})
    assert tf.train.load_variable(str(tmp_path / "model.ckpt-best"), "w/.ATTRIBUTES/VARIABLE_VALUE")[0] == 100.0
    assert (tmp_path / "best_trial.txt").read_text().split(":")[:2] == ["200", "100"]


def test_a_kill_after_the_results_block_and_before_best_trial_does_not_repeat_the_block(tmp_path, monkeypatch):
    """The run is killed (here: the write raises) after eval_results.txt got step 20's block and before
    best_trial.txt recorded step 20. The rerun evaluates step 20 again (same numbers) and must not add its
    block a second time: the file ends as an uninterrupted run's, block for block."""
    layout = results.ResultsLayout(best_line=True, separator="=" * 50)

    def evaluate(path):
        return {"accuracy": {10: 0.5, 20: 0.75, 30: 0.25}[files.step_of(path)], "global_step": files.step_of(path)}

    whole = tmp_path / "whole"
    for step in (10, 20, 30):
        save(whole, step, float(step))
    checkpoint_evaluation.CheckpointEvaluator(str(whole), evaluate, "accuracy", layout).evaluate_pending()

    out = tmp_path / "killed"
    for step in (10, 20, 30):
        save(out, step, float(step))
    real_write = checkpoint_evaluation.atomic_write_text

    def killed_at_step_20(path, text):
        if path.endswith("best_trial.txt") and text.startswith("20:"):
            raise KeyboardInterrupt  # stands for the SIGKILL: nothing after it runs
        return real_write(path, text)

    monkeypatch.setattr(checkpoint_evaluation, "atomic_write_text", killed_at_step_20)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_evaluation.CheckpointEvaluator(str(out), evaluate, "accuracy", layout).evaluate_pending()
    monkeypatch.undo()
    assert (out / "best_trial.txt").read_text() == "10:10:0.5"  # step 20 not recorded
    assert (out / "eval_results.txt").read_text().count("global_step = 20") == 1  # but its block is there
    rerun = checkpoint_evaluation.CheckpointEvaluator(str(out), evaluate, "accuracy", layout)
    assert rerun.evaluate_pending() == 2  # 20 again, then 30
    assert (out / "eval_results.txt").read_text() == (whole / "eval_results.txt").read_text()
    assert (out / "best_trial.txt").read_text() == (whole / "best_trial.txt").read_text() == "30:20:0.75"
    # Pretraining's layout (no separator, no best line) too.
    plain = results.ResultsLayout(sort_keys=True)
    path = tmp_path / "plain" / "eval_results.txt"
    path.parent.mkdir()
    for step in (10, 20):
        save(path.parent, step, float(step))
    evaluator = checkpoint_evaluation.CheckpointEvaluator(str(path.parent), evaluate, "accuracy", plain)
    evaluator.evaluate_pending()
    once = path.read_text()
    (path.parent / "best_trial.txt").write_text("10:20:0.75")  # as if killed before recording step 20
    rerun = checkpoint_evaluation.CheckpointEvaluator(str(path.parent), evaluate, "accuracy", plain)
    assert rerun.evaluate_pending() == 1 and path.read_text() == once


@pytest.mark.parametrize("removals_before_the_kill", [0, 1, 2, 3])
def test_a_kill_while_pruning_leaves_nothing_the_next_pruning_misses(tmp_path, monkeypatch, removals_before_the_kill):
    """keep_checkpoint_max=2: saving step 6 prunes step 2 (its data shard, index and input position). A kill
    after any number of its removals (here: the next removal raises) must leave step 2's remains where the next
    save's pruning finds them: the index went first before, and the input position left behind was no
    checkpoint's, so it stayed for good."""
    def save_with_input(step):
        prefix = files.write_checkpoint_atomically(make_checkpoint(float(step)),
                                                   files.checkpoint_prefix(str(tmp_path), step))
        files.write_checkpoint_atomically(tf.train.Checkpoint(p=tf.Variable(step)), prefix + ".input-0")
        return prefix

    for step in (2, 4):
        files.update_state_file(str(tmp_path), save_with_input(step), 2)
    six = save_with_input(6)
    remove, done = tf.io.gfile.remove, []

    def killed(path):
        if len(done) == removals_before_the_kill:
            raise KeyboardInterrupt  # stands for the SIGKILL
        done.append(path)
        remove(path)

    monkeypatch.setattr(tf.io.gfile, "remove", killed)
    with pytest.raises(KeyboardInterrupt):
        files.update_state_file(str(tmp_path), six, 2)
    monkeypatch.undo()
    assert tf.train.latest_checkpoint(str(tmp_path)) == six
    files.update_state_file(str(tmp_path), save_with_input(8), 2)  # the rerun's next save
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "checkpoint") == sorted(
        f"model.ckpt-{step}{suffix}" for step in (6, 8) for suffix in (
            ".index", ".data-00000-of-00001", ".input-0.index", ".input-0.data-00000-of-00001"))


def test_checkpoints_scoring_the_same_each_get_their_block(tmp_path):
    """SQuAD's blocks hold no step: two checkpoints with the same scores have the same block, and the original
    writes it once per checkpoint. Only a rerun's first pending checkpoint may find its block already there."""
    from albert_tf.squad import postprocess

    for step in (10, 20):
        save(tmp_path, step, float(step))
    layout = postprocess.checkpoint_layout(False)
    block = "exact_match = 50.0\nf1 = 60.0\nbest f1 = 60.0\n" + "=" * 50 + "\n"
    evaluator = checkpoint_evaluation.CheckpointEvaluator(
        str(tmp_path), lambda path: {"exact_match": 50.0, "f1": 60.0}, "f1", layout)
    assert evaluator.evaluate_pending() == 2
    assert (tmp_path / "eval_results.txt").read_text() == block * 2
    save(tmp_path, 30, 30.0)  # the training run's next save, evaluated by the save hook
    evaluator.after_save(str(tmp_path / "model.ckpt-30"))
    assert (tmp_path / "eval_results.txt").read_text() == block * 3
    assert (tmp_path / "best_trial.txt").read_text() == "30:10:60.0"


def _squad_like_evaluator(out, scores):
    """SQuAD's layout: blocks without a step, so two checkpoints that score the same write equal blocks."""
    layout = results.ResultsLayout(sort_keys=True, best_line=True, best_label="best f1", separator="=" * 50,
                                   append=True)
    return checkpoint_evaluation.CheckpointEvaluator(
        str(out), lambda path: {"f1": scores[files.step_of(path)]}, "f1", layout)


def test_two_checkpoints_that_score_the_same_each_get_their_block(tmp_path):
    """Early in SQuAD 2.0's training every answer is empty: steps 5 and 8 score the same. Each evaluation
    logged is in eval_results.txt, as in the original, whether evaluated after its save or in one pass."""
    scores = {5: 49.8, 8: 49.8, 11: 50.0}
    after_save = tmp_path / "after_save"
    evaluator = _squad_like_evaluator(after_save, scores)
    for step in (5, 8, 11):
        evaluator.after_save(save(after_save, step, float(step)))
    blocks = (after_save / "eval_results.txt").read_text().split("=" * 50 + "\n")
    assert [block.splitlines()[0] for block in blocks[:3]] == ["f1 = 49.8", "f1 = 49.8", "f1 = 50.0"]
    assert (after_save / "best_trial.txt").read_text() == "11:11:50.0"

    one_pass = tmp_path / "one_pass"  # an eval-only run over checkpoints saved earlier
    for step in (5, 8, 11):
        save(one_pass, step, float(step))
    assert _squad_like_evaluator(one_pass, scores).evaluate_pending() == 3
    assert (one_pass / "eval_results.txt").read_text() == (after_save / "eval_results.txt").read_text()


def test_a_checkpoint_saved_after_the_last_block_is_not_taken_for_a_killed_runs(tmp_path):
    """Step 5 recorded whole; the run then saved step 8 and was killed before evaluating it. The rerun's
    first evaluation (step 8, scoring as step 5) is new: its block is added, though equal to the last one."""
    scores = {5: 49.8, 8: 49.8}
    evaluator = _squad_like_evaluator(tmp_path, scores)
    evaluator.after_save(save(tmp_path, 5, 5.0))
    once = (tmp_path / "eval_results.txt").read_text()
    save(tmp_path, 8, 8.0)
    assert _squad_like_evaluator(tmp_path, scores).evaluate_pending() == 1
    assert (tmp_path / "eval_results.txt").read_text() == once * 2

