"""A worker of a two-worker job lost at each point of a checkpoint save (fault injection: the worker SIGKILLs
itself there): the survivor ends in bounded time with one line naming the lost task, the step and the
checkpoint a rerun resumes from; the next run of both workers does resume from it, and after the last fault the
rerun ends with the uninterrupted run's weights (one-device semantics: an uninterrupted one-device run)."""
import os
import re
import time

import numpy as np


from albert_tf.training.distribution import make_tf_config

# (the worker that dies, where in the save); each run dies at its first save, the next run resumes.  None at
# the last step: there the survivor's work is done and it ends normally.
FAULTS = [(1, "input_data"), (0, "before_index"), (0, "input_state"), (1, "worker_model"), (0, "before_state_file"),
          (1, "after_barrier")]
LINE = re.compile(r"toy_driver\.py: error: lost /job:worker/task:(\d) of the multi-worker job at step (\d+) "
                  r"\(\w+\); this worker stops\. Rerun every worker with the same flags: they resume from (.+)$")


def test_a_worker_lost_at_each_point_of_a_save(toy_process, train_toy, tmp_path, same_weights, toy, ports):
    out = tmp_path / "run"
    common = ["--dropout=0", "--num_train_steps=8", "--save_checkpoints_steps=2",
              "--distribution_strategy=multi_worker_mirrored"]

    def job(name, flags_of=lambda index: ()):
        addresses = [f"127.0.0.1:{ports()}", f"127.0.0.1:{ports()}"]
        return [toy_process(out, *common, *flags_of(index), env={"TF_CONFIG": make_tf_config(addresses, index)},
                            name=f"{name}-{index}") for index in range(2)]

    resume_step = 0
    timings = []
    for lost, point in FAULTS:
        step = resume_step + 2
        workers = job(point, lambda i: [f"--die_in_save={step}:{point}", f"--task_index_for_faults={i}"]
                      if i == lost else [])
        dying, survivor = workers[lost], workers[1 - lost]
        assert dying.wait() == -9 and f"DYING in save {step} at {point}" in dying.log(), dying.log()
        died = time.time()
        assert survivor.wait(timeout=120) == 1, survivor.log()
        timings.append(time.time() - died)
        if resume_step:
            assert f"Resumed from {out / f'model.ckpt-{resume_step}'} at step {resume_step}" in survivor.log()
        else:
            assert "Resumed from" not in survivor.log()
        line = survivor.log().strip().splitlines()[-1]
        match = LINE.match(line)
        assert match, (point, line)
        assert int(match.group(1)) == lost and int(match.group(2)) == step, (point, line)
        resume_line = match.group(3)
        named = {str(out / f"model.ckpt-{s}"): s for s in (step, resume_step) if s} | {"step 0 (no checkpoint yet)": 0}
        assert resume_line in named, line
        resume_step = named[resume_line]
    print("survivors exited", ", ".join(f"{t:.1f}" for t in timings), "s after the fault")
    assert max(timings) < 60  # the bound the README gives
    chief, worker = job("rerun", lambda i: [f"--dump={tmp_path / 'final.npz'}"])
    assert chief.wait(timeout=240) == 0 and worker.wait(timeout=240) == 0, chief.log() + worker.log()
    assert f"Resumed from {out / f'model.ckpt-{resume_step}'} at step {resume_step}" in chief.log()
    final = dict(np.load(tmp_path / "final.npz"))
    assert int(final.pop("__global_step__")) == 8
    reference, _, _ = train_toy(tmp_path / "uninterrupted", dropout=0.0, num_train_steps=8, save_checkpoints_steps=2)
    same_weights(final, toy.weights_by_name(reference.model), atol=1e-5)


def test_workers_pruning_the_same_input_positions_at_once(tmp_path, monkeypatch):
    """After a save the chief prunes old checkpoints (their ``.input-1.*`` files too) while worker 1 prunes its
    own input positions: whichever removes a file second must not fail (it raised ``...input-1.index; No such
    file or directory`` and ended the job)."""
    from albert_tf.training.checkpoint_policy import CheckpointPolicy
    from albert_tf.training.distribution import WorkerInfo
    from albert_tf.weights import files

    for step in (2, 4):
        for suffix in ("index", "data-00000-of-00001", "input-1.index", "input-1.data-00000-of-00001"):
            (tmp_path / f"model.ckpt-{step}.{suffix}").write_bytes(b"x")
    glob = files.tf.io.gfile.glob

    def glob_then_the_other_worker_removes(pattern):
        found = glob(pattern)
        for f in found:
            if "model.ckpt-2." in f and os.path.exists(f):
                os.remove(f)
        return found

    monkeypatch.setattr(files.tf.io.gfile, "glob", glob_then_the_other_worker_removes)
    CheckpointPolicy(str(tmp_path), 2, 1, WorkerInfo(2, 1, False))._prune_own_input_states()
    files.delete_checkpoint(str(tmp_path / "model.ckpt-2"))
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model.ckpt-4.data-00000-of-00001", "model.ckpt-4.index", "model.ckpt-4.input-1.data-00000-of-00001",
        "model.ckpt-4.input-1.index"]
