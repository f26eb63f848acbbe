"""Bad input and flags: clear errors, non-zero exit, nothing half-written."""
import os
import subprocess
import sys

import pytest

from albert_tf.pretraining_data.pipeline import PretrainingDataError, create_pretraining_data

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run_cli(*args, env=None):
    return subprocess.run(
        [sys.executable, os.path.join(REPO, "create_pretraining_data.py"), *args],
        capture_output=True, text=True, timeout=300, cwd=REPO, env=env,
    )


# Loaded at start-up by every Python process that has its folder on PYTHONPATH, the spawned workers too.
_NO_TENSORFLOW = """
import sys

class _NoTensorFlow:
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow" or name.startswith("tensorflow."):
            raise ImportError(f"tensorflow imported by {sys.argv}")

sys.meta_path.insert(0, _NoTensorFlow())
"""


def _leftovers(folder):
    return sorted(f for f in os.listdir(folder) if f.startswith("out"))


def test_invalid_utf8_names_file_and_line(tmp_path, spm_model, make_config):
    corpus = tmp_path / "bad.txt"
    corpus.write_bytes(b"A fine first sentence.\nAnother one here.\nBroken \xff\xfe bytes.\n\nNext doc.\nMore.\n")
    out = tmp_path / "out.tfrecord"
    with pytest.raises(PretrainingDataError, match=r"bad\.txt:3: line is not valid UTF-8.*--skip_invalid_lines"):
        create_pretraining_data(make_config(corpus, spm_model, [out]))
    assert _leftovers(tmp_path) == []  # no partial output, no temp file, no summary

    summary = create_pretraining_data(make_config(corpus, spm_model, [out], skip_invalid_lines=True))
    assert summary["invalid_lines_skipped"] == 1 and summary["instances"] > 0
    assert _leftovers(tmp_path) == ["out.tfrecord", "out.tfrecord.summary.json"]


def test_invalid_utf8_with_workers_leaves_nothing(tmp_path, spm_model, make_config, botchan_corpus):
    corpus = tmp_path / "mixed.txt"
    corpus.write_bytes(botchan_corpus.read_bytes() + b"tail \xc3\x28 line\n")
    out = tmp_path / "out.tfrecord"
    with pytest.raises(PretrainingDataError, match=r"mixed\.txt:\d+: line is not valid UTF-8"):
        create_pretraining_data(make_config(corpus, spm_model, [out], num_workers=2))
    assert _leftovers(tmp_path) == []


def test_empty_and_blank_inputs(tmp_path, spm_model, make_config):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(PretrainingDataError, match=r"empty\.txt is empty"):
        create_pretraining_data(make_config(empty, spm_model, [tmp_path / "out.tfrecord"]))
    blank = tmp_path / "blank.txt"
    blank.write_text("\n   \n\t\n", encoding="utf-8")
    with pytest.raises(PretrainingDataError, match="no text found"):
        create_pretraining_data(make_config(blank, spm_model, [tmp_path / "out.tfrecord"]))
    assert _leftovers(tmp_path) == []


def test_bad_model(tmp_path, make_config, botchan_corpus, shared):
    out = tmp_path / "out.tfrecord"
    with pytest.raises(PretrainingDataError, match=r"--spm_model_file: .*lacks the piece"):
        create_pretraining_data(
            make_config(botchan_corpus, str(shared("data", "spm", "sentencepiece_test_model.model")), [out])
        )
    with pytest.raises(PretrainingDataError, match=r"--spm_model_file: .*not found"):
        create_pretraining_data(make_config(botchan_corpus, str(tmp_path / "none.model"), [out]))
    assert _leftovers(tmp_path) == []


def test_cli_errors_exit_nonzero(tmp_path, spm_model):
    result = _run_cli(f"--input_file={tmp_path}/missing*.txt", f"--output_file={tmp_path}/out.tfrecord",
                      f"--spm_model_file={spm_model}")
    assert result.returncode != 0
    assert "no input file found" in result.stderr and "missing*.txt" in result.stderr

    corpus = tmp_path / "c.txt"
    corpus.write_text("One sentence.\nTwo sentences.\n", encoding="utf-8")
    result = _run_cli(f"--input_file={corpus}", f"--output_file={tmp_path}/out.tfrecord",
                      f"--spm_model_file={spm_model}", "--max_seq_length=4")
    assert result.returncode != 0
    assert "--max_seq_length=4 is too small" in result.stderr
    assert _leftovers(tmp_path) == []

    result = _run_cli(f"--input_file={corpus}", f"--output_file={tmp_path}/out.tfrecord",
                      f"--spm_model_file={spm_model}", "--input_file_mode=w")
    assert result.returncode != 0 and "--input_file_mode='w': expected \"r\" or \"rb\"" in result.stderr
    assert _leftovers(tmp_path) == []


def test_cli_end_to_end_with_shards_without_tensorflow(tmp_path, shared, spm_model):
    # The original's sample text, its flags (vocab_file not needed with spm), two shards, two workers;
    # no process (main or worker) may import TensorFlow.
    blocker = tmp_path / "no_tensorflow"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(_NO_TENSORFLOW, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(blocker), REPO,
                                                                    os.environ.get("PYTHONPATH")])))
    probe = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True, text=True, env=env)
    assert "tensorflow imported by" in probe.stderr  # the blocker works

    sample = shared("data", "corpus", "sample_text.txt")
    prefix = tmp_path / "out.tfrecord"
    result = _run_cli(f"--input_file={sample}", f"--output_file={prefix}", f"--spm_model_file={spm_model}",
                      "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=2",
                      "--num_output_shards=2", "--num_workers=2", "--random_seed=7",
                      "--input_file_mode=rb", env=env)  # the original's other mode: accepted, UTF-8 either way
    assert result.returncode == 0, result.stderr[-2000:]
    assert sorted(f for f in os.listdir(tmp_path) if f not in ("no_tensorflow", "single")) == [
        "out.tfrecord-00000-of-00002", "out.tfrecord-00001-of-00002", "out.tfrecord.summary.json"
    ]
    assert "instances" in result.stderr and "ETA" in result.stderr  # progress and final line

    # The CLI forks its workers (no TensorFlow loaded); one in-process worker writes the same bytes.
    single = tmp_path / "single" / "out.tfrecord"
    result = _run_cli(f"--input_file={sample}", f"--output_file={single}", f"--spm_model_file={spm_model}",
                      "--max_seq_length=32", "--max_predictions_per_seq=5", "--dupe_factor=2",
                      "--num_output_shards=2", "--num_workers=1", "--random_seed=7", env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    for shard in ("00000-of-00002", "00001-of-00002"):
        assert (tmp_path / f"out.tfrecord-{shard}").read_bytes() == (tmp_path / "single" / f"out.tfrecord-{shard}"
                                                                      ).read_bytes()


@pytest.mark.parametrize("err,problem", [
    (OSError(28, "No space left on device"), "the disk is full"),  # what a full disk gives: no file name
    (OSError(27, "File too large"), "the file is larger than the file system allows"),  # FAT32, ulimit -f
    (OSError(30, "Read-only file system", "OUT"), "the file system is read-only"),
])
def test_unwritable_output_is_one_line_naming_the_path(tmp_path, spm_model, make_config, botchan_corpus,
                                                       monkeypatch, err, problem):
    """Fault injection where the tool writes: the error names the path and what happened, and
    nothing is left behind."""
    import albert_tf.pretraining_data.pipeline as pipeline

    out = tmp_path / "out.tfrecord"
    if err.filename == "OUT":  # a read-only folder refuses the first file made in it, the work folder
        err = OSError(err.errno, err.strerror, str(tmp_path / "out.tfrecord.tmp-x"))

        def refuse(*args, **kwargs):
            raise err
        monkeypatch.setattr(pipeline.tempfile, "mkdtemp", refuse)
    else:
        def full(*args, **kwargs):
            raise err
        monkeypatch.setattr(pipeline, "_append_file", full)  # where the output's disk fills
    with pytest.raises(PretrainingDataError) as caught:
        create_pretraining_data(make_config(botchan_corpus, spm_model, [out]))
    where = err.filename or str(out)
    assert str(caught.value) == f"cannot write {where}: {problem}"
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("mask", [0o022, 0o027])
def test_outputs_and_summary_get_the_umask_mode(tmp_path, spm_model, make_config, botchan_corpus, mask):
    out = tmp_path / "out.tfrecord"
    old = os.umask(mask)
    try:
        summary = create_pretraining_data(make_config(botchan_corpus, spm_model, [out]))
    finally:
        os.umask(old)
    for path in (out, summary["summary_file"]):
        assert os.stat(path).st_mode & 0o777 == 0o666 & ~mask, path


def _small_corpus(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The first sentence is here.\nAnd then a second one.\n\nA new document starts.\n"
                      "It has two lines.\n", encoding="utf-8")
    return corpus


def test_outputs_it_did_not_write_are_refused_before_any_work(tmp_path, spm_model, make_config, monkeypatch):
    """The original replaced whatever was at --output_file. Its own input, the tokenizer's file, a
    folder, a file it did not write (the original's records, a summary not ours) and (local runner) a
    remote path are refused in one line before any work, and left as they were; our own outputs are
    replaced by a rerun."""
    import shutil

    from albert_tf.pretraining_data import pipeline

    corpus = _small_corpus(tmp_path)
    spm_copy = tmp_path / "spm.model"
    shutil.copy(spm_model, spm_copy)
    folder = tmp_path / "records"
    folder.mkdir()
    theirs = tmp_path / "theirs.tfrecord"
    theirs.write_bytes(b"the original's records")
    foreign_summary = tmp_path / "mine.tfrecord.summary.json"
    foreign_summary.write_text("my notes")
    cases = {
        str(corpus): "would replace --input_file=",
        str(spm_copy): "would replace --spm_model_file=",
        str(folder): "is a folder",
        str(theirs): "exists and create_pretraining_data.py did not write it",
        str(tmp_path / "mine.tfrecord"): "is not a summary create_pretraining_data.py wrote",
        "gs://bucket/train.tfrecord": "the local runner writes local files; use --runner=beam",
    }
    before = {p: p.read_bytes() for p in (corpus, spm_copy, theirs, foreign_summary)}
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(pipeline, "_tokenize_corpus", lambda *a: pytest.fail("work started"))
    for output, message in cases.items():
        with pytest.raises(PretrainingDataError, match=message):
            create_pretraining_data(make_config(corpus, spm_copy, [output]))
    # One file by two names: both outputs (or an output and the summary) would be written to it.
    a = str(tmp_path / "a.tfrecord")
    for outputs, message in (([a, str(tmp_path / "." / "a.tfrecord")], "are the same file"),
                             ([a, a + ".summary.json"], "is where the summary is written")):
        with pytest.raises(PretrainingDataError, match=message):
            create_pretraining_data(make_config(corpus, spm_copy, outputs))
    assert {p: p.read_bytes() for p in before} == before
    assert list(folder.iterdir()) == [] and not (tmp_path / "gs:").exists()
    assert not list(tmp_path.glob("*.lock")) and not list(tmp_path.glob("*.tmp-*"))
    monkeypatch.undo()

    out = tmp_path / "ours.tfrecord"
    first = create_pretraining_data(make_config(corpus, spm_model, [out], random_seed=1))
    second = create_pretraining_data(make_config(corpus, spm_model, [out], random_seed=2))
    assert first["instances"] > 0 and second["settings"]["random_seed"] == 2
    assert sorted(p.name for p in tmp_path.glob("ours.*")) == ["ours.tfrecord", "ours.tfrecord.summary.json"]


def test_an_output_is_ours_by_where_it_is_not_by_its_name(tmp_path, spm_model, make_config, monkeypatch):
    """A summary listing out/dev.tfrecord does not make a user's data/dev.tfrecord ours: it was replaced
    when outputs were matched by name. Our own outputs are still ours when the rerun starts elsewhere
    and names them by other relative paths."""
    corpus = _small_corpus(tmp_path)
    (tmp_path / "out").mkdir()
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    create_pretraining_data(make_config(corpus, spm_model, ["out/train.tfrecord", "out/dev.tfrecord"]))
    users = tmp_path / "data" / "dev.tfrecord"
    users.write_bytes(b"the user's own dev records")
    with pytest.raises(PretrainingDataError, match=f"{users} exists and create_pretraining_data.py did not"):
        create_pretraining_data(make_config(corpus, spm_model, ["out/train.tfrecord", str(users)]))
    assert users.read_bytes() == b"the user's own dev records"

    monkeypatch.chdir(tmp_path / "out")
    rerun = create_pretraining_data(make_config(corpus, spm_model, ["train.tfrecord", "../out/dev.tfrecord"],
                                                random_seed=7))
    assert rerun["settings"]["random_seed"] == 7
    assert rerun["output_paths_from_summary"] == ["train.tfrecord", "dev.tfrecord"]


def test_a_second_run_on_the_same_output_is_refused_and_a_killed_runs_leftovers_are_removed(tmp_path, spm_model):
    """While another process holds <output>.lock, a run on that output stops in one line and writes
    nothing. What a killed run left for the output (its part, its work folder) is removed by the next
    run; names of other runs and users stay."""
    from albert_tf.pretraining_data.config import PipelineConfig
    from albert_tf.pretraining_data.outputs import part_name, work_dir_prefix

    corpus = _small_corpus(tmp_path)
    out = tmp_path / "out.tfrecord"
    holder = subprocess.Popen([sys.executable, "-c", "import os, sys, time; "
                               f"fd = os.open({str(out) + '.lock'!r}, os.O_CREAT | os.O_EXCL | os.O_WRONLY); "
                               "os.write(fd, ('{\"host\": \"' + os.uname().nodename + '\", \"pid\": ' + "
                               "str(os.getpid()) + '}').encode()); os.close(fd); print('held', flush=True); "
                               "time.sleep(120)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        result = _run_cli(f"--input_file={corpus}", f"--output_file={out}", f"--spm_model_file={spm_model}")
        assert result.returncode != 0, result.stderr
        assert f"--output_file={out} is in use by another run" in result.stderr, result.stderr
        assert f"delete {out}.lock" in result.stderr
        assert _leftovers(tmp_path) == ["out.tfrecord.lock"]
    finally:
        holder.kill()
        holder.wait()
    os.remove(f"{out}.lock")

    config = PipelineConfig(input_files=(str(corpus),), output_files=(str(out),), spm_model_file=str(spm_model))
    part = part_name(str(out), "0" * 32)
    open(part, "wb").close()
    work = tmp_path / (work_dir_prefix(config) + "k3_9zq1a")
    work.mkdir()
    (work / "documents.bin").write_bytes(b"x")
    others = [tmp_path / "out.tfrecord.tmp-draft", tmp_path / "out.tfrecord.tmp-abcd1234"]
    for other in others:
        other.write_text("not a leftover of this output")
    result = _run_cli(f"--input_file={corpus}", f"--output_file={out}", f"--spm_model_file={spm_model}")
    assert result.returncode == 0, result.stderr
    assert f"removing {part}" in result.stderr and f"removing {work}" in result.stderr
    assert _leftovers(tmp_path) == ["out.tfrecord", "out.tfrecord.summary.json", "out.tfrecord.tmp-abcd1234",
                                    "out.tfrecord.tmp-draft"]


def test_workers_exit_when_the_main_process_is_killed(tmp_path, spm_model, botchan_corpus):
    """SIGKILL (the out-of-memory killer) of the main process runs no cleanup: its pool's workers waited
    forever, holding the token store's disk space and the main process's output pipe."""
    import signal
    import time

    out = tmp_path / "out.tfrecord"
    main = subprocess.Popen([sys.executable, os.path.join(REPO, "create_pretraining_data.py"),
                             f"--input_file={botchan_corpus}", f"--output_file={out}", f"--spm_model_file={spm_model}",
                             "--num_workers=2", "--dupe_factor=40", "--max_seq_length=128"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def children() -> list[int]:
        listed = subprocess.run(["pgrep", "-P", str(main.pid)], capture_output=True, text=True).stdout
        return [int(pid) for pid in listed.split()]

    deadline = time.time() + 120
    workers: list[int] = []
    while len(workers) < 2 and time.time() < deadline and main.poll() is None:
        time.sleep(0.2)
        workers = children()
    assert len(workers) >= 2, "the pool's workers never started"
    main.send_signal(signal.SIGKILL)
    main.wait()
    deadline = time.time() + 20
    alive = workers
    while alive and time.time() < deadline:
        time.sleep(0.2)
        alive = [pid for pid in workers if os.path.exists(f"/proc/{pid}") and
                 open(f"/proc/{pid}/stat").read().split()[2] != "Z"]
    assert not alive, f"workers {alive} outlived their main process"
    main.communicate(timeout=20)  # nothing holds its pipes any more


def test_a_glob_over_the_output_folder_does_not_read_what_this_tool_wrote(tmp_path):
    """--input_file='data/*' --output_file=data/out.tfrecord: a rerun after a kill read the stale lock
    and the parts as text (or failed when the part it had taken as input was removed)."""
    from albert_tf.pretraining_data.config import resolve_input_files

    names = ["corpus.txt", "notes.lock", "out.tfrecord", "out.tfrecord.lock", "out.tfrecord.summary.json",
             f"out.tfrecord.tmp-{'0' * 32}.part", "out.tfrecord.tmp-draft"]
    for name in names:
        (tmp_path / name).write_text("a line\n")
    out = str(tmp_path / "out.tfrecord")
    assert resolve_input_files(str(tmp_path / "*"), [out]) == tuple(
        str(tmp_path / n) for n in ("corpus.txt", "notes.lock", "out.tfrecord.tmp-draft"))
    assert resolve_input_files(f"{tmp_path / 'corpus.txt'},{out}", [out]) == (
        str(tmp_path / "corpus.txt"), out)  # named, not globbed: check_outputs refuses it in one line


def test_a_glob_that_matches_a_link_to_nothing_is_an_error_not_a_skipped_shard(tmp_path):
    """--input_file='corpus/*.txt' with one shard a dangling link: the shard was dropped in silence (the
    run made data from the others); the original's reader failed on it. Folders a glob matches are still
    passed over."""
    from albert_tf.pretraining_data.config import resolve_input_files

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("A first sentence.\nA second one.\n", encoding="utf-8")
    (corpus / "b.txt").symlink_to(tmp_path / "moved_away.txt")
    (corpus / "sub.txt").mkdir()
    with pytest.raises(PretrainingDataError, match=r"no input file found at '.*corpus/b\.txt' \(a link to "
                                                   r"'.*moved_away\.txt', which does not exist\)"):
        resolve_input_files(str(corpus / "*.txt"))
    (tmp_path / "moved_away.txt").write_text("Back again.\nAnd here.\n", encoding="utf-8")
    assert resolve_input_files(str(corpus / "*.txt")) == (str(corpus / "a.txt"), str(corpus / "b.txt"))


def test_a_rerun_that_would_leave_an_earlier_run_s_outputs_beside_its_own_is_refused(tmp_path, spm_model,
                                                                                      make_config):
    """A rerun with fewer shards (or a shorter comma list) wrote its outputs and left the earlier run's
    other shards beside them: a glob over the folder fed both runs' records to training, and the new
    summary no longer listed them, so a third run called them files this tool did not write. Now the
    rerun stops before any work, naming them, and leaves every file as it was."""
    corpus = _small_corpus(tmp_path)
    a, b = tmp_path / "out-a.tfrecord", tmp_path / "out-b.tfrecord"
    create_pretraining_data(make_config(corpus, spm_model, [a, b]))
    before = {p: p.read_bytes() for p in tmp_path.iterdir()}
    with pytest.raises(PretrainingDataError, match=f"{b}, written by an earlier run .* would be left beside"):
        create_pretraining_data(make_config(corpus, spm_model, [a], random_seed=2))
    assert {p: p.read_bytes() for p in tmp_path.iterdir()} == before
    b.unlink()  # as the message says
    assert create_pretraining_data(make_config(corpus, spm_model, [a], random_seed=2))["output_files"] == [str(a)]


@pytest.mark.parametrize("signum", ["SIGINT", "SIGTERM"])
def test_a_signal_between_the_renames_leaves_the_outputs_of_one_run(tmp_path, spm_model, make_config, monkeypatch,
                                                                   signum, sigint_raises):
    """Ctrl-C or SIGTERM after the summary and the first output were renamed into place left the other
    outputs of the earlier run under the new summary: shards of two runs mixed, and nothing said so.
    Now the signal acts after the last rename (the run still stops with it)."""
    import signal

    from albert_tf.pretraining_data import pipeline

    class Terminated(Exception):
        pass

    def on_sigterm(signum, frame):  # as the CLI's handler: unwind
        raise Terminated

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        corpus = _small_corpus(tmp_path)
        outputs = [tmp_path / "out-a.tfrecord", tmp_path / "out-b.tfrecord"]
        create_pretraining_data(make_config(corpus, spm_model, outputs, random_seed=1))
        summary = tmp_path / "out-a.tfrecord.summary.json"
        first = {p: p.read_bytes() for p in [*outputs, summary]}
        real_replace = os.replace

        def replace_then_signal(src, dst):
            real_replace(src, dst)
            if dst == str(outputs[0]):
                os.kill(os.getpid(), getattr(signal, signum))

        monkeypatch.setattr(pipeline.os, "replace", replace_then_signal)
        with pytest.raises((KeyboardInterrupt, Terminated)):
            create_pretraining_data(make_config(corpus, spm_model, outputs, random_seed=2))
        second = {p: p.read_bytes() for p in [*outputs, summary]}
        assert all(second[p] != first[p] for p in outputs)  # both outputs are the second run's
        assert '"random_seed": 2' in second[summary].decode()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "out-a.tfrecord",
                                                              "out-a.tfrecord.summary.json", "out-b.tfrecord"]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_output_under_a_file_is_one_line_naming_the_file_in_the_way(tmp_path, spm_model, make_config,
                                                                       monkeypatch):
    """--output_file=notes/train.tfrecord with notes a file (or a link to nothing) stopped with
    "[Errno 17] File exists: '…/notes'"; now one line says which name is in the way and why."""
    from albert_tf.pretraining_data import pipeline

    corpus = _small_corpus(tmp_path)
    (tmp_path / "notes").write_text("the user's notes")
    (tmp_path / "gone").symlink_to(tmp_path / "unmounted")
    monkeypatch.setattr(pipeline, "_tokenize_corpus", lambda *a: pytest.fail("work started"))
    cases = {tmp_path / "notes" / "train.tfrecord": f"{tmp_path / 'notes'} is not a folder",
             tmp_path / "notes" / "sub" / "train.tfrecord": f"{tmp_path / 'notes'} is not a folder",
             tmp_path / "gone" / "train.tfrecord": f"{tmp_path / 'gone'} is a link to {tmp_path / 'unmounted'}, "
                                                   f"which does not exist"}
    for output, message in cases.items():
        with pytest.raises(PretrainingDataError) as error:
            create_pretraining_data(make_config(corpus, spm_model, [output]))
        assert str(error.value) == f"--output_file={output}: cannot make its folder: {message}"
    assert (tmp_path / "notes").read_text() == "the user's notes"


def test_a_full_disk_says_which_one_is_full_the_outputs_or_tmp_dir(tmp_path, spm_model, make_config, monkeypatch):
    """With --tmp_dir on another disk, a full disk said "cannot write out-a, out-b (temporary files under
    --tmp_dir=…): the disk is full" whichever was full (os.write and copy_file_range name no file). Now
    the line names the output, or the work folder under --tmp_dir."""
    import errno

    from albert_tf.pretraining_data import pipeline, workers

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    corpus = _small_corpus(tmp_path)
    outputs = [tmp_path / "out-a.tfrecord", tmp_path / "out-b.tfrecord"]
    tmp_dir = tmp_path / "elsewhere"
    config = make_config(corpus, spm_model, outputs, tmp_dir=str(tmp_dir))
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "_append_file", full)  # the outputs' disk
        with pytest.raises(PretrainingDataError) as error:
            create_pretraining_data(config)
    assert str(error.value) == f"cannot write {outputs[0]}: the disk is full"
    with monkeypatch.context() as patch:
        patch.setattr(workers, "append_to_buckets", full)  # --tmp_dir's disk
        with pytest.raises(PretrainingDataError) as error:
            create_pretraining_data(config)
    assert str(error.value).startswith(f"cannot write {tmp_dir}{os.sep}out-a.tfrecord.tmp-")
    assert str(error.value).endswith(f" (temporary files under --tmp_dir={tmp_dir}): the disk is full")
    assert _leftovers(tmp_path) == [] and list(tmp_dir.iterdir()) == []
