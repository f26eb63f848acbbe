"""A feature cache in a multi-worker job (MultiWorkerMirroredStrategy; local workers on 127.0.0.1 share the
filesystem): the chief builds it and holds its lock, the other workers read its records; another job is refused,
whichever worker of it asks."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest
import tensorflow as tf

from albert_tf.data.feature_cache import cached_records
from albert_tf.data.records import RecordSchema
from albert_tf.run_lock import JobMessages, output_dir_lock
from albert_tf.training.distribution import make_tf_config

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = RecordSchema("toy", 1, (("x", "int64", None),))
VALUES = {"a": (1, 2, 3), "b": (4, 5, 6), "chief stops first": (7,)}

# One worker of a job: the cache under the job's run (as a driver's: output_dir_lock with the worker's place).
# The chief's build is slow (the other worker asks meanwhile), and a chief that stopped lingers a little, as a
# driver's process does while it unwinds, so that the other worker hears why.
_WORKER = r"""
import json, os, sys, time
import tensorflow as tf
from albert_tf.data.feature_cache import cached_records
from albert_tf.data.records import RecordSchema
from albert_tf.errors import RunError
from albert_tf.run_lock import output_dir_lock
from albert_tf.training.distribution import JOB_MESSAGES, ending_together, worker_info

SCHEMA = RecordSchema("toy", 1, (("x", "int64", None),))
path, data, out = sys.argv[1:4]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
worker = worker_info(strategy)

def build(write):
    print("building", flush=True)
    time.sleep(3)
    for v in json.loads(sys.argv[4]):
        write(SCHEMA.serialize({"x": v}))
    return {}

if data == "chief stops first" and worker.is_chief:  # say a bad flag: it never reaches the cache
    sys.exit(4)
time.sleep(float(os.environ.get("BEFORE_RUN", "0")))
try:
    with ending_together(strategy), output_dir_lock(out, worker.num_workers, worker.worker_index,
                                                    messages=JOB_MESSAGES):
        time.sleep(float(os.environ.get("IN_RUN", "0")))
        print("reused" if cached_records(path, SCHEMA, {"data": data}, build).reused else "built", flush=True)
except RunError as e:
    print(e, flush=True)
    if worker.is_chief:
        time.sleep(5)
    sys.exit(3)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _job(path, data, out, pauses=((0, 0), (0, 0))):
    """Runs a two-worker job on ``path``; each worker's (return code, stdout lines). ``pauses``: each worker's
    seconds before its run and in it, before the cache."""
    addresses = [f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"]
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, path, data, out, json.dumps(VALUES[data])],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                                env={**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2",
                                     "TF_CONFIG": make_tf_config(addresses, index),
                                     "BEFORE_RUN": str(pauses[index][0]), "IN_RUN": str(pauses[index][1])})
               for index in range(2)]
    logs = [worker.communicate(timeout=300) for worker in workers]
    return [(worker.returncode, stdout.splitlines(), stderr) for worker, (stdout, stderr) in zip(workers, logs)]


def _read(path):
    return [int(SCHEMA.parse(r)["x"]) for r in tf.data.TFRecordDataset(path)]


def test_the_workers_of_one_job_read_the_chiefs_cache(tmp_path):
    """Each worker took a lock of its own (<cache>.lock-worker-1) and built the same file while the chief built
    it. Now worker 1 waits for the chief's build and reads it; the next job reuses it on both workers."""
    path = str(tmp_path / "shared" / "c.tf_record")
    (chief, chief_out, chief_err), (other, other_out, other_err) = _job(path, "a", str(tmp_path / "out"))
    assert chief == 0 and chief_out == ["building", "built"], chief_err[-3000:]
    assert other == 0 and other_out == ["reused"], other_err[-3000:]  # never "building"
    assert _read(path) == [1, 2, 3]
    assert sorted(os.listdir(tmp_path / "shared")) == ["c.tf_record", "c.tf_record.json"]  # no lock left
    again = _job(path, "a", str(tmp_path / "out"))
    assert [(code, out) for code, out, _ in again] == [(0, ["reused"]), (0, ["reused"])], again[1][2][-3000:]


def test_another_jobs_workers_are_refused_while_a_run_holds_the_cache(tmp_path):
    """A run holds the cache (its records are read until it ends): a two-worker job with other settings was
    refused on its chief, but its worker 1 (its own lock name) built its records over the held ones. Now both
    of its workers stop with one line naming the cache, and the run's records stay."""
    path = str(tmp_path / "shared" / "c.tf_record")
    with output_dir_lock(str(tmp_path / "run")):
        cached_records(path, SCHEMA, {"data": "a"}, lambda write: [write(SCHEMA.serialize({"x": v}))
                                                                    for v in VALUES["a"]] and {})
        job = _job(path, "b", str(tmp_path / "out"))
        assert _read(path) == [1, 2, 3]
    for index, (code, out, err) in enumerate(job):
        assert code == 3 and len(out) == 1, (index, out, err[-3000:])
        assert f"the feature cache {path} is in use by another run" in out[0], (index, out)
        assert out[0].startswith("the multi-worker job's chief stopped: ") == (index == 1), (index, out)
        assert f"pid {os.getpid()}," in out[0], (index, out)
    assert sorted(os.listdir(tmp_path / "shared")) == ["c.tf_record", "c.tf_record.json"]
    assert not list((tmp_path / "out").rglob("*"))  # the refused job wrote nothing there


@pytest.mark.parametrize("pauses", [((0, 2), (1, 3)), ((1, 0), (0, 0))], ids=["chief first", "worker 1 first"])
def test_a_refused_job_leaves_no_output_dir_whichever_worker_ends_last(tmp_path, pauses):
    """The chief made --output_dir and was refused (another run holds the cache) while worker 1's lock was there:
    the chief could not remove the folder, and worker 1, which found it made and asked about the cache later, did
    not either (each removed only a folder it had made). Now the last worker to release its lock removes the folder
    the job made, whichever worker comes first (worker 1 makes it only after the chief's word); and the parent
    folders the chief made for it too (worker 1 heard only of --output_dir: with the chief first, new/deeper
    stayed)."""
    path = str(tmp_path / "shared" / "c.tf_record")
    out = tmp_path / "new" / "deeper" / "out"
    with output_dir_lock(str(tmp_path / "run")):
        cached_records(path, SCHEMA, {"data": "a"}, lambda write: [write(SCHEMA.serialize({"x": v}))
                                                                    for v in VALUES["a"]] and {})
        # chief first: it makes the folder, worker 1 takes its lock 1 s later, the chief is refused at 2 s and
        # releases its lock first, worker 1 asks about the cache at 4 s
        job = _job(path, "b", str(out), pauses=pauses)
    for index, (code, lines, err) in enumerate(job):
        assert code == 3 and len(lines) == 1 and "is in use by another run" in lines[0], (index, lines, err[-3000:])
    assert not (tmp_path / "new").exists()


def test_a_job_keeps_an_output_dir_it_did_not_make(tmp_path):
    """The rule above removes only a folder the job made: an empty --output_dir of the user's stays."""
    path = str(tmp_path / "shared" / "c.tf_record")
    out = tmp_path / "out"
    out.mkdir()
    with output_dir_lock(str(tmp_path / "run")):
        cached_records(path, SCHEMA, {"data": "a"}, lambda write: [write(SCHEMA.serialize({"x": v}))
                                                                    for v in VALUES["a"]] and {})
        job = _job(path, "b", str(out), pauses=((0, 2), (1, 3)))
    assert [code for code, _, _ in job] == [3, 3], [err[-3000:] for _, _, err in job]
    assert out.is_dir() and not list(out.iterdir())


def test_a_worker_whose_chief_stops_before_the_cache_does_not_wait_for_it(tmp_path):
    """Worker 1 waits for the chief's word on the cache: a chief that stops first (its process gone) ends the
    wait with one line instead of a hang, and worker 1 builds nothing."""
    path = str(tmp_path / "shared" / "c.tf_record")
    (chief, _, _), (other, other_out, other_err) = _job(path, "chief stops first", str(tmp_path / "out"))
    assert chief == 4
    assert other == 3 and len(other_out) == 1, (other_out, other_err[-3000:])
    assert other_out[0].startswith("the chief (/job:worker/task:0) of the multi-worker job stopped before the "
                                   f"feature cache {path} was ready (its process at 127.0.0.1:"), other_out
    assert other_out[0].endswith(" is gone); its log says why"), other_out  # (not gRPC's details)
    assert not (tmp_path / "shared" / "c.tf_record").exists()


def test_another_worker_builds_its_own_copy_when_the_chiefs_is_not_on_its_filesystem(tmp_path):
    """Workers on other machines, each with its own disk at the cache's path (no shared filesystem): the chief
    says its cache is ready, but this worker sees none, so it builds its own under its own lock, as a run alone.
    Where the chief's records are (a shared filesystem) it reads them, building and locking nothing."""
    said = []
    messages = JobMessages(tell=None, chiefs_word=lambda about: said.append(about) or "ready")  # the chief's word
    path, calls = str(tmp_path / "c.tf_record"), []

    def build(write):
        calls.append(1)
        for v in VALUES["a"]:
            write(SCHEMA.serialize({"x": v}))
        return {}

    with output_dir_lock(str(tmp_path / "out"), num_workers=2, worker_index=1, messages=messages):
        own = cached_records(path, SCHEMA, {"data": "a"}, build)
        assert not own.reused and calls == [1] and _read(path) == [1, 2, 3]
        assert os.path.exists(path + ".lock")  # held until this worker's run ends
    # (the chief's word on whether it made --output_dir, then on the cache)
    assert said[1:] == [f"the feature cache {path}"] and not os.path.exists(path + ".lock")
    with output_dir_lock(str(tmp_path / "out"), num_workers=2, worker_index=1, messages=messages):
        assert cached_records(path, SCHEMA, {"data": "a"}, build).reused and calls == [1]
        assert not os.path.exists(path + ".lock")  # the chief's lock guards them
