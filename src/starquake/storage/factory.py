"""ManagedLedgerFactory: owns the managed ledgers under one base directory.

Layout::

    <base_dir>/<percent-encoded managed ledger name>/<ledgerId>.log   data (see segment.py)
    <base_dir>/<percent-encoded managed ledger name>/<ledgerId>.idx   index of a sealed ledger

Metadata keys::

    /starquake/storage/ledger-id-reserved            ASCII int: ledger ids below it may be in use
    /managed-ledgers/<encoded ml name>/<encoded cursor name>   a durable cursor's state

Ledger ids are global to the factory and never reused: blocks of ``ledger_id_reserve`` ids are
reserved in the metadata store (a synchronous write, once per block), and a restart continues after
the reserved block.

The factory is also where the event loop and the commit thread meet: appends are buffered per ledger
and :meth:`take_pending` hands them over as one :class:`PendingCommit`; durable cursor changes are
collected for :meth:`take_cursor_snapshots`. Both are called on the loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple
from urllib.parse import quote

from .commit import DeleteJob, IndexJob, PendingCommit, WriteBatch
from .config import ManagedLedgerConfig
from .directories import (
    detached_path,
    directory_name,
    leftover_detached,
    stored_names,
    write_name,
)
from .faults import StorageFaults
from .host import StoredCursor
from .ledger import FileManagedLedger
from .ledger_files import LedgerFiles, write_fd_limit
from .metadata import MetadataStore
from .position import LedgerBusyError, Position, StorageError
from .removal import remove_tree
from .segment import encode_file_header, fsync_dir
from .state import EntryCache, LedgerOwner, LedgerState

__all__ = ["ManagedLedgerConfig", "ManagedLedgerFactory", "PreparedLedger"]

_LEDGER_ID_KEY = "/starquake/storage/ledger-id-reserved"


class PreparedLedger(NamedTuple):
    """A managed ledger whose files were scanned off the loop, ready for :meth:`open_prepared`."""

    ledger: FileManagedLedger
    states: list[LedgerState]


class ManagedLedgerFactory:
    """Creates, recovers, lists and deletes managed ledgers under ``base_dir``."""

    def __init__(
        self,
        base_dir: Path,
        metadata: MetadataStore,
        config: ManagedLedgerConfig | None = None,
        clock: Callable[[], float] = time.time,
        faults: StorageFaults | None = None,
    ) -> None:
        self.base_dir = Path(base_dir)
        self.faults = faults
        """Fault-injection hooks for tests (None in production)."""
        self.metadata = metadata
        self.config = config if config is not None else ManagedLedgerConfig()
        if self.config.ledger_id_reserve < 1:
            raise ValueError("ledger_id_reserve must be at least 1")
        self.clock = clock
        self.cache = EntryCache(self.config.cache_max_bytes, self.config.cache_eviction_watermark)
        self.dirty_states: dict[LedgerState, None] = {}
        self.cursor_dirty: dict[str, StoredCursor | None] = {}
        self._cursor_retry: dict[str, bytes | None] = {}
        self._cursor_inflight: dict[str, bytes | None] = {}
        # the mark-delete position each taken state stores, to tell its cursor once written
        self._taken_marks: dict[str, tuple[bytes, StoredCursor, Position]] = {}
        self._index_jobs: list[IndexJob] = []
        self._delete_jobs: list[DeleteJob] = []
        self._cuts: dict[Path, int] = {}
        self._open: dict[str, FileManagedLedger] = {}
        self._closing: dict[str, LedgerOwner] = {}
        self.files = LedgerFiles(write_fd_limit(self.config.max_open_write_files))
        """The ledger files' open descriptors."""
        self._closed = False
        if not self.base_dir.exists():
            self.base_dir.mkdir(parents=True)
            fsync_dir(self.base_dir.parent)
        for detached in leftover_detached(self.base_dir):  # deletions a crash interrupted
            self.remove_detached(detached)
        raw = metadata.get(_LEDGER_ID_KEY)
        self._next_id = int(raw) if raw is not None else 0
        self._reserved_until = self._next_id

    # ------------------------------------------------------------------ ledger ids

    def allocate_ledger_id(self) -> int:
        """A new global ledger id (reserving a block in the metadata store when needed)."""
        if self._next_id >= self._reserved_until:
            until = self._next_id + self.config.ledger_id_reserve
            self.metadata.put(_LEDGER_ID_KEY, str(until).encode())
            self._reserved_until = until
        ledger_id = self._next_id
        self._next_id += 1
        return ledger_id

    def ensure_ledger_ids_above(self, ledger_id: int) -> None:
        """Never hand out ``ledger_id`` or a smaller id (found on disk)."""
        if self._next_id <= ledger_id:
            self._next_id = ledger_id + 1

    # ------------------------------------------------------------------ managed ledgers

    def _directory(self, name: str) -> Path:
        if not name or name in (".", ".."):
            raise StorageError(f"invalid managed ledger name {name!r}")
        return self.base_dir / directory_name(name)

    def _make_directory(self, name: str) -> Path:
        """The ledger's directory, created (durably, with its full name beside a hashed one)."""
        directory = self._directory(name)
        if not directory.exists():
            try:
                directory.mkdir()
                write_name(directory, name)
                fsync_dir(self.base_dir)
            except OSError as exc:
                raise StorageError(f"cannot create the directory of {name}: {exc}") from exc
        return directory

    def open(self, name: str) -> FileManagedLedger:
        """Open (creating or recovering) the managed ledger ``name``.

        Returns the same instance on repeated calls until it is closed or deleted. Reopening a
        fenced ledger recovers it from disk. Raises :class:`LedgerBusyError` while a closed or
        fenced instance of the same name still has writes in flight (retry after the commit).
        """
        if self._closed:
            raise StorageError("factory is closed")
        ml = self._open.get(name)
        if ml is not None:
            if not ml.fenced:
                return ml
            ml.close()
        previous = self._closing.get(name)
        if previous is not None:
            if previous.busy():
                raise LedgerBusyError(f"managed ledger {name} still has writes in flight")
            del self._closing[name]
        directory = self._make_directory(name)
        ml = FileManagedLedger(self, name, directory)
        ml.recover(ml.scan(self.take_cuts(directory)))
        self._open[name] = ml
        return ml

    def check_openable(self, name: str) -> FileManagedLedger | None:
        """LOOP side: the open instance of ``name`` if any; raises while it cannot be reopened."""
        if self._closed:
            raise StorageError("factory is closed")
        ml = self._open.get(name)
        if ml is not None and not ml.fenced:
            return ml
        previous = self._closing.get(name)
        if previous is not None and previous.busy():
            raise LedgerBusyError(f"managed ledger {name} still has writes in flight")
        return None

    def prepare(self, name: str, cuts: dict[Path, int] | None = None) -> PreparedLedger:
        """THREAD side: create the ledger's directory, or scan and repair its files.

        Touches only that directory, so it can run off the event loop while other ledgers keep
        appending; finish with :meth:`open_prepared` on the loop. ``cuts`` are what
        :meth:`take_cuts_for` returned on the loop.
        """
        directory = self._make_directory(name)
        ml = FileManagedLedger(self, name, directory)
        return PreparedLedger(ml, ml.scan(cuts))

    def open_prepared(self, prepared: PreparedLedger) -> FileManagedLedger:
        """LOOP side: register a ledger prepared by :meth:`prepare` (or return one opened since)."""
        name = prepared.ledger.name
        existing = self.check_openable(name)
        if existing is not None:
            return existing
        stale = self._open.pop(name, None)
        if stale is not None:
            stale.close()
        self._closing.pop(name, None)
        ml = prepared.ledger
        ml.recover(prepared.states)
        self._open[name] = ml
        return ml

    def exists(self, name: str) -> bool:
        """True if the managed ledger is open or present on disk."""
        return name in self._open or self._directory(name).is_dir()

    def list_names(self) -> list[str]:
        """Names of the managed ledgers present on disk (sorted)."""
        return stored_names(self.base_dir)

    def delete(self, name: str) -> None:
        """Delete a managed ledger: its data files and its durable cursors' state (blocking:
        :meth:`detach` then :meth:`remove_detached`)."""
        detached = self.detach(name)
        if detached is not None:
            self.remove_detached(detached)

    def detach(self, name: str) -> Path | None:
        """LOOP side: forget managed ledger ``name`` and its durable cursors' state, and move
        its directory aside (a rename: the name is free at once). Returns where the directory
        went, for :meth:`remove_detached` to remove off the event loop (removing gigabytes of
        files takes a fraction of a second), or None if it had none. A directory moved aside
        that a crash left behind is removed when the factory is next created."""
        for registry in (self._open, self._closing):
            ml = registry.pop(name, None)
            if ml is not None:
                ml.drop()
        prefix = "/managed-ledgers/" + quote(name, safe="")
        for pending in (self.cursor_dirty, self._cursor_retry, self._cursor_inflight):
            for key in [k for k in pending if k.startswith(prefix + "/")]:
                del pending[key]
        children = self.metadata.list_children(prefix)
        if children:
            self.metadata.put_many([(f"{prefix}/{c}", None) for c in children])
        detached = detached_path(self.base_dir)
        try:
            os.rename(self._directory(name), detached)
        except FileNotFoundError:
            return None
        return detached

    def remove_detached(self, detached: Path) -> None:
        """THREAD side (or blocking): remove a directory :meth:`detach` moved aside, durably."""
        remove_tree(detached, self.base_dir)

    def ledger_closed(self, ml: LedgerOwner) -> None:
        """Called by :meth:`FileManagedLedger.close`."""
        if self._open.get(ml.name) is ml:
            del self._open[ml.name]
        if ml.busy():
            self._closing[ml.name] = ml

    # ------------------------------------------------------------------ group commit

    def take_pending(self) -> PendingCommit | None:
        """LOOP side: hand over the appends not yet in a commit (None if there is nothing).

        A ledger whose file is not open (new, or closed while idle) is opened here, and only
        while that keeps the write files within ``max_open_write_files``: past it, its appends
        wait for the next commit (the files of this one are idle again after it). The first
        ledger of a commit is always taken, so every commit makes progress.
        """
        dirty = self.dirty_states
        self.files.trim()
        if not dirty and not self._index_jobs and not self._delete_jobs:
            return None
        batches: list[WriteBatch] = []
        new_dirs: list[Path] = []
        taken: list[LedgerState] = []
        open_error: StorageError | None = None
        budget = self.config.commit_max_bytes or -1  # -1: no limit
        for state in dirty:
            if budget == 0:
                break  # the next commit takes the rest
            if state.pending and state.fd < 0 and not (state.dropped or state.owner.fenced):
                if batches and not self.files.make_room():
                    continue  # the next commit takes it
                try:
                    self.files.reopen(state)
                except StorageError as exc:
                    open_error = open_error or exc  # the commit fails: its ledgers fenced
            taken.append(state)
            batch = self._batch_of(state, budget)
            if batch is None:
                continue
            batches.append(batch)
            if budget > 0:
                budget = max(0, budget - (batch.end - batch.offset))
            if state.new_file:
                state.new_file = False
                if state.directory not in new_dirs:
                    new_dirs.append(state.directory)
        for state in taken:
            del dirty[state]
            if state.pending:  # partly taken: its turn comes again after the others'
                dirty[state] = None
        jobs = [j for j in self._index_jobs if not j.state.dropped]
        self._index_jobs = []
        deletes, self._delete_jobs = self._delete_jobs, []
        if not batches and not jobs and not deletes:
            return None
        return PendingCommit(self, batches, new_dirs, jobs, deletes, open_error)

    def _batch_of(self, state: LedgerState, budget: int) -> WriteBatch | None:
        """The write of ``state``'s pending appends (None: nothing to write): those that fit
        in ``budget`` bytes (-1: all), all of them when the ledger is sealed (its bytes must be
        synced before those of the ledger after it)."""
        datas = state.pending
        if not datas:
            return None
        state.pending = []
        if state.dropped or state.owner.fenced:
            state.pending_offset = state.end
            state.pending_first = state.entries
            self.maybe_release(state)
            return None
        if budget >= 0 and not state.sealed:
            count = state.pending_within(budget)
            if count < len(datas):
                datas, state.pending = datas[:count], datas[count:]
        self.files.written(state)
        header = None
        offset = state.pending_offset
        if state.header_pending:
            header = encode_file_header(state.ledger_id)
            offset = 0
            state.header_pending = False
        first = state.pending_first
        end = state.record_end(first + len(datas) - 1)
        batch = WriteBatch(state, state.fd, offset, datas, header, first, end, state.sealed)
        state.pending_offset = end
        state.pending_first = first + len(datas)
        state.inflight += 1
        return batch

    def cut_on_reopen(self, path: Path, size: int) -> None:
        """LOOP side: a failed commit may have left bytes past ``size`` in ``path``; the next
        recovery of its managed ledger cuts them off (into quarantine) before scanning."""
        previous = self._cuts.get(path)
        self._cuts[path] = size if previous is None else min(previous, size)

    def take_cuts(self, directory: Path) -> dict[Path, int]:
        """LOOP side: the pending cuts of files in ``directory`` (see :meth:`cut_on_reopen`)."""
        return {p: self._cuts.pop(p) for p in [p for p in self._cuts if p.parent == directory]}

    def take_cuts_for(self, name: str) -> dict[Path, int]:
        """LOOP side: the pending cuts of managed ledger ``name``, to pass to :meth:`prepare`."""
        return self.take_cuts(self._directory(name))

    def queue_deletion(self, directory: Path, paths: list[Path]) -> None:
        """Have the next commit delete ``paths`` and fsync ``directory`` (off the event loop)."""
        self._delete_jobs.append(DeleteJob(directory, paths))

    def queue_index(self, state: LedgerState) -> None:
        """Have the next commit write the index file of a sealed, fully written ledger."""
        state.index_done = True
        self._index_jobs.append(IndexJob(state))

    def maybe_release(self, state: LedgerState) -> None:
        """Close a ledger's write fd once nothing more will be written through it."""
        if state.fd < 0 or state.inflight or state.pending:
            return
        owner = state.owner
        if not (state.sealed or owner.closed or state.dropped):
            return
        os.close(state.fd)
        state.fd = -1
        self.files.released(state)
        if (
            not state.dropped
            and not owner.fenced
            and state.entries
            and state.confirmed == state.entries
            and not state.index_done
        ):
            self.queue_index(state)

    def read_fd(self, state: LedgerState) -> int:
        """A descriptor to pread ``state``'s file (its write fd, or a cached read-only one)."""
        return self.files.read_fd(state)

    def forget_state(self, state: LedgerState) -> None:
        """Drop a ledger's cached entries and read fd (ledger trimmed, closed or deleted)."""
        self.cache.drop(state)
        self.files.forget(state)

    # ------------------------------------------------------------------ cursors

    def take_cursor_snapshots(self) -> list[tuple[str, bytes | None]]:
        """LOOP side: ``(metadata key, state or None = delete)`` of each durable cursor changed
        since the last call, plus the snapshots of failed writes; write them with
        ``metadata.put_many`` (from a worker thread), then report the outcome with
        :meth:`cursor_snapshots_written` or :meth:`cursor_snapshots_failed`.

        Until then the taken states count as unsaved: a managed ledger reopened meanwhile
        restores its cursors from them rather than from the (older) stored states.
        """
        taken = dict(self._cursor_retry)
        self._cursor_retry = {}
        for key, cursor in self.cursor_dirty.items():
            if cursor is None:
                taken[key] = None
                self._taken_marks.pop(key, None)
            else:
                value = taken[key] = cursor.serialize()
                self._taken_marks[key] = (value, cursor, cursor.mark_delete_position)
        self.cursor_dirty = {}
        self._cursor_inflight.update(taken)
        return list(taken.items())

    def cursor_snapshots_written(self, items: list[tuple[str, bytes | None]]) -> None:
        """LOOP side: the snapshots of :meth:`take_cursor_snapshots` are stored."""
        inflight = self._cursor_inflight
        marks = self._taken_marks
        for key, value in items:
            if key in inflight and inflight[key] is value:
                del inflight[key]
            mark = marks.get(key)
            if mark is not None and mark[0] is value:
                del marks[key]
                mark[1].stored_mark_delete = mark[2]

    def cursor_snapshots_failed(self, items: list[tuple[str, bytes | None]]) -> None:
        """LOOP side: storing the snapshots failed; the next take writes them again (unless a
        newer state of the same cursor is waiting already)."""
        inflight = self._cursor_inflight
        for key, value in items:
            if key in inflight and inflight[key] is value:
                del inflight[key]
            if key not in self.cursor_dirty:
                self._cursor_retry[key] = value

    def unsaved_cursor_state(self, key: str) -> tuple[bool, bytes | None]:
        """``(True, state or None = deleted)`` if a newer state of a durable cursor than the
        stored one is waiting or being written; ``(False, None)`` otherwise."""
        if key in self.cursor_dirty:
            cursor = self.cursor_dirty[key]
            return True, cursor.serialize() if cursor is not None else None
        for pending in (self._cursor_retry, self._cursor_inflight):
            if key in pending:
                return True, pending[key]
        return False, None

    def is_unsaved(self, key: str) -> bool:
        """True while a change of the durable cursor ``key`` is waiting or being written."""
        return key in self.cursor_dirty or key in self._cursor_retry or key in self._cursor_inflight

    def unsaved_cursor_keys(self, prefix: str) -> set[str]:
        """Keys below ``prefix`` whose state is not stored yet (:meth:`unsaved_cursor_state`)."""
        base = prefix + "/"
        keys: set[str] = set()
        for pending in (self.cursor_dirty, self._cursor_retry, self._cursor_inflight):
            keys.update(k for k in pending if k.startswith(base) and "/" not in k[len(base) :])
        return keys

    # ------------------------------------------------------------------ shutdown

    def close(self) -> None:
        """Clean shutdown: commit and fsync everything pending, persist cursors, close files.

        Blocking; call it when no commit is executing in another thread.
        """
        if self._closed:
            return
        for ml in list(self._open.values()):
            ml.close()
        # the data (in commits of at most commit_max_bytes), then the index files queued when
        # the data files were released
        while (commit := self.take_pending()) is not None:
            try:
                commit.execute()
            except BaseException as exc:
                commit.fail(exc)
                raise
            commit.finish()
        snapshots = self.take_cursor_snapshots()
        if snapshots:
            self.metadata.put_many(snapshots)
            self.cursor_snapshots_written(snapshots)
        self.files.close_reads()
        self._closing.clear()
        self._closed = True
