"""Checkpoints that survive faults (issue 25): damaged or missing checkpoints, a process killed
inside a save, a full disk, a second run into one folder and a lost worker.  Each rerun must end
with the uninterrupted run's weights (the reference runs of conftest.py)."""
import errno
import logging as std_logging
import os
import shutil
import socket
import time

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import run_lock
from albert_tf.training import faults
from albert_tf.training.checkpoint_policy import CheckpointPolicy
from albert_tf.training.distribution import WorkerInfo, make_tf_config
from albert_tf.weights import files
from albert_tf.weights.errors import CheckpointError


def _damage(out, how):
    """The faults of the issue's table, on a copy of the reference run (checkpoints 8 and 12)."""
    if how == "state_file_names_a_lost_checkpoint":  # a copy that lost ckpt-12 and named a ckpt-99
        for f in out.glob("model.ckpt-12.*"):
            f.unlink()
        (out / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-99"\n'
                                        'all_model_checkpoint_paths: "model.ckpt-99"\n')
        return "model.ckpt-99.index is missing"
    if how == "truncated_data":
        data = out / "model.ckpt-12.data-00000-of-00001"
        data.write_bytes(data.read_bytes()[:-64])
        return f"{data} is damaged"
    if how == "garbage_index":
        (out / "model.ckpt-12.index").write_bytes(b"\x00garbage" * 4)
        return f"{out / 'model.ckpt-12.index'} is damaged"
    if how == "lost_input_state":
        (out / "model.ckpt-12.input-0.index").unlink()
        return "model.ckpt-12.input-0.index is missing"
    raise AssertionError(how)


def test_resumes_from_the_newest_intact_checkpoint(reference_dropout, toy, toy_data, tmp_path, caplog,
                                                   same_weights):
    """Each damage of the issue's table makes checkpoint 8 the resume point; training from there (once,
    for a truncated data file) ends with the uninterrupted weights."""
    for how in ("state_file_names_a_lost_checkpoint", "garbage_index", "lost_input_state", "truncated_data"):
        out = tmp_path / how
        shutil.copytree(reference_dropout["dir"], out)
        reason = _damage(out, how)
        caplog.clear()
        with caplog.at_level(std_logging.WARNING):
            assert CheckpointPolicy(str(out), 4, 2, WorkerInfo(1, 0, True)).latest() == str(out / "model.ckpt-8")
        warning = [r.getMessage() for r in caplog.records if "Skipping damaged checkpoint" in r.getMessage()]
        assert len(warning) == 1 and reason in warning[0], (how, warning)
        assert f"Resuming from {out / 'model.ckpt-8'}" in warning[0]
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(out),
                               keep_checkpoint_max=2)
    result = trainer.train()
    assert result.global_step == 12 and result.checkpoint_path == str(out / "model.ckpt-12")
    same_weights(toy.weights_by_name(trainer.model), reference_dropout["weights"], atol=1e-6)
    assert CheckpointPolicy(str(out), 4, 2, WorkerInfo(1, 0, True)).resume_point() == str(out / "model.ckpt-12")


def test_no_intact_checkpoint_stops_instead_of_training_from_step_0(reference_dropout, toy, toy_data, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(reference_dropout["dir"], out)
    for step in (8, 12):
        data = out / f"model.ckpt-{step}.data-00000-of-00001"
        data.write_bytes(data.read_bytes()[:10])
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(out))
    with pytest.raises(CheckpointError) as err:
        trainer.train()
    message = str(err.value)
    assert "\n" not in message and "not training from step 0" in message
    assert "model.ckpt-8.data-00000-of-00001" in message and "model.ckpt-12.data-00000-of-00001" in message
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def test_disk_full_while_saving(reference_dropout, toy, toy_data, tmp_path, monkeypatch, same_weights):
    """ENOSPC in the middle of writing checkpoint 12 (its data file half written), resumed from the
    reference's checkpoint 8: one line with the path and the space needed, checkpoint 8 intact and the
    resume point; the rerun ends as the uninterrupted run."""
    out = tmp_path / "run"
    shutil.copytree(reference_dropout["dir"], out)
    files.delete_checkpoint(str(out / "model.ckpt-12"))
    files.update_state_file(str(out), str(out / "model.ckpt-8"), 2)
    write = tf.train.Checkpoint.write

    def full_disk(self, file_prefix, options=None):
        path = write(self, file_prefix, options)
        if "model.ckpt-12" in file_prefix and ".input-" not in file_prefix:
            data = tf.io.gfile.glob(file_prefix + ".data-*")[0]
            with open(data, "r+b") as f:
                f.truncate(os.path.getsize(data) // 2)
            raise tf.errors.ResourceExhaustedError(None, None, f"{data}; No space left on device")
        return path

    monkeypatch.setattr(tf.train.Checkpoint, "write", full_disk)
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(out),
                               keep_checkpoint_max=2)
    with pytest.raises(faults.DiskFullError) as err:
        trainer.train()
    message = str(err.value)
    needed = faults.size_of(trainer.model, trainer.optimizer)
    assert "\n" not in message and str(out / "model.ckpt-12") in message
    assert f"needs about {needed / 2**20:.1f} MiB free" in message and "MiB free;" in message
    assert f"{out / 'model.ckpt-8'} is intact" in message
    assert sorted(p.name for p in out.glob("model.ckpt-12*")) == [] and not list(out.glob("*.tmp-*"))
    assert CheckpointPolicy(str(out), 4, 2, WorkerInfo(1, 0, True)).resume_point() == str(out / "model.ckpt-8")
    assert not (out / "run.lock").exists()
    monkeypatch.undo()
    trainer = toy.make_trainer(tf.distribute.OneDeviceStrategy("/cpu:0"), toy_data["train"], str(out),
                               keep_checkpoint_max=2)
    assert trainer.train().global_step == 12
    same_weights(toy.weights_by_name(trainer.model), reference_dropout["weights"], atol=1e-6)


@pytest.mark.parametrize("err,reason", [
    (tf.errors.ResourceExhaustedError(None, None, "m.data; Disk quota exceeded"), "disk quota exceeded"),
    (tf.errors.UnknownError(None, None, "m.data; File too large"), "file too large for the file system"),
    (OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded"),
    (OSError(errno.EFBIG, "File too large"), "file too large for the file system"),
])
def test_a_quota_or_a_file_size_limit_while_saving_is_a_full_disk(tmp_path, monkeypatch, err, reason):
    """EDQUOT (a cluster's quota) and EFBIG (FAT32's 4 GiB, ulimit -f) are the storage out of room, as
    ENOSPC: one line saying which, what was written of the checkpoint removed, the previous one the resume
    point (they were a raw TensorFlow error naming a temporary, and left the input position files)."""
    policy = CheckpointPolicy(str(tmp_path), 4, 2, WorkerInfo(1, 0, True), size_estimate=lambda: 12_345_678)
    model = tf.train.Checkpoint(w=tf.Variable([1.0, 2.0]))
    position = tf.train.Checkpoint(p=tf.Variable(3))
    previous = policy.save(4, model, position)
    write = tf.train.Checkpoint.write

    def out_of_room(self, file_prefix, options=None):
        path = write(self, file_prefix, options)
        if "model.ckpt-8" in file_prefix and ".input-" not in file_prefix:
            raise err
        return path

    monkeypatch.setattr(tf.train.Checkpoint, "write", out_of_room)
    with pytest.raises(faults.DiskFullError) as raised:
        policy.save(8, model, position)
    message = str(raised.value)
    assert message.startswith(f"{reason}") and str(tmp_path / "model.ckpt-8") in message and "\n" not in message
    # The free space is no reason for a quota or a file size limit ("it needs about 11.8 MiB free, 78054.3 MiB
    # free" read as a contradiction): the checkpoint's size only.
    assert f"writing checkpoint {tmp_path / 'model.ckpt-8'} of about 11.8 MiB;" in message
    assert "free" not in message
    assert f"{previous} is intact and a rerun resumes from it" in message
    assert sorted(p.name for p in tmp_path.glob("model.ckpt-8*")) == [] and not list(tmp_path.glob("*.tmp-*"))
    assert faults.is_disk_full(OSError(errno.ENOSPC, "x")) and not faults.is_disk_full(OSError(errno.EACCES, "x"))


def test_run_lock_holders(tmp_path, caplog):
    path = str(tmp_path / "run.lock")
    first = run_lock.RunLock(path)
    first.acquire()
    with pytest.raises(run_lock.RunLockedError, match=f"pid {os.getpid()}") as err:
        other = run_lock.RunLock(path)
        other.record = dict(other.record, pid=os.getpid() + 1)  # another live process of this host
        other.acquire()
    assert socket.gethostname() in str(err.value) and "\n" not in str(err.value)
    first.release()
    assert not os.path.exists(path)
    # A dead process of this host (a pid that is not running): taken over with a warning.
    dead = {"host": socket.gethostname(), "pid": 2**22 + 12345, "start_ticks": 1, "started": "2020-01-01T00:00:00"}
    open(path, "w").write(str(dead).replace("'", '"'))
    with caplog.at_level(std_logging.WARNING), run_lock.RunLock(path):
        assert f'"pid": {os.getpid()}' in open(path).read()
    assert any("no longer running" in r.getMessage() for r in caplog.records)
    # Another host's lock: refused unless --take_over_run_lock.
    open(path, "w").write(str(dict(dead, host="elsewhere")).replace("'", '"'))
    with pytest.raises(run_lock.RunLockedError, match="host elsewhere.*--take_over_run_lock"):
        run_lock.RunLock(path).acquire()
    with run_lock.RunLock(path, take_over=True):
        assert f'"pid": {os.getpid()}' in open(path).read()
    # A multi-worker job's chief takes the single run's lock: jobs of different sizes exclude each other.
    assert run_lock.lock_path("d", 2, 0) == run_lock.lock_path("d", 1, 0) == os.path.join("d", "run.lock")
    assert run_lock.lock_path("d", 2, 1) == os.path.join("d", "run.lock-worker-1")


def test_the_run_lock_gets_the_umask_mode_and_a_failed_write_leaves_no_lock(tmp_path, monkeypatch):
    path = str(tmp_path / "run.lock")
    old = os.umask(0o002)
    try:
        with run_lock.RunLock(path):
            assert os.stat(path).st_mode & 0o777 == 0o664
    finally:
        os.umask(old)

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fdopen", lambda fd, mode: os.close(fd) or full_disk())
    with pytest.raises(OSError, match="No space left"):
        run_lock.RunLock(path).acquire()
    assert not os.path.exists(path)  # the next run is not refused by an empty lock


def test_second_run_refused_and_kills_inside_saves_resume_exactly(toy_process, tmp_path, reference_dropout,
                                                                  same_weights):
    """One writer per folder; then SIGKILL at each point of a save (fault injection at the writer):
    the interrupted checkpoint is never resumed from unless it is complete."""
    out = tmp_path / "run"
    first = toy_process(out, "--hang_at_step=4", name="holder")
    first.wait_for("HANGING at step 4")
    files_before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    started = time.time()
    second = toy_process(out, name="second")
    assert second.wait() == 1
    lines = second.log().strip().splitlines()
    assert lines[-1].startswith("toy_driver.py: error: --output_dir is in use by another run"), second.log()
    assert f"pid {first.proc.pid}" in lines[-1] and socket.gethostname() in lines[-1]
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == files_before
    assert first.proc.poll() is None  # untouched, still running
    first.proc.kill()
    assert first.wait() == -9 and time.time() - started < 120

    # Killed between the data shards and the index of checkpoint 8: the lock of the dead holder is
    # taken over, and the rerun resumes from 4.
    died = toy_process(out, "--die_in_save=8:before_index", name="before_index")
    assert died.wait() == -9 and "DYING in save 8 at before_index" in died.log()
    assert "no longer running" in died.log() and f"Resumed from {out / 'model.ckpt-4'} at step 4" in died.log()
    assert (out / "model.ckpt-8.data-00000-of-00001").exists() and not (out / "model.ckpt-8.index").exists()
    # Killed after checkpoint 8's files, before the state file names it.
    died = toy_process(out, "--die_in_save=8:before_state_file", name="before_state_file")
    assert died.wait() == -9 and f"Resumed from {out / 'model.ckpt-4'} at step 4" in died.log()
    assert tf.train.latest_checkpoint(str(out)) == str(out / "model.ckpt-4")
    # Checkpoint 8 is complete: the rerun resumes from it and ends with the uninterrupted weights.
    rerun = toy_process(out, f"--dump={tmp_path / 'final.npz'}", name="rerun")
    assert rerun.wait() == 0, rerun.log()
    assert f"Resumed from {out / 'model.ckpt-8'} at step 8" in rerun.log()
    final = dict(np.load(tmp_path / "final.npz"))
    assert int(final.pop("__global_step__")) == 12
    same_weights(final, reference_dropout["weights"], atol=1e-6)
    assert not (out / "run.lock").exists()


def test_a_kill_in_the_final_saves_pruning_resumes_from_the_new_checkpoint(toy_process, tmp_path, reference_dropout,
                                                                          same_weights):
    """keep_checkpoint_max=1: the final save (step 12) replaces the state file, then deletes checkpoint 8; a SIGKILL
    after its first file went leaves the state file naming only checkpoint 12, which is intact, and what is left
    of 8 (its index last) is never resumed from: the rerun resumes from 12 and ends with the uninterrupted weights.
    (Passes on aa32bf0 too: it pins with a real process what test_checkpoint_policy.py shows in-process.)"""
    out = tmp_path / "run"
    died = toy_process(out, "--keep_checkpoint_max=1", "--die_in_save=12:pruning", name="pruning")
    assert died.wait() == -9 and "DYING in save 12 at pruning" in died.log()
    assert files.all_checkpoints(str(out)) == [str(out / "model.ckpt-12")]  # the state file: nothing deleted
    assert files.state_file_problem(str(out)) is None and files.checkpoint_damage(str(out / "model.ckpt-12")) is None
    assert (out / "model.ckpt-8.index").exists()  # the pruning was cut short
    rerun = toy_process(out, "--keep_checkpoint_max=1", f"--dump={tmp_path / 'final.npz'}", name="rerun")
    assert rerun.wait() == 0, rerun.log()
    assert f"Resumed from {out / 'model.ckpt-12'} at step 12" in rerun.log()
    final = dict(np.load(tmp_path / "final.npz"))
    assert int(final.pop("__global_step__")) == 12
    same_weights(final, reference_dropout["weights"], atol=1e-6)


def test_lost_worker(toy_process, tmp_path, reference_plain, same_weights, ports):
    """Two workers; worker 1 dies while publishing its input position of checkpoint 4 (a multi-worker
    save), then, rerun, is SIGKILLed after checkpoint 4: each time worker 0 exits non-zero in bounded
    time with one line; rerunning both ends with the uninterrupted two-worker run's weights."""
    out = tmp_path / "run"
    common = ["--dropout=0", "--num_train_steps=6", "--save_checkpoints_steps=2",
              "--distribution_strategy=multi_worker_mirrored"]

    def job(name, worker1_flags=(), dump=None, output_dir=out):
        addresses = [f"127.0.0.1:{ports()}", f"127.0.0.1:{ports()}"]
        extra = [f"--dump={dump}"] if dump else []
        return [toy_process(output_dir, *common, *extra, *(worker1_flags if index else ()),
                            env={"TF_CONFIG": make_tf_config(addresses, index)}, name=f"{name}{index}")
                for index in range(2)]

    def survivor_line(worker0):
        assert worker0.wait(timeout=120) == 1, worker0.log()
        line = worker0.log().strip().splitlines()[-1]
        assert line.startswith("toy_driver.py: error: lost /job:worker/task:1 of the multi-worker job"), line
        assert "Rerun every worker with the same flags" in line
        return line

    chief, worker = job("save", ["--die_in_save=4:input_state", "--task_index_for_faults=1"])
    assert worker.wait() == -9 and "DYING in save 4 at input_state" in worker.log()
    line = survivor_line(chief)
    assert "at step 4" in line and f"resume from {out / 'model.ckpt-2'}" in line
    # The chief removes its own part of the save that never completed, so the rerun resumes from 2.
    assert not list(out.glob("model.ckpt-4.*")) and (out / "model.ckpt-2.index").exists()

    chief, worker = job("kill", ["--hang_at_step=4"])
    worker.wait_for("HANGING at step 4")
    assert f"Resumed from {out / 'model.ckpt-2'} at step 2" in chief.log()
    worker.proc.kill()
    killed = time.time()
    assert worker.wait() == -9
    line = survivor_line(chief)
    print(f"worker 0 exited {time.time() - killed:.1f} s after worker 1 was killed")
    assert time.time() - killed < 60  # the bound the README gives
    assert "at step 4" in line and f"resume from {out / 'model.ckpt-4'}" in line

    chief, worker = job("rerun", dump=tmp_path / "final.npz")
    assert chief.wait(timeout=240) == 0 and worker.wait(timeout=240) == 0, chief.log() + worker.log()
    assert f"Resumed from {out / 'model.ckpt-4'} at step 4" in chief.log()
    final = dict(np.load(tmp_path / "final.npz"))
    assert int(final.pop("__global_step__")) == 6
    uninterrupted = job("uninterrupted", dump=tmp_path / "uninterrupted.npz", output_dir=tmp_path / "whole")
    assert all(w.wait(timeout=240) == 0 for w in uninterrupted), "".join(w.log() for w in uninterrupted)
    reference = dict(np.load(tmp_path / "uninterrupted.npz"))
    reference.pop("__global_step__")
    same_weights(final, reference, atol=1e-5)
    same_weights(final, reference_plain["weights"], atol=1e-5)  # and one-device semantics


def test_which_errors_mean_a_worker_is_gone():
    lost = tf.errors.UnavailableError(None, None, "Socket closed /job:worker/replica:0/task:1")
    assert faults.is_lost_peer(lost) and faults.lost_task(lost, 0) == "/job:worker/task:1"
    assert faults.is_lost_peer(tf.errors.InternalError(None, None, "Collective ops is aborted by: peer down"))
    assert not faults.is_lost_peer(tf.errors.InternalError(None, None, "Blas GEMM launch failed"))
    assert faults.lost_task(tf.errors.CancelledError(None, None, "cancelled"), 0) == "another worker"


def test_an_input_pipelines_error_is_given_in_its_own_words():
    """TensorFlow's prefix for an error inside a dataset's map ("Error in user-defined function passed to
    MapDataset:1 transformation with iterator: Iterator::Root::ParallelMapV2: ") stayed in the one line."""
    records = tf.data.Dataset.from_tensor_slices([b"not a record"]).map(
        lambda s: tf.io.parse_single_example(s, {"x": tf.io.FixedLenFeature([], tf.int64)}))
    with pytest.raises(tf.errors.InvalidArgumentError) as raised:
        list(records)
    assert "Error in user-defined function" in raised.value.message  # what TensorFlow says
    assert faults.op_error_reason(raised.value) == "Could not parse example input, value: 'not a record'"
