"""The run lock when two runs race for a dead holder's lock: exactly one proceeds, the other gets the
one-line refusal naming the winner (never both, as when each removed the lock it judged dead)."""
import json
import os
import socket
import threading

import pytest

from albert_tf import run_lock

DEAD = {"host": socket.gethostname(), "pid": 2**22 + 12345, "start_ticks": 1, "started": "2020-01-01T00:00:00"}


def _race(path, monkeypatch, pause_in_takeover=False):
    """Two runs (threads with their own pids) that both read the dead holder's lock before either acts
    (a barrier at that read: the race point); with ``pause_in_takeover``, the first to create the
    takeover file also waits there until the other has looked at the lock again."""
    read_text = run_lock.read_text
    both_read = threading.Barrier(2, timeout=30)
    other_looked = threading.Event()
    first_reads = set()

    def racing_read(p):
        text = read_text(p)
        me = threading.current_thread().name
        if p == path and me not in first_reads:
            first_reads.add(me)
            both_read.wait()
        elif p == path:
            other_looked.set()
        return text

    create = run_lock.RunLock._create

    def pausing_create(self, p=None):
        made = create(self, p)
        if pause_in_takeover and made and p and p.endswith(run_lock.TAKEOVER_SUFFIX):
            other_looked.wait(timeout=10)
        return made

    monkeypatch.setattr(run_lock, "read_text", racing_read)
    monkeypatch.setattr(run_lock.RunLock, "_create", pausing_create)
    outcomes = {}

    def run(name, pid):
        lock = run_lock.RunLock(path)
        lock.record = dict(lock.record, pid=pid, start_ticks=run_lock.process_start_ticks(pid))
        try:
            lock.acquire()
            outcomes[name] = ("held", lock)
        except run_lock.RunLockedError as e:
            outcomes[name] = ("refused", str(e))

    # The two pids must be live processes of this host (ours and our parent's) for each to see the other alive.
    threads = [threading.Thread(target=run, args=(name, pid), name=name)
               for name, pid in (("a", os.getpid()), ("b", os.getppid()))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return outcomes


@pytest.mark.parametrize("pause_in_takeover", [False, True], ids=["race-at-read", "pause-inside-takeover"])
def test_two_runs_racing_for_a_dead_holder_s_lock(tmp_path, monkeypatch, pause_in_takeover):
    path = str(tmp_path / "run.lock")
    with open(path, "w") as f:
        f.write(json.dumps(DEAD) + "\n")
    outcomes = _race(path, monkeypatch, pause_in_takeover)
    held = [name for name, (kind, _) in outcomes.items() if kind == "held"]
    refused = [value for kind, value in outcomes.values() if kind == "refused"]
    assert len(held) == 1 and len(refused) == 1, outcomes
    winner = outcomes[held[0]][1]
    assert json.loads(open(path).read()) == winner.record  # the winner's lock, not removed by the loser
    assert refused[0].startswith("--output_dir is in use by another run") and "\n" not in refused[0]
    assert f"pid {winner.record['pid']}" in refused[0] and f"lock {path}" in refused[0]
    assert sorted(os.listdir(tmp_path)) == ["run.lock"]  # no takeover file left behind
    monkeypatch.undo()
    winner.release()
    assert not os.path.exists(path)


def test_a_takeover_file_left_by_a_killed_run_is_named(tmp_path, monkeypatch):
    """A run killed inside its takeover leaves ``run.lock.takeover``: the next run does not wait forever
    but says which file to delete."""
    path = str(tmp_path / "run.lock")
    with open(path, "w") as f:
        f.write(json.dumps(DEAD) + "\n")
    open(path + run_lock.TAKEOVER_SUFFIX, "w").write(json.dumps(DEAD))
    monkeypatch.setattr(run_lock, "_PAUSE_SECONDS", 0.0)
    with pytest.raises(run_lock.RunLockedError) as err:
        run_lock.RunLock(path).acquire()
    assert str(err.value) == (f"could not take the run lock {path}: another run keeps taking it over (if no run "
                              f"is starting, delete {path}{run_lock.TAKEOVER_SUFFIX})")


def test_a_failed_run_removes_the_parent_folders_it_made_for_its_output_dir(tmp_path):
    """A refused run into ``runs/new/MRPC`` left ``runs/new`` (only ``MRPC`` was removed again); folders that
    were there, or that hold anything, stay."""
    existing = tmp_path / "runs"
    existing.mkdir()
    with pytest.raises(ValueError):
        with run_lock.output_dir_lock(str(existing / "new" / "deeper" / "MRPC")):
            raise ValueError("the data file is missing")
    assert list(existing.iterdir()) == []
    # A parent holding something another process put there (here: before the run ended) stays.
    with pytest.raises(ValueError):
        with run_lock.output_dir_lock(str(existing / "new" / "MRPC")):
            (existing / "new" / "notes.txt").write_text("mine\n")
            raise ValueError("the data file is missing")
    assert sorted(p.name for p in (existing / "new").iterdir()) == ["notes.txt"]


def test_output_dir_that_cannot_be_made_leaves_no_parent_it_made(tmp_path):
    """Making ``runs/new/<a name too long>`` fails after ``runs/new`` was made (as an inode quota would): the
    run was refused, and ``runs/new`` stayed, empty (the folders were removed only when the lock was taken)."""
    import errno

    existing = tmp_path / "runs"
    existing.mkdir()
    with pytest.raises(OSError) as err:
        with run_lock.output_dir_lock(str(existing / "new" / "deeper" / ("x" * 300))):
            pass
    assert err.value.errno == errno.ENAMETOOLONG
    assert list(existing.iterdir()) == []
