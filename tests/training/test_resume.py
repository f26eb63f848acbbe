"""A run preempted by SIGTERM, resumed, killed by SIGKILL and resumed again ends with the
uninterrupted run's weights.

The toy model has dropout (StatelessDropout, applied twice) and shuffled input, so an
exact match needs the optimizer slots, the step, the input position and the dropout
masks all to resume.
"""
import numpy as np
import tensorflow as tf


def test_preempted_then_killed_run_resumes_to_the_uninterrupted_weights(
        toy_process, tmp_path, reference_dropout, same_weights):
    out = tmp_path / "run"

    # 1. SIGTERM in the middle of a host call (no save boundary before step 100): the loop
    #    stops after the current step, writes a checkpoint and exits 143 (128 + SIGTERM, the shell's status
    #    of a process SIGTERM ended: not done, so a script stops and a scheduler restarts it).
    first = toy_process(out, "--slow_step_seconds=0.2", "--save_checkpoints_steps=100", name="preempted")
    first.wait_for("STEP 2")
    first.proc.terminate()
    assert first.wait() == 143, first.log()
    latest = tf.train.latest_checkpoint(str(out))
    assert latest is not None, first.log()
    stopped_at = int(latest.rsplit("-", 1)[1])
    assert 2 <= stopped_at < 8, first.log()
    assert f"Stopped by SIGTERM at step {stopped_at}; checkpoint {latest} written" in first.log()

    # 2. Rerun: resumes there, writes model.ckpt-8, then blocks inside step 9 and is SIGKILLed.
    second = toy_process(out, "--hang_at_step=8", name="killed")
    second.wait_for("HANGING at step 8")
    assert f"Resumed from {latest} at step {stopped_at}" in second.log()
    second.proc.kill()
    assert second.wait() == -9
    assert tf.train.latest_checkpoint(str(out)) == str(out / "model.ckpt-8")

    # 3. Rerun again: resumes from step 8 and finishes.
    third = toy_process(out, f"--dump={tmp_path / 'resumed.npz'}", name="rerun")
    assert third.wait() == 0, third.log()
    assert f"Resumed from {out / 'model.ckpt-8'} at step 8" in third.log()
    resumed = dict(np.load(tmp_path / "resumed.npz"))
    assert int(resumed.pop("__global_step__")) == 12
    same_weights(resumed, reference_dropout["weights"], atol=1e-6)


def test_sigterm_while_the_last_checkpoint_is_evaluated_still_stops_the_run(toy_process, tmp_path):
    """A SIGTERM that came while the last checkpoint's save hooks ran (its evaluation: minutes at real size)
    was logged as "stopping" and then forgotten: exit 0, and fine-tuning went on to predict and export until
    the scheduler's SIGKILL (review 49a #7). It ends the run with 143 once the hooks are done, saying training
    is complete; the rerun trains no further. A SIGTERM in an earlier checkpoint's hooks stops at the next step."""
    out = tmp_path / "run"
    last = toy_process(out, "--sigterm_in_save_hook=12", name="last")
    assert last.wait() == 143, last.log()
    assert "HOOK DONE after SIGTERM" in last.log() and "DONE step" not in last.log().replace("HOOK DONE", "")
    assert (f"Stopped by SIGTERM after the last step (12); checkpoint {out / 'model.ckpt-12'} written. Training "
            f"is done: rerun the same command for what follows it (it does not train again).") in last.log()
    rerun = toy_process(out, name="rerun")
    assert rerun.wait() == 0, rerun.log()
    assert "nothing to train" in rerun.log() and "DONE step 12" in rerun.log()

    earlier = toy_process(tmp_path / "earlier", "--sigterm_in_save_hook=4", name="earlier")
    assert earlier.wait() == 143, earlier.log()
    assert f"Stopped by SIGTERM at step 5; checkpoint {tmp_path / 'earlier' / 'model.ckpt-5'} written" in earlier.log()
