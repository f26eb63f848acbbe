"""TensorBoard event files that cannot be written (a full disk, a file size limit, a forbidden or missing
folder): one line naming the file and why, not TensorFlow's multi-line internals; an event file the
writer created and could not write a byte to is removed."""
from __future__ import annotations

import contextlib
import resource
import signal

import pytest
import tensorflow as tf

from albert_tf.errors import RunError
from albert_tf.training.summaries import LazySummaryWriter, write_scalar_summary, write_scalars


@contextlib.contextmanager
def file_size_limit(size: int):
    """A real EFBIG: the kernel refuses to grow any file past ``size`` bytes (as ``ulimit -f``)."""
    old_handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, old_handler)


def _events(folder):
    return sorted(folder.glob("events.out.tfevents.*"))


def test_an_eval_event_file_that_cannot_get_a_byte_is_one_line_and_removed(tmp_path):
    folder = tmp_path / "eval"
    with pytest.raises(RunError) as raised, file_size_limit(0):
        write_scalars(str(folder), 4, {"eval_accuracy": 0.5})
    message = str(raised.value)
    assert message.startswith(f"cannot write the TensorBoard events {folder}/events.out.tfevents.")
    assert message.endswith(": file too large for the file system (or ulimit -f); "
                            "a rerun evaluates this checkpoint again")
    assert "\n" not in message and "{{" not in message
    assert _events(folder) == []  # it was 0 bytes and ours
    write_scalars(str(folder), 4, {"eval_accuracy": 0.5})  # room again: written
    assert len(_events(folder)) == 1 and _events(folder)[0].stat().st_size > 0


def test_a_training_event_file_that_stops_growing_is_one_line_and_kept(tmp_path):
    """The events written before the failure stay; the line says where a rerun resumes."""
    checkpoint = str(tmp_path / "model.ckpt-2")
    writer = LazySummaryWriter(str(tmp_path), lambda: checkpoint)
    with writer.as_default(step=1):
        write_scalar_summary("loss", 1.0)
    writer.flush()
    (events,) = _events(tmp_path)
    written = events.stat().st_size
    with pytest.raises(RunError) as raised, file_size_limit(written):
        with writer.as_default(step=2):
            write_scalar_summary("loss", 2.0)
        writer.flush()
    assert str(raised.value) == (f"cannot write the TensorBoard events {events}: file too large for the file "
                                 f"system (or ulimit -f); a rerun resumes from {checkpoint}")
    assert _events(tmp_path) == [events] and events.stat().st_size == written


def test_an_eval_folder_that_is_a_file_is_one_line_naming_it(tmp_path):
    (tmp_path / "eval").write_text("not a folder")
    with pytest.raises(RunError) as raised:
        write_scalars(str(tmp_path / "eval"), 4, {"eval_accuracy": 0.5})
    assert str(raised.value) == (f"cannot write the TensorBoard events {tmp_path / 'eval'}: Not a directory; "
                                 f"a rerun evaluates this checkpoint again")
    assert (tmp_path / "eval").read_text() == "not a folder"


@pytest.mark.parametrize("kind,reason", [
    (tf.errors.ResourceExhaustedError, "no space left on the device"),
    (tf.errors.PermissionDeniedError, "permission denied"),
])
def test_a_full_disk_or_a_forbidden_file_is_one_line(tmp_path, monkeypatch, kind, reason):
    """TensorFlow's own words for a full tmpfs and a folder of another user (review 48), faked at the writer:
    the empty event file it left is removed."""
    events = tmp_path / "events.out.tfevents.1796447489.vm.28465.0.v2"
    words = {tf.errors.ResourceExhaustedError: "No space left on device\n\tFailed to flush 1 events to {}\n"
                                                "\tFlushing first event.",
             tf.errors.PermissionDeniedError: "Permission denied\n\tCreating writable file {}"}[kind]

    def fails(directory, *args, **kwargs):
        events.touch()
        raise kind(None, None, "{{function_node __wrapped__CreateSummaryFileWriter_device_/job:localhost/"
                               f"replica:0/task:0/device:CPU:0}}}} {events}; {words.format(events)}\n"
                               "\tCould not initialize events writer. [Op:CreateSummaryFileWriter] name: ")

    monkeypatch.setattr(tf.summary, "create_file_writer", fails)
    writer = LazySummaryWriter(str(tmp_path))
    with pytest.raises(RunError) as raised, writer.as_default(step=1):
        pass
    assert str(raised.value) == (f"cannot write the TensorBoard events {events}: {reason}; "
                                 f"no checkpoint was written yet")
    assert not events.exists()
