"""An exported SavedModel's numbered version folders (``<base>/<unix time>``, as TensorFlow Serving
reads them), each written whole under a temporary name and renamed, so a server never loads a half of one.

A writer killed with SIGKILL runs no cleanup: its temporary folder carries its host and pid, and the
next export into the same base removes the folders of dead writers of this host (a live writer's stays)."""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
from typing import Iterator

from albert_tf.fileio import TMP_MARK, give_umask_modes, is_remote, make_folders
from albert_tf.processes import process_alive


def version_base_problem(flag: str, base: str) -> str | None:
    """Why versions could not be written into the local folder ``base`` (``--<flag>``), or None: a file at its
    name or a parent's, or a first existing folder this user cannot write in. For the drivers' flag checks:
    the export comes after training and prediction, which such a place made fail at their end."""
    if is_remote(base):
        return None
    folder = os.path.abspath(base)
    while not os.path.exists(folder):  # created by the export: what counts is the first folder that exists
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder):
        return f"--{flag}={base}: {folder} is a file; expected a folder for the exported versions"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"--{flag}={base}: cannot write in {folder}; expected a folder this user can write in"
    return None


@contextlib.contextmanager
def new_version_folder(base: str) -> Iterator[tuple[str, str]]:
    """(folder to write, ``<base>/<unix time>``) as an exported SavedModel's versions are named: on success
    the first becomes the second, on any error it is removed. Locally the first is a temporary folder renamed
    at the end; on remote storage (no folder rename there) both are the final folder."""
    import time

    import tensorflow as tf

    make_folders(base)
    version = int(time.time())
    while tf.io.gfile.exists(os.path.join(base, str(version))):
        version += 1
    final = os.path.join(base, str(version))
    tmp = final
    if not is_remote(base):
        _remove_killed_writers_folders(base)
        tmp = os.path.join(base, f"{TMP_MARK}{version}-{os.getpid()}-{socket.gethostname()}")
    try:
        yield tmp, final
        if tmp != final:
            give_umask_modes(tmp)
            os.replace(tmp, final)
    except BaseException:
        if tf.io.gfile.exists(tmp):
            tf.io.gfile.rmtree(tmp)
        raise
    finally:
        if tmp != final and os.path.exists(tmp):
            tf.io.gfile.rmtree(tmp)


# new_version_folder's temporary name: .tmp-<version>-<pid>-<host>. Its writer is known, so what a killed
# writer left is told from an export another process is writing into the same folder now.
_VERSION_BEING_WRITTEN = re.compile(rf"{re.escape(TMP_MARK)}\d+-(\d+)-(.+)")


def _remove_killed_writers_folders(base: str) -> None:
    """Removes the version folders that writers of this host, killed while writing, left in ``base``."""
    host = socket.gethostname()
    for name in os.listdir(base):
        match = _VERSION_BEING_WRITTEN.fullmatch(name)
        if match and match.group(2) == host and not process_alive(int(match.group(1))):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
