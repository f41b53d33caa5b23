"""An exclusive lock on a data directory, so that two brokers never write the same files.

The lock is an advisory ``flock`` on ``<data dir>/LOCK``, held for the life of the process that
opened the directory; the kernel releases it when the process exits, even after kill -9. The file
names the holder (process id, host, start time) so that a second opener can say who it is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path

from .position import StorageError
from .segment import fsync_dir

__all__ = ["DataDirectoryLock", "DataDirectoryLockedError", "make_dirs"]

LOCK_FILE = "LOCK"


class DataDirectoryLockedError(StorageError):
    """Another process (or another broker in this one) has the data directory open."""


def make_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents, durably (each new entry's parent is fsynced)."""
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        current = current.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            directory.mkdir()
        fsync_dir(directory.parent)


class DataDirectoryLock:
    """Holds ``<directory>/LOCK``; raises :class:`DataDirectoryLockedError` if it is taken."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory) / LOCK_FILE
        make_dirs(self.path.parent)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = _read_holder(fd)
            os.close(fd)
            raise DataDirectoryLockedError(
                f"data directory {self.path.parent} is in use by another broker ({holder}); "
                "stop it first or choose another data directory"
            ) from None
        self._fd: int | None = fd
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        info = f"pid {os.getpid()} on host {socket.gethostname()}, started {started}\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, info.encode(), 0)

    def release(self) -> None:
        """Give the directory up (closing the file releases the lock)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None


def _read_holder(fd: int) -> str:
    try:
        text = os.pread(fd, 512, 0).decode(errors="replace").strip()
    except OSError:
        text = ""
    return text or "holder unknown"
