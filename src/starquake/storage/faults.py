"""A seam for storage faults: what the commit path and the metadata store do before each I/O.

Production code runs with no :class:`StorageFaults` at all. Tests install one to make a write or
an fsync fail (EIO, ENOSPC), to tear a write (only a prefix of the bytes reaches the file, then
the "machine dies"), or to fail a metadata transaction before it commits. Every hook runs in the
thread that does the I/O.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from pathlib import Path

__all__ = ["FileFaults", "InjectedFaults", "StorageFaults"]


class StorageFaults:
    """No faults; subclass and override the hooks to inject some."""

    def before_write(self, path: Path, offset: int, data: bytes) -> bytes:
        """The bytes about to be written at ``offset`` of ``path``: return what to write
        (a shorter prefix tears the write), or raise :class:`OSError`.

        A returned prefix is written and then the write fails with ``EIO``, as when the
        machine stops mid-write.
        """
        return data

    def before_sync(self, path: Path) -> None:
        """Called before ``path`` is fsynced; raise :class:`OSError` to fail the sync."""

    def before_metadata_commit(self, items: list[tuple[str, bytes | None]]) -> None:
        """Called inside a metadata transaction before it commits; raising rolls it back."""


class InjectedFaults(StorageFaults):
    """Faults switched on and off by tests (thread-safe).

    ``fail_writes`` / ``fail_syncs`` / ``fail_metadata`` hold an errno (e.g. ``errno.ENOSPC``) or
    0 for none; ``tear_after`` tears the next data write after that many bytes (once);
    ``hold_syncs``, when set, makes every fsync wait until it is cleared (commits stall).
    """

    def __init__(self) -> None:
        self.fail_writes = 0
        self.fail_syncs = 0
        self.fail_metadata = 0
        self.tear_after: int | None = None
        self.hold_syncs = threading.Event()
        self._released = threading.Event()
        self._released.set()
        self.writes = 0
        self.syncs = 0

    def before_write(self, path: Path, offset: int, data: bytes) -> bytes:
        self.writes += 1
        if self.fail_writes:
            raise _os_error(self.fail_writes, path)
        if self.tear_after is not None:
            keep, self.tear_after = self.tear_after, None
            return data[:keep]
        return data

    def before_sync(self, path: Path) -> None:
        self.syncs += 1
        if self.hold_syncs.is_set():
            self._released.wait()
        if self.fail_syncs:
            raise _os_error(self.fail_syncs, path)

    def before_metadata_commit(self, items: list[tuple[str, bytes | None]]) -> None:
        if self.fail_metadata:
            raise _os_error(self.fail_metadata, Path("metadata"))

    def hold(self) -> None:
        """Make fsyncs wait (commits stall, receipts are not sent) until :meth:`release`."""
        self._released.clear()
        self.hold_syncs.set()

    def release(self) -> None:
        self.hold_syncs.clear()
        self._released.set()

    def clear(self) -> None:
        """No more faults."""
        self.fail_writes = self.fail_syncs = self.fail_metadata = 0
        self.tear_after = None
        self.release()


def _os_error(code: int, path: Path) -> OSError:
    return OSError(code, f"{os.strerror(code)} (injected)", str(path))


class FileFaults(InjectedFaults):
    """Faults read from a JSON file, for tests that drive a broker *process*.

    The file holds ``{"fail_writes": errno, "fail_syncs": errno, "fail_metadata": errno}``
    (missing keys: 0); it is read again whenever its modification time changes, so a test
    switches faults on and off by rewriting it. ``starquake standalone`` uses this when the
    environment variable ``STARQUAKE_STORAGE_FAULTS`` names such a file (a testing aid).
    """

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._stamp: int | None = None
        self._lock = threading.Lock()

    def _refresh(self) -> None:
        try:
            stamp = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            stamp = None
        with self._lock:
            if stamp == self._stamp:
                return
            self._stamp = stamp
            settings: dict[str, int] = {}
            if stamp is not None:
                with contextlib.suppress(OSError, ValueError):
                    loaded = json.loads(self.path.read_text() or "{}")
                    if isinstance(loaded, dict):
                        settings = {k: int(v) for k, v in loaded.items()}
            self.fail_writes = settings.get("fail_writes", 0)
            self.fail_syncs = settings.get("fail_syncs", 0)
            self.fail_metadata = settings.get("fail_metadata", 0)

    def before_write(self, path: Path, offset: int, data: bytes) -> bytes:
        self._refresh()
        return super().before_write(path, offset, data)

    def before_sync(self, path: Path) -> None:
        self._refresh()
        super().before_sync(path)

    def before_metadata_commit(self, items: list[tuple[str, bytes | None]]) -> None:
        self._refresh()
        super().before_metadata_commit(items)
