"""Atomic file output: readers see the old file or the whole new one, never a part,
and a failed write leaves nothing behind.

The one writer of text files (eval results, predictions, configs, state files).
Local paths go through ``os``; paths with a scheme (``gs://...``) through
``tf.io.gfile``, imported only then, so light modules (tokenization, the GLUE
readers, the SQuAD evaluator) load no TensorFlow. Checkpoint prefixes, which are
several files, are published by ``albert_tf.weights.files`` on top of this.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import signal
import tempfile
import threading
import uuid
from typing import IO, Iterator

TMP_MARK = ".tmp-"  # in every temporary name: leftovers of a crash are found by it


def is_remote(path: str | os.PathLike) -> bool:
    """True for paths tf.io.gfile must handle (``gs://``, ``hdfs://``, ...)."""
    return "://" in os.fspath(path)


def expand_home(path: str) -> str:
    """A leading ``~`` or ``~user`` of ``path`` as a shell would expand it: no shell does after ``--flag=``,
    and TensorFlow's file functions do not either (they made a folder named ``~`` in the current folder).
    The drivers' path flags (each item of a comma list: ``cli.expand_home_in_path_flags``) and the demo's
    ``--output_dir`` both go through here."""
    return os.path.expanduser(path) if path.startswith("~") else path


def umask_mode(mode: int = 0o666) -> int:
    """``mode`` less the process's umask: what ``open()`` gives a new file (0644 under umask 022)."""
    return mode & ~_umask()


def _umask() -> int:
    try:  # Linux shows it; reading it elsewhere means setting it, a moment when other threads see 0
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[str]:
    """Yields a temporary local path beside `path`: write there; on success it replaces
    `path` (a symlink's target, for a symlink: written in place when only the target, not its
    folder, may be written), on any error it is removed and the error propagates. For a remote
    `path` the temporary file is local and is copied up on success (then renamed into place)."""
    path = os.fspath(path)
    if is_remote(path):
        with _remote_output(path) as tmp:
            yield tmp
        return
    link = os.path.islink(path)
    if link:  # the user's link stays a link: written through, as open() would
        path = os.path.realpath(path)
    directory = os.path.dirname(path) or "."
    if not link:  # where a link points, the folder must be there already, as for open(): none is made
        os.makedirs(directory, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + TMP_MARK, suffix=".tmp", dir=directory)
    except OSError as e:  # a folder it cannot write: the output's name, not a temporary's nobody will see
        if not (link and e.errno in (errno.EACCES, errno.EPERM) and os.access(path, os.W_OK)):
            raise OSError(e.errno, e.strerror, path) from e
        fd, tmp = None, None
    if fd is None:
        # A link to a file it may write in a folder it may not: the original's open() wrote it there, so
        # does this (only the copy of the finished text can be cut short, as open() could be).
        with _written_in_place(path) as tmp:
            yield tmp
        return
    os.close(fd)
    try:
        os.chmod(tmp, umask_mode())  # mkstemp makes 0600; the file gets what open() would give it
        yield tmp
        sync_to_disk(tmp)
        try:
            os.replace(tmp, path)
        except OSError as e:  # the output's name, not the temporary's (a folder in the way)
            raise OSError(e.errno, e.strerror, path) from e
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, OSError) and e.filename is None and e.errno is not None:
            # A write's error (a full disk) names no file: say which output it was.
            raise OSError(e.errno, e.strerror, path) from e
        raise


def sync_to_disk(path: str) -> None:
    """Puts a file's data on disk. Called before the rename that publishes it: a power cut after the
    rename then finds the old file or the whole new one, never an empty one (the rename can reach the
    disk before the data). The folder is not synced: losing the rename itself leaves the old file."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def _written_in_place(path: str) -> Iterator[str]:
    """Yields a temporary path (in the system's temporary folder); on success its bytes are copied into the
    existing file ``path``, which keeps its inode and mode; on any error ``path`` is untouched."""
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + TMP_MARK, suffix=".tmp")
    os.close(fd)
    try:
        yield tmp
        try:
            shutil.copyfile(tmp, path)
        except OSError as e:
            raise OSError(e.errno, e.strerror, path) from e
    finally:
        os.remove(tmp)


@contextlib.contextmanager
def _remote_output(path: str) -> Iterator[str]:
    import tensorflow as tf

    fd, local = tempfile.mkstemp(prefix=os.path.basename(path) + TMP_MARK, suffix=".tmp")
    os.close(fd)
    os.chmod(local, umask_mode())
    remote_tmp = f"{path}{TMP_MARK}{uuid.uuid4().hex}"
    try:
        yield local
        tf.io.gfile.copy(local, remote_tmp, overwrite=True)
        tf.io.gfile.rename(remote_tmp, path, overwrite=True)
    finally:
        os.remove(local)
        if tf.io.gfile.exists(remote_tmp):
            tf.io.gfile.remove(remote_tmp)


def write_utf8(path: str, text: str) -> None:
    """Writes ``text`` to the local file ``path`` as UTF-8 with ``\\n`` line ends (the temporary file of
    an ``atomic_output``)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def atomic_write_text(path: str | os.PathLike, text: str) -> str:
    """Writes UTF-8 `text` to `path` (local or remote) atomically; returns the path."""
    path = os.fspath(path)
    if is_remote(path):
        import tensorflow as tf

        tmp = f"{path}{TMP_MARK}{uuid.uuid4().hex}"
        try:
            with tf.io.gfile.GFile(tmp, "w") as f:
                f.write(text)
            tf.io.gfile.rename(tmp, path, overwrite=True)
        finally:
            if tf.io.gfile.exists(tmp):
                tf.io.gfile.remove(tmp)
        return path
    with atomic_output(path) as tmp:
        write_utf8(tmp, text)
    return path


def atomic_write_texts(texts: dict[str, str]) -> list[str]:
    """Writes files that belong together (``path -> text``, UTF-8) so that an interrupt, a kill before the
    renames or a full disk leaves either all of them or none replaced: every file is written whole under its temporary name before
    the first rename, and a folder at any output's name is refused before any write (its rename would
    fail after others were done); a rename the OS refuses puts back the files renamed before it. Returns the paths."""
    paths = [os.fspath(path) for path in texts]
    for path in paths:
        if is_dir(path):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
    # Ctrl-C or SIGTERM acts after the last rename: between two, it left one file new and one old.
    with signals_deferred():
        kept: dict[str, tuple[bool, str | None, tuple[int, int] | None]] = {}
        try:
            with contextlib.ExitStack() as renames:  # on leaving: the renames, after every write
                for path, text in zip(paths, texts.values()):
                    write_utf8(renames.enter_context(atomic_output(path)), text)
                kept = {path: _keep_aside(path) for path in paths}
        except BaseException:
            # A rename the OS refused after others were done (an immutable file, another user's file in a
            # sticky folder): those go back to what they were, so none of the files is replaced.
            _put_back(kept)
            raise
        finally:
            for _, backup, _ in kept.values():
                if backup and os.path.lexists(backup):
                    os.remove(backup)
    return paths


def _keep_aside(path: str) -> tuple[bool, str | None, tuple[int, int] | None]:
    """Whether a local file is at ``path`` (a link's target) before it is replaced, a second name (a hard
    link) for it to put it back with, and which file it is (device, inode). Where the file system has no hard
    links (exFAT, SMB, some FUSE mounts) a copy is that second name; None when neither can be made (a folder
    this user cannot write in): it cannot be put back."""
    target = os.path.realpath(path)
    if is_remote(path) or not os.path.isfile(target):
        return False, None, None
    original = _file_id(target)
    backup = f"{target}{TMP_MARK}{uuid.uuid4().hex}.kept"
    try:
        os.link(target, backup)
    except OSError:
        try:
            shutil.copyfile(target, backup)
            with contextlib.suppress(OSError):  # its mode, where the file system keeps modes
                shutil.copymode(target, backup)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(backup)  # a copy cut short (a full disk)
            return True, None, original
    return True, backup, original


def _file_id(path: str) -> tuple[int, int]:
    status = os.stat(path)
    return status.st_dev, status.st_ino


def _put_back(kept: dict[str, tuple[bool, str | None, tuple[int, int] | None]]) -> None:
    """Undoes the renames done of ``kept`` (path -> whether a file was there, its second name, which file it
    was): an earlier file replaced is renamed back (one not replaced stays, not swapped for its copy); a file
    that was not there before and is now (this run's) is removed."""
    for path, (existed, backup, original) in kept.items():
        if is_remote(path):
            continue
        target = os.path.realpath(path)
        with contextlib.suppress(OSError):
            if not existed and os.path.isfile(target):
                os.remove(target)
            elif backup and _file_id(target) != original:
                os.replace(backup, target)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM received in the block act when it ends, as they would have: for the renames
    that publish files together, which a signal between two of them would leave half old, half new.
    Only the main thread handles signals, so elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    # A handler not set from Python (getsignal None) could not be put back: that signal is left alone.
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(sig) is not None}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if received:
            signal.raise_signal(received[0])


def make_folders(path: str | os.PathLike) -> None:
    """Creates the folder ``path`` and its missing parents. Locally they get the mode the umask gives
    (TensorFlow's ``makedirs`` gives 0755 whatever it is: a group-shared umask 002 left the run folder
    closed to the group); remote paths go through ``tf.io.gfile``."""
    path = os.fspath(path)
    if is_remote(path):
        import tensorflow as tf

        tf.io.gfile.makedirs(path)
        return
    try:
        os.makedirs(path, exist_ok=True)
    except (FileExistsError, FileNotFoundError) as e:  # a file, or a link to nothing, at the name or a parent's
        dangling = _dangling_link(path)
        if dangling:
            raise FileNotFoundError(errno.ENOENT, f"a link to {os.readlink(dangling)}, which does not exist",
                                    dangling) from None
        if isinstance(e, FileNotFoundError):
            raise
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path) from None


def missing_folders(folder: str) -> list[str]:
    """``folder`` and its parents that do not exist yet, innermost first."""
    missing = []
    while folder and not os.path.lexists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return missing


def make_new_folders(folder: str) -> list[str]:
    """Makes the local ``folder`` and its missing parents (`make_folders`); returns those it made, innermost first.
    When it fails partway (a name too long, an inode quota), those it had made are removed again: a refused run
    leaves no empty parent behind."""
    missing = missing_folders(folder)
    try:
        make_folders(folder)
    except BaseException:
        remove_empty_folders([made for made in missing if os.path.lexists(made)])  # from the last it made
        raise
    return missing


def remove_empty_folders(folders: list[str]) -> None:
    """Removes each of ``folders`` (innermost first) that is an empty folder; stops at the first that is not."""
    for folder in folders:
        try:
            os.rmdir(folder)  # only an empty folder: what another run put in it keeps it
        except OSError:
            return


def _dangling_link(path: str) -> str | None:
    """``path`` or the nearest of its parents that is a symlink to nothing, if any."""
    while path and path != os.path.dirname(path):
        if os.path.islink(path) and not os.path.exists(path):
            return path
        path = os.path.dirname(path)
    return None


def give_umask_modes(folder: str) -> None:
    """Gives a folder written by this job, and everything in it, the modes the umask gives new files and
    folders: TensorFlow copies a SavedModel's assets with their source's mode (a read-only tokenizer model
    would stay read-only, a private one private)."""
    os.chmod(folder, umask_mode(0o777))
    for root, dirs, names in os.walk(folder):
        for name in dirs:
            os.chmod(os.path.join(root, name), umask_mode(0o777))
        for name in names:
            os.chmod(os.path.join(root, name), umask_mode())


def absolute(path: str | os.PathLike) -> str:
    """A local path made absolute; a remote one (``gs://...``) as it is."""
    path = os.fspath(path)
    return path if is_remote(path) else os.path.abspath(path)


def is_dir(path: str | os.PathLike) -> bool:
    """True when `path` (local or remote) is a folder."""
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.isdir(path)
    import tensorflow as tf

    return tf.io.gfile.isdir(path)


def is_file(path: str | os.PathLike) -> bool:
    """True when `path` (local or remote) is a file."""
    path = os.fspath(path)
    if not is_remote(path):
        return os.path.isfile(path)
    import tensorflow as tf

    return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)


def read_bytes(path: str | os.PathLike) -> bytes | None:
    """The bytes of `path` (local or remote), None when it is not a file."""
    path = os.fspath(path)
    if not is_file(path):
        return None
    if is_remote(path):
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "rb") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def open_text(path: str | os.PathLike, encoding: str = "utf-8", newline: str | None = None) -> IO[str]:
    """`open(path, "r", ...)` for a local or remote file (a remote one is read whole first)."""
    path = os.fspath(path)
    if not is_remote(path):
        return open(path, "r", encoding=encoding, newline=newline)
    import io

    import tensorflow as tf

    with tf.io.gfile.GFile(path, "rb") as f:
        return io.TextIOWrapper(io.BytesIO(f.read()), encoding=encoding, newline=newline)


def remove_file(path: str | os.PathLike) -> None:
    """Removes a local or remote file."""
    path = os.fspath(path)
    if is_remote(path):
        import tensorflow as tf

        tf.io.gfile.remove(path)
    else:
        os.remove(path)


def read_text(path: str | os.PathLike) -> str | None:
    """The UTF-8 text of `path` (local or remote), None when it does not exist."""
    path = os.fspath(path)
    if is_remote(path):
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            return None
        with tf.io.gfile.GFile(path) as f:
            return f.read()
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.read()


def file_sha256(path: str | os.PathLike) -> str:
    """The hex SHA-256 of a file's bytes (local or remote), read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with _open_binary(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def open_binary(path: str | os.PathLike):
    """`open(path, "rb")` for a local or remote file."""
    return _open_binary(path)


def _open_binary(path: str | os.PathLike):
    if is_remote(path):
        import tensorflow as tf

        return tf.io.gfile.GFile(os.fspath(path), "rb")
    return open(path, "rb")
