"""JetStreamManagedLedger: the ManagedLedger contract with its entries in NATS JetStream.

Appends are buffered on the event loop and written by one writer task per managed ledger:
everything appended while a record is in flight forms the next record (the group commit; at
most ``max_record_bytes`` per record), and one record of the managed ledger is in flight at a
time, so records form the ledger's chain (:mod:`starquake.cluster.js_ledgers`). An entry
becomes visible (``last_confirmed`` advances, the factory's ``committed`` hook fires) only
once JetStream acknowledged its record. A ledger is listed in the stored ledger list (a
compare-and-set at the version this owner read or wrote last) before its first record is
published, so whoever opens the managed ledger next finds and fences it.

Any failure of the writer (the chain refused: another owner fenced the ledger; the ledger
list's version changed: another owner stored it; JetStream did not answer) fences this
instance: appends not yet acknowledged never become visible and later appends raise
:class:`LedgerFencedError` until the managed ledger is opened again, which recovers it from
what JetStream holds (:mod:`starquake.cluster.js_factory`).

Rollover follows the file backend's rules, with one difference: a new ledger's id is taken
from a spare allocated ahead (ids come from JetStream, an append cannot wait), so a rollover
due while no spare is ready happens at a later append.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from starquake.cluster.js_ledgers import (
    FENCE_HEADER,
    JetStreamLedgers,
    LedgerIndex,
    LedgerWriter,
)
from starquake.cluster.js_ml_cursors import JsCursorStore
from starquake.cluster.js_ml_metadata import (
    CompactedInfo,
    ManagedLedgerInfo,
    StoredLedger,
    cursor_path,
    ledger_path,
)
from starquake.cluster.js_ml_reads import JsLedgerReads
from starquake.cluster.js_txn_snapshots import JetStreamSnapshotStore
from starquake.cluster.kv_metadata import BadVersionError, JetStreamMetadataStore
from starquake.storage.config import ManagedLedgerConfig
from starquake.storage.cursor import ManagedCursorImpl
from starquake.storage.position import LedgerFencedError, Position, StorageError
from starquake.storage.segment import HEADER_SIZE
from starquake.storage.state import EntryCache, LedgerState

__all__ = ["JetStreamManagedLedger", "JsLedgerHost"]

log = logging.getLogger(__name__)

_FRAMING = 4  # bytes of each entry's length in a record


class JsLedgerHost(Protocol):
    """What a managed ledger in JetStream needs from its factory."""

    @property
    def config(self) -> ManagedLedgerConfig: ...

    @property
    def cache(self) -> EntryCache: ...

    @property
    def ledgers(self) -> JetStreamLedgers: ...

    @property
    def metadata(self) -> JetStreamMetadataStore: ...

    @property
    def max_record_bytes(self) -> int: ...

    def now(self) -> float:
        """The time, in seconds since the epoch."""
        ...

    def committed(self, ml: JetStreamManagedLedger, last_confirmed: Position) -> None:
        """Entries of ``ml`` up to ``last_confirmed`` became durable and visible."""
        ...

    def failed(self, ml: JetStreamManagedLedger, exc: BaseException) -> None:
        """``ml`` was fenced: its appends not yet durable will never be."""
        ...

    def ledger_closed(self, ml: JetStreamManagedLedger) -> None: ...


class JetStreamManagedLedger(JsCursorStore, JsLedgerReads):
    """A managed ledger whose ledgers are JetStream subjects; open it with
    :meth:`JetStreamLedgerFactory.open`."""

    def __init__(self, host: JsLedgerHost, name: str, directory: Path) -> None:
        self.name = name
        self._js_host = host
        self._directory = directory
        self._ledgers = host.ledgers
        self._metadata = host.metadata
        self.txn_snapshots = JetStreamSnapshotStore(host.metadata, name, lambda: not self._closed)
        """Where the transaction buffer of its topic keeps its snapshot."""
        self._cache = host.cache
        self._clock = host.now
        config = host.config
        self._max_entries = config.max_entries_per_ledger
        self._max_size = config.max_size_per_ledger_bytes
        self._min_roll = config.min_rollover_seconds
        self._max_roll = config.max_rollover_seconds
        self._ids: list[int] = []
        self._states: dict[int, LedgerState] = {}
        self._cur: LedgerState
        self._lc = Position(-1, -1)
        self._indexes: dict[int, LedgerIndex] = {}
        self._writers: dict[int, LedgerWriter] = {}
        self._fenced_ids: set[int] = set()
        self._purge: list[tuple[int, bool]] = []
        self._held: set[int] = set()
        self._fence_first: set[int] = set()
        """Ledgers listed under ``purge`` that must not be purged yet (compacted ledgers
        being written or still read)."""
        self.compacted: CompactedInfo | None = None
        """The committed compacted ledger, stored with the ledger list."""
        self._list_waiters: list[asyncio.Future[None]] = []
        self._listed: set[int] = set()
        self.version = 0
        """Version of the stored ledger list this owner wrote (or read) last."""
        self.spare_id: int | None = None
        self._fenced: BaseException | None = None
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._cursors: dict[str, ManagedCursorImpl] = {}
        self._deleting: list[ManagedCursorImpl] = []
        self._cursor_dirty: dict[str, ManagedCursorImpl | None] = {}
        self._flushing = asyncio.Lock()
        self.cursor_versions: dict[str, int] = {}

    # ------------------------------------------------------------------ lifecycle

    def add_ledger(self, stored: StoredLedger) -> LedgerState:
        """Install a ledger found in (or about to be written to) the ledger list."""
        lid = stored.ledger_id
        state = LedgerState(self, lid, self._directory, stored.created_at)
        state.entries = state.confirmed = state.cache_base = stored.entries
        state.end = state.confirmed_end = HEADER_SIZE + stored.size
        state.sealed = stored.sealed
        self._ids.append(lid)
        self._states[lid] = state
        if stored.index is not None:
            self._indexes[lid] = stored.index
        if stored.fenced:
            self._fenced_ids.add(lid)
        self._listed.add(lid)
        return state

    def start_ledger(self, ledger_id: int, now: float) -> LedgerState:
        """Begin the ledger that receives appends (listed before its first record)."""
        state = LedgerState(self, ledger_id, self._directory, now)
        state.end = state.confirmed_end = HEADER_SIZE
        writer = self._ledgers.writer(ledger_id)
        self._writers[ledger_id] = writer
        self._indexes[ledger_id] = writer.index
        self._ids.append(ledger_id)
        self._states[ledger_id] = state
        self._cur = state
        return state

    def ledger_info(self) -> ManagedLedgerInfo:
        """The ledger list as it is to be stored now."""
        info = ManagedLedgerInfo(purge=list(self._purge), compacted=self.compacted)
        for lid in self._ids:
            state = self._states[lid]
            # a ledger sealed here but not fully written yet is stored open: whoever opens
            # the managed ledger next fences it and finds its entries by scanning
            sealed = state.sealed and state.confirmed == state.entries
            info.ledgers.append(
                StoredLedger(
                    lid,
                    state.confirmed,
                    state.confirmed_end - HEADER_SIZE,
                    state.created_at,
                    sealed,
                    lid in self._fenced_ids,
                    self._indexes.get(lid) if sealed else None,
                )
            )
        return info

    def set_purge(self, purge: list[tuple[int, bool]]) -> None:
        """Trimmed ledgers whose subjects a previous owner may not have purged yet; those
        flagged may have a writer still (fenced ones, compacted ones being written): they are
        fenced before their purge, which keeps the fence."""
        self._purge = list(purge)
        self._fence_first = {lid for lid, fenced in purge if fenced}

    def hold(self, ledger_id: int, *, writing: bool = False) -> None:
        """List ``ledger_id`` for purging (stored with the next ledger list: a crash leaves it
        to the next owner to purge; ``writing``: fenced first, its writer may be alive) but
        do not purge it until :meth:`release`."""
        self._held.add(ledger_id)
        if all(lid != ledger_id for lid, _ in self._purge):
            self._purge.append((ledger_id, writing))

    def unlist(self, ledger_id: int) -> None:
        """Take ``ledger_id`` off the purge list (it became the committed compacted ledger)."""
        self._held.discard(ledger_id)
        self._purge = [item for item in self._purge if item[0] != ledger_id]

    def release(self, ledger_id: int) -> None:
        """Purge a held ledger from now on (a closed instance leaves it listed: whoever
        opens the managed ledger next purges it; its own list write would fence it)."""
        self._held.discard(ledger_id)
        if not self._closed:  # its writer is done: purge it whole
            self._purge = [(lid, f and lid != ledger_id) for lid, f in self._purge]
            self._kick()

    async def store_list_now(self) -> None:
        """Store the ledger list as it is now, through the writer (one list write at a
        time); LedgerFencedError or StorageError when it could not be stored."""
        if self._fenced is not None:
            raise LedgerFencedError(f"managed ledger {self.name} is fenced: {self._fenced!r}")
        if self._closed:
            raise StorageError(f"managed ledger {self.name} is closed")
        waiter = asyncio.get_running_loop().create_future()
        self._list_waiters.append(waiter)
        self._kick()
        await waiter

    def _answer_waiters(self, exc: BaseException | None) -> None:
        waiters, self._list_waiters = self._list_waiters, []
        for waiter in waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(exc)

    def start(self) -> None:
        """Begin background work found at recovery (purging trimmed ledgers)."""
        if self._purge:
            self._kick()

    def _rollover(self, now: float) -> LedgerState:
        assert self.spare_id is not None
        old = self._cur
        state = self.start_ledger(self.spare_id, now)
        self.spare_id = None
        old.sealed = True
        self._kick()  # allocates the next spare
        return state

    def _due(self, state: LedgerState, now: float) -> bool:
        age = now - state.created_at
        full = state.entries >= self._max_entries or state.end >= self._max_size
        return age >= self._max_roll or (full and age >= self._min_roll)

    def maybe_rollover(self) -> bool:
        """Apply the rollover rule now (for a periodic timer); True if a new ledger began."""
        if self._fenced is not None or self._closed or self.spare_id is None:
            return False
        now = self._clock()
        if self._cur.entries and self._due(self._cur, now):
            self._rollover(now)
            return True
        return False

    def roll_over(self) -> bool:
        """Start a new ledger now if the current one has entries and a spare id is ready."""
        if self._fenced is not None or self._closed or self.spare_id is None:
            return False
        if not self._cur.entries:
            return False
        self._rollover(self._clock())
        return True

    @property
    def fenced(self) -> bool:
        """True once the writer failed: appends are refused until the ledger is reopened."""
        return self._fenced is not None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def directory(self) -> Path:
        """A local directory of this managed ledger, created on demand (its data, compacted
        ledgers included, is in JetStream)."""
        self._directory.mkdir(parents=True, exist_ok=True)
        return self._directory

    def close(self) -> None:
        """Stop accepting appends; appends already made are still written."""
        if self._closed:
            return
        self._closed = True
        for cursor in self._cursors.values():
            cursor.close()
        self._js_host.ledger_closed(self)

    def drop(self) -> None:
        """Forget everything in memory and discard appends not written yet (deleted)."""
        self._closed = True
        if self._fenced is None:
            self._fenced = StorageError(f"managed ledger {self.name} was deleted")
        for state in self._states.values():
            state.pending = []
            self._cache.drop(state)
        self._writers.clear()
        self._cursors.clear()
        self._answer_waiters(self._fenced)

    def busy(self) -> bool:
        """True while appends or cursor states of this instance wait to be written."""
        return self._task is not None or bool(self._cursor_dirty)

    async def drain(self) -> None:
        """Wait until every append made so far is written (or the ledger is fenced)."""
        while self._task is not None:
            await asyncio.shield(self._task)

    def fence(self, exc: BaseException) -> None:
        """Refuse further appends and drop the ones not written yet."""
        first = self._fenced is None
        if first:
            self._fenced = exc
            log.warning("managed ledger %s fenced: %s", self.name, exc)
        for state in self._states.values():
            state.pending = []
        self._writers.clear()
        self._answer_waiters(exc)
        if first:
            self._js_host.failed(self, exc)

    # ------------------------------------------------------------------ writing

    def append(self, data: bytes) -> Position:
        """Buffer ``data`` as the next entry and return its position; it becomes visible
        once JetStream acknowledged its record."""
        if self._fenced is not None:
            raise LedgerFencedError(f"managed ledger {self.name} is fenced: {self._fenced!r}")
        if self._closed:
            raise StorageError(f"managed ledger {self.name} is closed")
        if len(data) + _FRAMING > self._js_host.max_record_bytes:
            raise StorageError(f"entry of {len(data)} bytes is larger than a record may be")
        state = self._cur
        if state.entries and self.spare_id is not None:
            now = self._clock()
            if self._due(state, now):
                state = self._rollover(now)
        n = state.entries
        state.entries = n + 1
        state.end += _FRAMING + len(data)
        state.pending.append(data)
        if self._active_count:
            self._cache.add(state, data)
        else:
            self._cache.skip(state)  # no consumer would read it from the cache soon
        self._kick()
        return Position(state.ledger_id, n)

    def append_many(self, datas: Sequence[bytes]) -> list[Position]:
        """:meth:`append` each of ``datas``; none is taken when one cannot be."""
        largest = max(map(len, datas), default=0)
        if largest + _FRAMING > self._js_host.max_record_bytes:
            raise StorageError(f"entry of {largest} bytes is larger than a record may be")
        return [self.append(data) for data in datas]

    def _kick(self) -> None:
        if self._task is None and self._fenced is None:
            self._task = asyncio.get_running_loop().create_task(self._write())

    async def _write(self) -> None:
        """The writer: records in ledger order, one in flight; then spare ids and purges."""
        tried: set[tuple[int, bool]] = set()  # purges tried in this run
        try:
            while self._fenced is None:
                state = next((self._states[i] for i in self._ids if self._states[i].pending), None)
                if self._list_waiters:
                    waiting = len(self._list_waiters)
                    await self.store_ledger_list()
                    done, self._list_waiters = (
                        self._list_waiters[:waiting],
                        self._list_waiters[waiting:],
                    )
                    for waiter in done:
                        if not waiter.done():
                            waiter.set_result(None)
                elif state is not None:
                    if state.ledger_id not in self._listed:
                        await self.store_ledger_list()
                    await self._write_record(state)
                elif self.spare_id is None and not self._closed:
                    if not await self._allocate_spare():
                        break
                elif due := [i for i in self._purge if i[0] not in self._held and i not in tried]:
                    tried.update(due)
                    await self._purge_trimmed()
                else:
                    break
        except StorageError as exc:
            self.fence(exc)
        finally:
            self._task = None

    async def _allocate_spare(self) -> bool:
        try:
            stream = self._ledgers.stream_of(self._ids[-1]) if self._ids else None
            self.spare_id = await self._ledgers.allocate_ledger_id(stream)
        except StorageError as exc:  # appends go on in the current ledger meanwhile
            log.warning("managed ledger %s: no ledger id for a rollover: %s", self.name, exc)
            return False
        return True

    async def _write_record(self, state: LedgerState) -> None:
        taken: list[bytes] = []
        size = 0
        limit = self._js_host.max_record_bytes
        for data in state.pending:
            if taken and size + _FRAMING + len(data) > limit:
                break
            taken.append(data)
            size += _FRAMING + len(data)
        del state.pending[: len(taken)]
        try:
            await self._writers[state.ledger_id].append(taken)
        except LedgerFencedError as exc:
            raise LedgerFencedError(f"{self.name}: {exc} by another owner") from None
        state.confirmed += len(taken)
        state.confirmed_end += size
        if state.sealed and not state.pending:
            self._writers.pop(state.ledger_id, None)
        self._js_host.committed(self, self.refresh_last_confirmed())

    async def store_ledger_list(self) -> None:
        """Store the ledger list at the version this owner holds; a version changed by
        another owner fences this one (LedgerFencedError)."""
        info = self.ledger_info()
        listed = set(self._ids)  # a rollover while the write waits is not in this list
        try:
            self.version = await self._metadata.put(
                ledger_path(self.name), info.encode(), expected_version=self.version
            )
        except BadVersionError:
            raise LedgerFencedError(f"{self.name}: ledger list stored by another owner") from None
        self._listed = listed

    async def _purge_trimmed(self) -> None:
        """Purge trimmed ledgers' subjects, then store the list without them (a failure
        leaves them listed for the next attempt; appends go on)."""
        purge = [item for item in self._purge if item[0] not in self._held]
        try:
            for lid, fenced in purge:
                if lid in self._fence_first:  # a writer elsewhere may still append to it
                    await self._ledgers.publish_record(lid, b"", {FENCE_HEADER: "1"})
                    self._fence_first.discard(lid)
                await self._ledgers.delete(lid, keep_fence=fenced)
        except StorageError as exc:
            log.warning("managed ledger %s: cannot purge trimmed ledgers: %s", self.name, exc)
            return
        self._purge = [item for item in self._purge if item not in purge]
        await self.store_ledger_list()

    # ------------------------------------------------------------------ cursors

    def restore_cursor(self, name: str, cursor: ManagedCursorImpl) -> None:
        self._cursors[name] = cursor

    def cursor_key(self, name: str) -> str:
        return cursor_path(self.name, name)

    def __repr__(self) -> str:
        return f"JetStreamManagedLedger({self.name!r}, last_confirmed={self._lc})"
