"""The checkpoint state file is never trusted, and files get the umask's mode.

Empty (a power loss), garbled, not UTF-8, or naming checkpoints that are gone: resume takes the newest
intact checkpoint on disk and rewrites the state file from what is there; retention (keep_checkpoint_max)
and evaluation see every checkpoint on disk; evaluation skips damaged checkpoints, naming them."""
import logging as std_logging
import os
import signal
import stat

import pytest
import tensorflow as tf

from albert_tf.fileio import atomic_write_text, atomic_write_texts, make_folders, umask_mode
from albert_tf.glue.outputs import RESULTS_LAYOUT
from albert_tf.errors import RunError
from albert_tf.training.checkpoint_evaluation import BestCheckpointKeeper, CheckpointEvaluator
from albert_tf.training.checkpoint_policy import CheckpointPolicy
from albert_tf.training.distribution import WorkerInfo
from albert_tf.weights import files, load_checkpoint

BAD_STATE_FILES = {
    "empty": (b"", "is empty"),
    "garbled": (b"model_checkpoint_path {{{ not a proto", "is garbled"),
    "not_utf8": (b"\xff\xfe\x00model_checkpoint_path", "is not UTF-8 text"),
    "names_missing": (b'model_checkpoint_path: "model.ckpt-99"\nall_model_checkpoint_paths: "model.ckpt-99"\n',
                      "names missing checkpoint(s) model.ckpt-99"),
}


def _save(out, step, keep=0):
    checkpoint = tf.train.Checkpoint(w=tf.Variable([float(step)] * 4), global_step=tf.Variable(step, dtype=tf.int64))
    prefix = files.write_checkpoint_atomically(checkpoint, files.checkpoint_prefix(str(out), step))
    files.update_state_file(str(out), prefix, keep)
    return prefix


def _checkpoints_with_state(out, state: bytes):
    for step in (10, 20, 30):
        _save(out, step)
    (out / "checkpoint").write_bytes(state)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("kind", sorted(BAD_STATE_FILES))
def test_an_untrusted_state_file_resumes_from_the_newest_checkpoint_and_is_rewritten(tmp_path, kind, caplog):
    state, problem = BAD_STATE_FILES[kind]
    _checkpoints_with_state(tmp_path, state)
    assert files.state_file_problem(str(tmp_path)) == f"{tmp_path / 'checkpoint'} {problem}"
    policy = CheckpointPolicy(str(tmp_path), 10, 0, WorkerInfo(1, 0, True))
    with caplog.at_level(std_logging.WARNING):
        assert policy.latest() == str(tmp_path / "model.ckpt-30")
    assert any(problem in r.getMessage() and "rewriting it" in r.getMessage() for r in caplog.records)
    # Rewritten from what is on disk: TensorFlow reads it, every checkpoint listed, the umask's mode.
    assert files.state_file_problem(str(tmp_path)) is None
    written = tf.train.get_checkpoint_state(str(tmp_path))
    assert written.model_checkpoint_path == str(tmp_path / "model.ckpt-30")
    assert list(written.all_model_checkpoint_paths) == [str(tmp_path / f"model.ckpt-{s}") for s in (10, 20, 30)]
    assert _mode(tmp_path / "checkpoint") == umask_mode()


@pytest.mark.parametrize("kind", sorted(BAD_STATE_FILES))
def test_retention_evaluation_and_loading_see_every_checkpoint_on_disk(tmp_path, kind):
    """No resume in between: the next save's pruning, the evaluator and a directory restore read the disk."""
    _checkpoints_with_state(tmp_path, BAD_STATE_FILES[kind][0])
    evaluated = []
    evaluator = CheckpointEvaluator(str(tmp_path), lambda p: evaluated.append(p) or {"eval_accuracy": 0.5},
                                    "eval_accuracy", RESULTS_LAYOUT)
    assert evaluator.pending() == [str(tmp_path / f"model.ckpt-{s}") for s in (10, 20, 30)]
    # A directory restore takes the newest on disk when the state file is not to be trusted.
    assert files.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-30")
    assert evaluator.evaluate_pending() == 3 and [files.step_of(p) for p in evaluated] == [10, 20, 30]
    # Retention: keeping 2, the save of step 40 removes 10 and 20, which the state file did not show.
    _save(tmp_path, 40, keep=2)
    assert sorted(p.name for p in tmp_path.glob("model.ckpt-[0-9]*.index")) == ["model.ckpt-30.index",
                                                                               "model.ckpt-40.index"]
    assert files.all_checkpoints(str(tmp_path)) == [str(tmp_path / "model.ckpt-30"), str(tmp_path / "model.ckpt-40")]


def test_a_keras_model_restores_from_a_folder_with_an_empty_state_file(tmp_path):
    """load_checkpoint(folder) (predict, export, --init_checkpoint=<dir>): the newest checkpoint on disk."""
    from albert_tf.config import AlbertConfig
    from albert_tf.modeling.encoder import AlbertModel

    config = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    model = AlbertModel(config)
    model(model.dummy_inputs(seq_length=4))
    for step in (1, 2):
        for v in model.trainable_variables:
            v.assign(tf.fill(v.shape, float(step)))
        prefix = files.write_checkpoint_atomically(tf.train.Checkpoint(model=model),
                                                   files.checkpoint_prefix(str(tmp_path), step))
        files.update_state_file(str(tmp_path), prefix, 0)
    (tmp_path / "checkpoint").write_bytes(b"")
    other = AlbertModel(config)
    report = load_checkpoint(other, str(tmp_path))
    assert report.path == str(tmp_path / "model.ckpt-2")
    assert float(other.trainable_variables[0].numpy().flat[0]) == 2.0


def test_evaluation_skips_damaged_checkpoints_naming_them(tmp_path, caplog):
    for step in (10, 20, 30):
        _save(tmp_path, step)
    data = tmp_path / "model.ckpt-20.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:-8])
    evaluator = CheckpointEvaluator(str(tmp_path), lambda p: {"eval_accuracy": 0.5}, "eval_accuracy",
                                    RESULTS_LAYOUT)
    with caplog.at_level(std_logging.WARNING):
        assert evaluator.pending() == [str(tmp_path / "model.ckpt-10"), str(tmp_path / "model.ckpt-30")]
    assert any(f"{data} is damaged" in r.getMessage() and "Not evaluating" in r.getMessage()
               for r in caplog.records)


def test_a_model_ckpt_best_no_evaluation_here_wrote_is_never_replaced(tmp_path):
    """Google's releases ship model.ckpt-best: an --output_dir holding one (no best_trial.txt beside it)
    is refused before any work, its files untouched. Ours always has best_trial.txt beside it, even
    right after the first copy; it is replaced by a better checkpoint as before."""
    user = tmp_path / "release"
    user.mkdir()
    files.write_checkpoint_atomically(tf.train.Checkpoint(w=tf.Variable([7.0])), str(user / "model.ckpt-best"))
    before = {p.name: p.read_bytes() for p in user.iterdir()}
    with pytest.raises(RunError, match=r"model.ckpt-best is not from an evaluation in this folder \(there is no "
                                       r"best_trial.txt beside it\): not replacing it"):
        CheckpointEvaluator(str(user), lambda p: {"eval_accuracy": 0.5}, "eval_accuracy", RESULTS_LAYOUT)
    assert {p.name: p.read_bytes() for p in user.iterdir()} == before

    out = tmp_path / "run"
    first = _save(out, 10)
    os.chmod(first + ".index", 0o600)  # a copy must not keep its source's mode
    keeper = BestCheckpointKeeper(str(out), "eval_accuracy")
    assert keeper.update(first, {"eval_accuracy": 0.5})
    assert (out / "best_trial.txt").read_text() == "10:10:0.5"
    assert _mode(out / "model.ckpt-best.index") == umask_mode()
    CheckpointEvaluator(str(out), lambda p: {"eval_accuracy": 0.5}, "eval_accuracy", RESULTS_LAYOUT)  # ours
    assert keeper.update(_save(out, 20), {"eval_accuracy": 0.75})
    assert tf.train.load_variable(str(out / "model.ckpt-best"), "w/.ATTRIBUTES/VARIABLE_VALUE")[0] == 20.0


def test_an_evaluation_only_run_with_every_checkpoint_damaged_stops(tmp_path):
    for step in (10, 20):
        _save(tmp_path, step)
        data = tmp_path / f"model.ckpt-{step}.data-00000-of-00001"
        data.write_bytes(data.read_bytes()[:-8])
    evaluator = CheckpointEvaluator(str(tmp_path), lambda p: {"eval_accuracy": 0.5}, "eval_accuracy",
                                    RESULTS_LAYOUT)
    with pytest.raises(RunError, match=f"no intact checkpoint to evaluate in {tmp_path}: .*model.ckpt-10.data"):
        evaluator.evaluate_pending(eval_only=True)
    assert evaluator.evaluate_pending() == 0  # a training run's leftovers: it goes on training
    assert not (tmp_path / "eval_results.txt").exists()


def test_retention_never_deletes_checkpoints_the_run_did_not_write(tmp_path):
    """A converted ``model.ckpt`` the run starts from (convert_checkpoint.py lists it in the folder's
    state file) and a checkpoint of another folder the state file names stay on disk and listed,
    however many saves retention drops."""
    out, elsewhere = tmp_path / "out", tmp_path / "other"
    converted = files.write_checkpoint_atomically(tf.train.Checkpoint(w=tf.Variable([1.0])), str(out / "model.ckpt"))
    files.update_state_file(str(out), converted, 0)  # what weights.saving does
    foreign = files.write_checkpoint_atomically(tf.train.Checkpoint(w=tf.Variable([2.0])),
                                                files.checkpoint_prefix(str(elsewhere), 7))
    files.write_state_file(str(out), converted, [foreign, converted])
    removed = []
    for step in (10, 20, 30, 40):
        removed += files.update_state_file(str(out), files.write_checkpoint_atomically(
            tf.train.Checkpoint(w=tf.Variable([float(step)])), files.checkpoint_prefix(str(out), step)), 2)
    assert removed == [str(out / "model.ckpt-10"), str(out / "model.ckpt-20")]
    assert (out / "model.ckpt.index").exists() and (elsewhere / "model.ckpt-7.index").exists()
    assert sorted(p.name for p in out.glob("model.ckpt-*.index")) == ["model.ckpt-30.index", "model.ckpt-40.index"]
    state = tf.train.get_checkpoint_state(str(out))
    assert state.model_checkpoint_path == str(out / "model.ckpt-40")
    assert set(state.all_model_checkpoint_paths) == {foreign, converted, str(out / "model.ckpt-30"),
                                                     str(out / "model.ckpt-40")}


def test_a_state_file_naming_a_damaged_checkpoint_is_named_with_its_path(tmp_path, caplog):
    _checkpoints_with_state(tmp_path, b'model_checkpoint_path: "model.ckpt-30"\n')
    (tmp_path / "model.ckpt-30.index").write_bytes(b"damaged")
    policy = CheckpointPolicy(str(tmp_path), 10, 0, WorkerInfo(1, 0, True))
    with caplog.at_level(std_logging.WARNING):
        assert policy.latest() == str(tmp_path / "model.ckpt-20")
    assert any(r.getMessage().startswith(f"{tmp_path / 'checkpoint'} names a damaged latest checkpoint: rewriting")
               for r in caplog.records)


def test_retention_deletes_only_a_checkpoints_own_files(tmp_path):
    """A pruned step's index, data shards and input positions go; files that only share its name (a
    user's notes, a TF1 Estimator's graph) stay."""
    out = tmp_path / "out"
    prefix = _save(out, 6)
    tf.train.Checkpoint(position=tf.Variable(3)).write(f"{prefix}.input-0")
    others = [out / "model.ckpt-6.notes.txt", out / "model.ckpt-6.meta", out / "model.ckpt-6.index.bak"]
    for other in others:
        other.write_text("not the run's")
    _save(out, 7, keep=1)
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("model.ckpt-6")) == sorted(
        p.name for p in others)
    assert [p.read_text() for p in others] == ["not the run's"] * 3


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o077])
def test_atomic_writes_get_the_umask_mode(tmp_path, mask):
    old = os.umask(mask)
    try:
        path = atomic_write_text(str(tmp_path / "eval_results.txt"), "x = 1\n")
        prefix = _save(tmp_path, 5)
    finally:
        os.umask(old)
    want = 0o666 & ~mask
    assert _mode(path) == want
    assert _mode(tmp_path / "checkpoint") == want
    for f in tmp_path.glob(os.path.basename(prefix) + ".*"):  # TensorFlow's own files: the same mode
        assert _mode(f) == want, f


def test_a_folder_the_output_cannot_be_created_in_names_the_output(tmp_path, monkeypatch):
    """A folder the user may not write (EACCES at the temporary's creation): the error names the output,
    not a temporary name the user never sees (as root, permissions cannot deny it: mkstemp is made to)."""
    import tempfile

    def refused(prefix, suffix, dir):
        raise PermissionError(13, "Permission denied", os.path.join(dir, f"{prefix}abc123{suffix}"))

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    with pytest.raises(PermissionError) as raised:
        atomic_write_text(str(tmp_path / "eval_results.txt"), "x = 1\n")
    assert raised.value.filename == str(tmp_path / "eval_results.txt")


def test_files_that_belong_together_are_replaced_together(tmp_path):
    """SQuAD's predictions.json / nbest_predictions.json, GLUE's test_results.tsv / submit_results.tsv: a
    failure while writing the second (here a text UTF-8 cannot encode) leaves the first one old as well."""
    pair = [tmp_path / "predictions.json", tmp_path / "nbest_predictions.json"]
    atomic_write_texts({pair[0]: "old 1", pair[1]: "old 2"})
    with pytest.raises(UnicodeEncodeError):
        atomic_write_texts({pair[0]: "new 1", pair[1]: "new \ud800"})
    assert [p.read_text() for p in pair] == ["old 1", "old 2"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in pair)  # no temporaries left
    assert atomic_write_texts({pair[0]: "new 1", pair[1]: "new 2"}) == [str(p) for p in pair]
    assert [p.read_text() for p in pair] == ["new 1", "new 2"]
    assert {_mode(p) for p in pair} == {umask_mode()}


@pytest.mark.parametrize("blocked", [0, 1, 2])
def test_a_folder_at_one_name_of_files_that_belong_together_replaces_none(tmp_path, blocked):
    """A folder where one of SQuAD's three outputs goes: its rename would fail after the others were
    replaced (they were). It is refused before any write, the error names it (not a temporary), and the
    other files stay old."""
    names = [tmp_path / "predictions.json", tmp_path / "nbest_predictions.json", tmp_path / "null_odds.json"]
    for i, path in enumerate(names):
        path.mkdir() if i == blocked else path.write_text("old")
    with pytest.raises(IsADirectoryError) as raised:
        atomic_write_texts({path: "new" for path in names})
    assert raised.value.filename == str(names[blocked]) and ".tmp-" not in str(raised.value)
    assert [p.read_text() for i, p in enumerate(names) if i != blocked] == ["old", "old"]
    assert sorted(tmp_path.iterdir()) == sorted(names)  # no temporaries left
    with pytest.raises(IsADirectoryError) as raised:  # one file: the output named, not its temporary
        atomic_write_text(names[blocked], "new")
    assert raised.value.filename == str(names[blocked]) and ".tmp-" not in str(raised.value)
    assert sorted(tmp_path.iterdir()) == sorted(names)


def test_a_symlinked_output_is_written_through_and_stays_a_link(tmp_path):
    """A user who links ``eval_results.txt`` or ``test_results.tsv`` to a shared folder keeps the link: the
    new text goes to the link's target, as the original's open() wrote it (the link was replaced by a
    regular file and the target kept the old text). A relative link resolves from the link's folder."""
    run, shared = tmp_path / "run", tmp_path / "shared"
    run.mkdir(), shared.mkdir()
    for name in ("eval_results.txt", "test_results.tsv", "submit_results.tsv"):
        (shared / name).write_text("old")
        (run / name).symlink_to(os.path.join("..", "shared", name))
    atomic_write_text(run / "eval_results.txt", "new 1")
    atomic_write_texts({run / "test_results.tsv": "new 2", run / "submit_results.tsv": "new 3"})
    for name, text in [("eval_results.txt", "new 1"), ("test_results.tsv", "new 2"), ("submit_results.tsv", "new 3")]:
        assert (run / name).is_symlink() and (shared / name).read_text() == text
    assert sorted(p.name for p in shared.iterdir()) == ["eval_results.txt", "submit_results.tsv", "test_results.tsv"]
    assert len(list(run.iterdir())) == 3  # no temporaries in either folder


@pytest.mark.parametrize("below", ["", "sub"])
def test_an_output_folder_through_a_link_to_nothing_names_the_link_and_its_target(tmp_path, below):
    """``--output_dir`` a symlink to a folder not there (a scratch disk not mounted): the error said "Not a
    directory" (or a bare "No such file") of a name that looks like a folder; it names the link and where
    it points, and nothing is created at either."""
    link, target = tmp_path / "out", tmp_path / "scratch" / "run"
    link.symlink_to(target)
    with pytest.raises(FileNotFoundError) as raised:
        make_folders(os.path.join(link, below) if below else link)
    assert raised.value.filename == str(link) and f"a link to {target}, which does not exist" in str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    (tmp_path / "file").write_text("x")  # a file at the name is still told so
    with pytest.raises(NotADirectoryError) as raised:
        make_folders(tmp_path / "file")
    assert raised.value.filename == str(tmp_path / "file")


def test_a_link_to_a_writable_file_in_a_read_only_folder_is_written_in_place(tmp_path, monkeypatch):
    """Written through, the temporary file went beside the link's target: a target the user may write in a
    folder they may not (a shared results folder) failed the run after its evaluation with 'Permission
    denied' naming the writable file, where the original's open() wrote it. It is written in place now,
    keeping its mode. (Root may write any folder: the refusal a user meets is simulated.)"""
    import errno
    import tempfile

    from albert_tf import fileio

    run, shared = tmp_path / "run", tmp_path / "shared"
    run.mkdir(), shared.mkdir()
    (shared / "eval_results.txt").write_text("old")
    (shared / "eval_results.txt").chmod(0o640)
    (run / "eval_results.txt").symlink_to(shared / "eval_results.txt")
    shared.chmod(0o555)
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and os.path.samefile(dir, shared):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.path.join(dir, "x.tmp"))
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(fileio.tempfile, "mkstemp", mkstemp)
    try:
        atomic_write_text(run / "eval_results.txt", "new")
    finally:
        shared.chmod(0o755)
    assert (run / "eval_results.txt").is_symlink() and (shared / "eval_results.txt").read_text() == "new"
    assert stat.S_IMODE((shared / "eval_results.txt").stat().st_mode) == 0o640
    assert [p.name for p in run.iterdir()] == ["eval_results.txt"]
    assert [p.name for p in shared.iterdir()] == ["eval_results.txt"]


def test_a_link_to_nothing_makes_no_folder_where_it_points(tmp_path):
    """open() through a link to nothing creates the target in its folder, and fails when that folder is not
    there: the write-through made the folder wherever the link pointed (an unmounted share's path)."""
    run = tmp_path / "run"
    run.mkdir()
    link = run / "eval_results.txt"
    link.symlink_to(tmp_path / "unmounted" / "results" / "eval_results.txt")
    with pytest.raises(FileNotFoundError):
        open(link, "w")  # the original's GFile(..., "w") is this open()
    with pytest.raises(FileNotFoundError) as caught:
        atomic_write_text(link, "new")
    assert caught.value.filename == str(tmp_path / "unmounted" / "results" / "eval_results.txt")
    assert not (tmp_path / "unmounted").exists() and link.is_symlink()
    (tmp_path / "unmounted" / "results").mkdir(parents=True)  # the folder is there: the target is created
    atomic_write_text(link, "new")
    assert link.is_symlink() and (tmp_path / "unmounted" / "results" / "eval_results.txt").read_text() == "new"


def test_a_folder_named_like_a_glob_pattern_touches_only_its_own_files(tmp_path):
    """``--output_dir=runs/exp[1]`` beside ``runs/exp1``: as a glob pattern the first matches the second.
    Start-up cleanup, saves, retention and the damage check of the ``exp[1]`` run must see only its own
    files: ``exp1``'s checkpoints and save in progress stay, and ``exp[1]`` saves and resumes."""
    other, out = tmp_path / "exp1", tmp_path / "exp[1]"
    for step in (10, 20):
        _save(other, step)
    in_progress = other / f".tmp-{'a' * 32}-model.ckpt-30.index"  # exp1's own save, being written
    in_progress.write_text("x")
    before = sorted(p.name for p in other.iterdir())
    out.mkdir()
    policy = CheckpointPolicy(str(out), 10, 1, WorkerInfo(1, 0, True))
    assert policy.latest() is None  # exp1's checkpoints are not this run's
    for step in (10, 20):
        policy.save(step, tf.train.Checkpoint(w=tf.Variable([float(step)] * 4),
                                               global_step=tf.Variable(step, dtype=tf.int64)))
    assert sorted(p.name for p in other.iterdir()) == before
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint", "model.ckpt-20.data-00000-of-00001",
                                                     "model.ckpt-20.index"]
    assert files.checkpoint_damage(str(out / "model.ckpt-20")) is None
    assert CheckpointPolicy(str(out), 10, 1, WorkerInfo(1, 0, True)).latest() == str(out / "model.ckpt-20")
    assert sorted(p.name for p in other.iterdir()) == before


def test_start_up_cleanup_removes_only_the_temporaries_this_package_names(tmp_path):
    """What a killed save leaves goes; a user's file with ".tmp-" in its name, create_pretraining_data's
    work folder and an export being staged in the run folder stay."""
    ours = [f".tmp-{'0' * 32}-model.ckpt-7.index", f".tmp-{'1' * 32}-model.ckpt-7_temp/",
            f"model.ckpt-best.index.tmp-{'2' * 32}", "checkpoint.tmp-k3_9zq1a.tmp", ".tmp-worker1/",
            ".tmp-1733000000-4242-somehost/", ".tmp-1733000000-4242/"]
    others = ["notes.tmp-draft", "train.tfrecord.tmp-k3_9zq1a/", f"hub.tmp-{'3' * 32}-export/",
              f".tmp-{'4' * 32}-export-hub/", "train.tfrecord.tmp.4242"]
    for name in ours + others:
        path = tmp_path / name.rstrip("/")
        if name.endswith("/"):
            path.mkdir()
            (path / "part").write_text("x")
        else:
            path.write_text("x")
    files.remove_stale_temporaries(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(name.rstrip("/") for name in others)


_WRITE_A_VERSION = """
import os, signal, sys, time
from albert_tf.versions import new_version_folder
with new_version_folder(sys.argv[1]) as (tmp, final):
    os.mkdir(tmp)
    open(os.path.join(tmp, "saved_model.pb"), "w").write("half")
    print(os.path.basename(tmp), flush=True)
    if sys.argv[2] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(300)
"""


def test_a_version_folder_a_killed_export_left_is_removed_by_the_next_export(tmp_path):
    """SIGKILL runs no cleanup: run_squad's --export_dir and GLUE's export left their half-written
    ``saved_model/.tmp-<version>-...`` folder forever. The next export into that folder removes it; an
    export another live process is writing there now stays, and so does a user's folder."""
    import subprocess
    import sys

    from albert_tf.versions import new_version_folder

    def writer(mode):
        return subprocess.Popen([sys.executable, "-c", _WRITE_A_VERSION, str(tmp_path), mode],
                                stdout=subprocess.PIPE, text=True)

    running = writer("sleep")
    try:
        busy = running.stdout.readline().strip()
        killed = writer("kill")
        left = killed.stdout.readline().strip()
        killed.wait()
        users = tmp_path / ".tmp-draft"
        users.mkdir()
        assert {left, busy} <= set(os.listdir(tmp_path))
        with new_version_folder(str(tmp_path)) as (tmp, final):
            os.mkdir(tmp)
            (tmp_path / tmp / "saved_model.pb").write_text("whole")
        assert sorted(os.listdir(tmp_path)) == sorted([busy, ".tmp-draft", os.path.basename(final)])
    finally:
        running.kill()
        running.wait()


def _record_syncs_and_renames(monkeypatch):
    """The order of fsyncs (by the path of the synced descriptor) and renames (by source)."""
    events = []
    real_fsync, real_replace, real_rename = os.fsync, os.replace, tf.io.gfile.rename

    def fsync(fd):
        events.append(("sync", os.readlink(f"/proc/self/fd/{fd}")))
        return real_fsync(fd)

    def replace(src, dst):
        events.append(("rename", os.path.realpath(src)))
        return real_replace(src, dst)

    def rename(src, dst, overwrite=False):
        events.append(("rename", os.path.realpath(src)))
        return real_rename(src, dst, overwrite)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(tf.io.gfile, "rename", rename)
    return events


def test_outputs_reach_the_disk_before_they_replace_the_old_ones(tmp_path, monkeypatch):
    """Without an fsync before the rename, a power cut soon after can leave an empty file where the old
    result or checkpoint was (the rename reached the disk, the data had not)."""
    events = _record_syncs_and_renames(monkeypatch)
    atomic_write_text(tmp_path / "eval_results.txt", "loss = 1.0\n")
    (kind, tmp), *rest = events
    assert kind == "sync" and os.path.basename(tmp).startswith("eval_results.txt")
    assert rest == [("rename", tmp)]

    events.clear()
    _save(tmp_path, 10)
    renamed = [path for kind, path in events if kind == "rename"]
    prefix_files = [path for path in renamed if ".index" in path or ".data-" in path]
    assert len(prefix_files) == 2, events  # the data shard and the index
    for path in prefix_files:
        assert events.index(("sync", path)) < events.index(("rename", path)), events


def test_ctrl_c_between_the_renames_of_files_that_belong_together_acts_after_the_last(tmp_path, monkeypatch,
                                                                                      sigint_raises):
    """A SIGINT after the first rename raised KeyboardInterrupt inside the second file's exit: one file new,
    one old (test_results.tsv against submit_results.tsv)."""
    pair = [tmp_path / "test_results.tsv", tmp_path / "submit_results.tsv"]
    atomic_write_texts({pair[0]: "old 1", pair[1]: "old 2"})
    real_replace = os.replace

    def replace_then_interrupt(src, dst):
        real_replace(src, dst)
        os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(os, "replace", replace_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_texts({pair[0]: "new 1", pair[1]: "new 2"})
    assert [p.read_text() for p in pair] == ["new 1", "new 2"]
