"""Group commit: many appends, from many managed ledgers, share one write + fsync per file.

The broker drives it in three steps::

    commit = factory.take_pending()   # event loop: swap out the buffered appends
    commit.execute()                  # worker thread: write the bytes, fsync the files
    commit.finish()                   # event loop: the entries become readable
    # or, if execute() raised:
    commit.fail(exc)                  # event loop: the entries never become visible; fence

``execute`` only touches file descriptors and the bytes captured by ``take_pending``; everything
else happens on the loop, so no lock is needed. A :attr:`PendingCommit.splittable` commit (it
fsyncs and seals no ledger) may instead run as ``write()`` then ``sync()`` (or
``sync_together()`` with the commits written after it, one fsync per file), later commits'
writes running between the two, in another thread. Writes run one at a time in the order the
commits were taken, and so do fsyncs; a commit finishes (or fails) after the one before it.
Within one commit, ledgers that were sealed (rolled over) are written and
synced before any other file is written, so a crash can never keep an entry of a newer ledger
while losing an older one.
"""

from __future__ import annotations

import contextlib
import enum
import errno
import logging
import os
import time
from pathlib import Path

from .api import ManagedLedger
from .faults import StorageFaults
from .host import CommitHost
from .position import Position, StorageError
from .removal import remove_file
from .segment import (
    encode_ledger_records,
    fsync_dir,
    pwrite_all,
    sync_fd,
    truncate_file,
    write_index,
)
from .state import LedgerOwner, LedgerState

__all__ = ["DeleteJob", "IndexJob", "PendingCommit", "WriteBatch"]

log = logging.getLogger(__name__)

PREALLOCATE_MIN_BYTES = 64 * 1024
"""The smallest zero-filled step ahead of a ledger file's writes."""
PREALLOCATE_LARGE_WRITE = 256 * 1024
"""Writes this large do not zero-fill ahead: their fsync is bound by the bytes, not by the
file system's journal, and zeros would write each byte twice (here, 1-2 MB writes with fsync
reach 1.2-1.4 GB/s growing the file, 0.9-1.1 GB/s zero-filling ahead)."""


class WriteBatch:
    """Bytes of one ledger captured by one commit."""

    __slots__ = (
        "count",
        "datas",
        "end",
        "fd",
        "first_entry",
        "header",
        "offset",
        "sealing",
        "state",
    )

    def __init__(
        self,
        state: LedgerState,
        fd: int,
        offset: int,
        datas: list[bytes],
        header: bytes | None,
        first_entry: int,
        end: int,
        sealing: bool,
    ) -> None:
        self.state = state
        self.fd = fd
        self.offset = offset
        self.datas = datas
        self.header = header
        self.first_entry = first_entry
        self.count = len(datas)
        self.end = end
        self.sealing = sealing

    def write(self, faults: StorageFaults | None = None, preallocate_max: int = 0) -> int:
        """Write the framed records at their offset (thread side); the number of bytes. With
        ``preallocate_max`` the file is zero-filled ahead of them (see :meth:`_preallocate`)."""
        parts: list[bytes] = []
        if self.header is not None:
            parts.append(self.header)
        encode_ledger_records(self.datas, self.first_entry, parts)
        size = self.end - self.offset
        if faults is not None:
            data = b"".join(parts)
            allowed = faults.before_write(self.state.path, self.offset, data)
            if len(allowed) < len(data):
                pwrite_all(self.fd, allowed, self.offset)
                raise OSError(errno.EIO, "write torn (injected)", str(self.state.path))
        if preallocate_max and size < PREALLOCATE_LARGE_WRITE:
            self._preallocate(self.end, preallocate_max)
        _pwritev_all(self.fd, parts, self.offset)
        return size

    def _preallocate(self, end: int, max_step: int) -> None:
        """Zero-fill the file ahead of ``end`` once the writes reach what was filled before.

        fdatasync of bytes written over allocated blocks flushes the data only; past the end of
        the file it also commits the file system's journal (new blocks, new size): on ext4
        here, write + fdatasync of 4-128 kB takes 0.09-0.2 ms over zeros against 0.14-0.28 ms
        at the end of the file. The commit that writes a step's zeros flushes them too (a
        1 MB step about 1 ms, 4 MB 7-8 ms), hence the bounded step. A step is as large as the
        file, from ``PREALLOCATE_MIN_BYTES`` to ``max_step``: a small topic's file at most
        doubles. The zeros never parse as records; recovery and sealing cut them off.
        Best effort: a file that cannot grow by a step (a full disk) is written as it is."""
        state = self.state
        if end <= state.allocated_end:
            return
        step = min(max(end, PREALLOCATE_MIN_BYTES), max_step)
        try:
            _write_zeros(self.fd, end, step)
        except OSError:
            with contextlib.suppress(OSError):  # give back what the zeros took
                os.ftruncate(self.fd, end)
            return
        state.allocated_end = end + step


_IOV_MAX = 1024
"""Buffers per pwritev call (Linux's limit)."""


def _pwritev_all(fd: int, parts: list[bytes], offset: int) -> None:
    """Write ``parts`` back to back at ``offset`` without joining them first: the kernel
    copies them, with the interpreter's lock released. Short writes are finished."""
    for start in range(0, len(parts), _IOV_MAX):
        chunk = parts[start : start + _IOV_MAX]
        size = sum(len(part) for part in chunk)
        written = os.pwritev(fd, chunk, offset)
        if written < size:
            pwrite_all(fd, b"".join(chunk)[written:], offset + written)
        offset += size


_ZEROS = bytes(PREALLOCATE_MIN_BYTES)


def _write_zeros(fd: int, offset: int, size: int) -> None:
    """Write ``size`` zero bytes at ``offset`` from one small shared buffer."""
    count, rest = divmod(size, len(_ZEROS))
    buffers = [_ZEROS] * count
    if rest:
        buffers.append(_ZEROS[:rest])
    _pwritev_all(fd, buffers, offset)


class IndexJob:
    """An index file to write for a sealed ledger (best effort: recovery rescans without it)."""

    __slots__ = ("created_at", "data_end", "directory", "ledger_id", "offsets", "state")

    def __init__(self, state: LedgerState) -> None:
        self.state = state
        self.directory = state.directory
        self.ledger_id = state.ledger_id
        self.offsets = state.offsets[: state.confirmed].tobytes()
        self.data_end = state.confirmed_end
        self.created_at = state.created_at

    def run(self) -> None:
        """Cut the file's zero-filled tail, then write the index file (thread side); errors
        are ignored (the index must cover the whole file, else it is not used)."""
        with contextlib.suppress(OSError):
            truncate_file(self.directory / f"{self.ledger_id}.log", self.data_end)
            write_index(
                self.directory, self.ledger_id, self.offsets, self.data_end, self.created_at
            )


class DeleteJob:
    """Ledger files to remove (trimmed ledgers), then the directory fsync that makes it stick."""

    __slots__ = ("directory", "paths")

    def __init__(self, directory: Path, paths: list[Path]) -> None:
        self.directory = directory
        self.paths = paths

    def run(self) -> None:
        """Remove the files (cut down a step at a time first, see
        :func:`~starquake.storage.removal.remove_file`) and fsync their directory (thread
        side); errors are logged."""
        try:
            for path in self.paths:
                remove_file(path)
            with contextlib.suppress(FileNotFoundError):  # the whole topic was deleted since
                fsync_dir(self.directory)
        except OSError as exc:
            log.error("cannot delete trimmed ledger files in %s: %s", self.directory, exc)


class _Stage(enum.Enum):
    TAKEN = "taken"
    WRITTEN = "written"
    EXECUTED = "executed"
    FAILED = "failed"
    DONE = "done"


class PendingCommit:
    """Appends handed over by :meth:`ManagedLedgerFactory.take_pending`, to write and fsync."""

    def __init__(
        self,
        factory: CommitHost,
        batches: list[WriteBatch],
        new_dirs: list[Path],
        index_jobs: list[IndexJob],
        delete_jobs: list[DeleteJob] | None = None,
        open_error: StorageError | None = None,
    ) -> None:
        """``open_error``: a ledger file of ``batches`` could not be opened; executing fails
        with it before anything is written."""
        self._factory = factory
        self._open_error = open_error
        self._batches = batches
        self._new_dirs = new_dirs
        self._index_jobs = index_jobs
        self._delete_jobs = delete_jobs or []
        self._stage = _Stage.TAKEN
        # Measurements made by execute() in the worker thread; read them on the loop once
        # execute() has returned (the thread hand-off orders the accesses, no lock needed).
        self.bytes_written = 0
        """Bytes written to ledger files (records with their framing, file headers)."""
        self.sync_seconds: list[float] = []
        """How long each ledger file's fsync took, in seconds."""

    @property
    def entry_count(self) -> int:
        """Number of entries in this commit."""
        return sum(b.count for b in self._batches)

    @property
    def byte_count(self) -> int:
        """Number of data bytes in this commit."""
        return sum(len(d) for b in self._batches for d in b.datas)

    @property
    def splittable(self) -> bool:
        """Whether :meth:`write` and :meth:`sync` may run apart, later commits written
        between them: it fsyncs, and seals no ledger (a sealed ledger's bytes must be synced
        before any other file is written)."""
        return self._factory.config.journal_sync and not self.runs_alone

    @property
    def runs_alone(self) -> bool:
        """Whether this commit must run with no other under way: it fsyncs and seals a
        ledger, or it fails at once (a ledger file could not be opened)."""
        if self._open_error is not None:
            return True
        return self._factory.config.journal_sync and any(b.sealing for b in self._batches)

    def writes_only(self, max_bytes: int) -> bool:
        """Whether executing this commit only writes at most ``max_bytes`` of entries: no
        fsync (``journal_sync`` off), no file to open, create, index or delete."""
        return (
            not self._factory.config.journal_sync
            and self._open_error is None
            and not self._new_dirs
            and not self._index_jobs
            and not self._delete_jobs
            and sum(b.end - b.offset for b in self._batches) <= max_bytes
        )

    def execute(self) -> None:
        """THREAD side: write the captured entries to their ledger files and fsync them.

        Also fsyncs the directories of newly created files and writes pending index files. Raises
        ``OSError`` (or :class:`StorageError`) on failure; call :meth:`fail` then.
        """
        self._begin()
        sealing = [b for b in self._batches if b.sealing]
        if sealing:  # written and synced before any other file is written
            self._write(sealing)
            self._sync(sealing)
        others = [b for b in self._batches if not b.sealing] if sealing else self._batches
        self._write(others)
        self._sync(others)
        self._finish_files()

    def write(self) -> None:
        """THREAD side, first half of :meth:`execute` for a :attr:`splittable` commit: write
        the entries without fsyncing them; :meth:`sync` (in any thread, after this returned)
        makes them durable. Raises like :meth:`execute`."""
        self._begin()
        self._write(self._batches)
        self._stage = _Stage.WRITTEN

    def sync(self) -> None:
        """THREAD side, second half: fsync what :meth:`write` wrote, then the file work."""
        PendingCommit.sync_together([self])

    @staticmethod
    def sync_together(commits: list[PendingCommit]) -> None:
        """THREAD side: the second half of several written commits, in the order they were
        written: each file they wrote is fsynced once (which flushes all of them; the
        measurement goes to the last commit that wrote it), then each commit's file work.
        Raises like :meth:`execute`; then none of them is durable."""
        last: dict[int, tuple[PendingCommit, WriteBatch]] = {}
        for commit in commits:
            if commit._stage is not _Stage.WRITTEN:
                raise StorageError(f"cannot sync a commit that is {commit._stage.value}")
        for commit in commits:
            commit._stage = _Stage.FAILED  # until proven otherwise
            for batch in commit._batches:
                last[batch.fd] = (commit, batch)
        for commit, batch in last.values():
            commit._sync([batch])
        for commit in commits:
            commit._finish_files()

    def _begin(self) -> None:
        if self._stage is not _Stage.TAKEN:
            raise StorageError(f"commit already {self._stage.value}")
        self._stage = _Stage.FAILED  # until proven otherwise
        if self._open_error is not None:
            raise self._open_error

    def _write(self, batches: list[WriteBatch]) -> None:
        config = self._factory.config
        preallocate = config.preallocate_max_bytes if config.journal_sync else 0
        faults = self._factory.faults
        for batch in batches:
            self.bytes_written += batch.write(faults, preallocate)

    def _sync(self, batches: list[WriteBatch]) -> None:
        if not self._factory.config.journal_sync:
            return
        faults = self._factory.faults
        for batch in batches:
            if faults is not None:
                faults.before_sync(batch.state.path)
            started = time.perf_counter()
            sync_fd(batch.fd)
            self.sync_seconds.append(time.perf_counter() - started)

    def take_delete_jobs(self) -> list[DeleteJob]:
        """LOOP side, before the commit starts: its file deletions, which it then leaves to
        the caller (to run in a thread of their own: removing a large ledger file takes
        milliseconds this commit's receipts need not wait for)."""
        deletes, self._delete_jobs = self._delete_jobs, []
        return deletes

    def _finish_files(self) -> None:
        for directory in self._new_dirs:
            fsync_dir(directory)
        for job in self._index_jobs:
            job.run()
        for delete in self._delete_jobs:
            delete.run()
        self._stage = _Stage.EXECUTED

    def finish(self) -> list[tuple[ManagedLedger, Position]]:
        """LOOP side, after :meth:`execute` returned: make the entries readable.

        Returns each touched managed ledger with its new last confirmed position. Ledgers fenced
        since the commit was taken are left out (their entries stay invisible).
        """
        if self._stage is not _Stage.EXECUTED:
            raise StorageError(f"cannot finish a commit that is {self._stage.value}")
        self._stage = _Stage.DONE
        touched: dict[LedgerOwner, None] = {}
        for batch in self._batches:
            state = batch.state
            state.inflight -= 1
            owner = state.owner
            if not state.dropped and not owner.fenced:
                state.confirmed = batch.first_entry + batch.count
                state.confirmed_end = batch.end
                touched[owner] = None
            self._factory.maybe_release(state)
        return [(ml, ml.refresh_last_confirmed()) for ml in touched]

    def fail(self, exc: BaseException) -> list[ManagedLedger]:
        """LOOP side, after :meth:`execute` raised: fence every ledger of this commit.

        Their entries never become visible; appends raise :class:`LedgerFencedError` until the
        managed ledger is reopened. Returns the fenced managed ledgers.
        """
        if self._stage is _Stage.DONE:
            raise StorageError("commit already finished")
        self._stage = _Stage.DONE
        fenced: dict[LedgerOwner, None] = {}
        for batch in self._batches:
            state = batch.state
            state.inflight -= 1
            state.owner.fence(exc)
            fenced[state.owner] = None
            # whatever reached the file after the last acknowledged entry is not data
            self._factory.cut_on_reopen(state.path, state.confirmed_end)
            self._factory.maybe_release(state)
        return list(fenced)
