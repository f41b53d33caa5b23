"""Compacted ledgers in JetStream (cluster mode): any owner of a topic reads the same view.

A compacted ledger is a ledger of the cluster's JetStream ledgers (own id from the same
allocator, own subject, replicated like the topic's ledgers, records chained as any ledger's,
:mod:`starquake.cluster.js_ledgers`). Each entry is stored with its original position before
its bytes (ledger id, entry id: two big-endian signed 64-bit integers). As Pulsar keeps a
compacted ledger in BookKeeper and its id with the ``__compaction`` cursor, the committed one
is recorded in its managed ledger's stored ledger list (``c``,
:mod:`starquake.cluster.js_ml_metadata`), written by the owner alone by compare-and-set: its
id, horizon, size and, per record, the record's stream sequence and first original position,
so that a new owner opens it with no scan and finds a position with one record read.

Crash safety through the ledger list's ``purge`` list: a new compacted ledger is listed there
(held: not purged by this owner) before its first record; the commit takes it off and lists
the previous one instead, in the same write; the previous one is purged once the new view is
served (:meth:`JetStreamCompactedLedgers.delete`). Whatever a crash or a lost ownership leaves
listed is purged by the next owner when it opens the managed ledger, and deleting the managed
ledger deletes its compacted ledger with its other ledgers.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Sequence

from starquake.cluster.js_ledgers import JetStreamLedgers, LedgerIndex, LedgerWriter
from starquake.cluster.js_managed_ledger import JetStreamManagedLedger
from starquake.cluster.js_ml_metadata import CompactedInfo
from starquake.storage import ManagedLedger, Position, StorageError
from starquake.storage.compacted import CompactedRecord
from starquake.storage.compacted_store import CompactedLedgerReader

__all__ = ["JetStreamCompactedBuilder", "JetStreamCompactedLedgers", "JetStreamCompactedReader"]

_KEY = struct.Struct(">qq")
_FRAMING = 4  # bytes of an entry's length in a record
_CACHED_RECORDS = 4


def _owned(ledger: ManagedLedger) -> JetStreamManagedLedger:
    if not isinstance(ledger, JetStreamManagedLedger):
        raise StorageError(f"{ledger.name} is not a managed ledger in JetStream")
    return ledger


class JetStreamCompactedReader:
    """A committed (or just finished) compacted ledger in JetStream; reads fetch whole
    records, the last few decoded ones kept."""

    def __init__(self, ledgers: JetStreamLedgers, info: CompactedInfo) -> None:
        self._ledgers = ledgers
        self.info = info
        self._starts = [position for _, _, position in info.records]
        self._index = LedgerIndex(
            firsts=[first for first, _, _ in info.records],
            sequences=[sequence for _, sequence, _ in info.records],
            entries=info.entries,
        )
        self._cache: dict[int, list[CompactedRecord]] = {}

    @property
    def ledger_id(self) -> int:
        return self.info.ledger_id

    @property
    def horizon(self) -> Position:
        return self.info.horizon

    @property
    def entries(self) -> int:
        return self.info.entries

    @property
    def size(self) -> int:
        return self.info.size

    @property
    def last(self) -> Position | None:
        return self.info.last

    async def read_from(self, position: Position, max_entries: int) -> list[CompactedRecord]:
        """From the record whose first position is the last at or before ``position``."""
        out: list[CompactedRecord] = []
        number = max(bisect.bisect_right(self._starts, position) - 1, 0)
        while number < len(self._starts) and len(out) < max_entries:
            for record in await self._record(number):
                if record.position >= position:
                    out.append(record)
                    if len(out) >= max_entries:
                        break
            number += 1
        return out

    async def _record(self, number: int) -> list[CompactedRecord]:
        cached = self._cache.get(number)
        if cached is not None:
            return cached
        firsts = self._index.firsts
        end = firsts[number + 1] if number + 1 < len(firsts) else self.info.entries
        fetched = await self._ledgers.read(
            self.ledger_id, self._index, firsts[number], end - firsts[number]
        )
        records = []
        for _, data in fetched:
            if len(data) < _KEY.size:
                raise StorageError(f"compacted ledger {self.ledger_id}: an entry is too short")
            ledger_id, entry_id = _KEY.unpack_from(data)
            records.append(
                CompactedRecord(Position(ledger_id, entry_id), memoryview(data)[_KEY.size :])
            )
        if len(self._cache) >= _CACHED_RECORDS:
            self._cache.pop(next(iter(self._cache)))
        self._cache[number] = records
        return records

    async def reopen(self) -> JetStreamCompactedReader:
        return JetStreamCompactedReader(self._ledgers, self.info)

    def close(self) -> None:
        self._cache.clear()

    def __repr__(self) -> str:
        info = self.info
        return (
            f"JetStreamCompactedReader({info.ledger_id}, entries={info.entries}, "
            f"horizon={info.horizon})"
        )


class JetStreamCompactedBuilder:
    """Writes a new compacted ledger: entries gathered into records of at most
    ``max_record_bytes``, each appended once JetStream stored the one before."""

    def __init__(
        self, ledgers: JetStreamLedgers, ml: JetStreamManagedLedger, ledger_id: int, limit: int
    ) -> None:
        self._ledgers = ledgers
        self._ml = ml
        self._writer: LedgerWriter = ledgers.writer(ledger_id)
        self._limit = limit
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._pending_start: Position | None = None
        self._records: list[tuple[int, int, Position]] = []
        self._size = 0
        self._last: Position | None = None

    @property
    def ledger_id(self) -> int:
        return self._writer.ledger_id

    async def append(self, items: Sequence[tuple[Position, bytes | memoryview]]) -> None:
        for position, data in items:
            if self._last is not None and position <= self._last:
                raise StorageError(f"compacted entries out of order: {position} after {self._last}")
            entry = _KEY.pack(position.ledger_id, position.entry_id) + bytes(data)
            if self._pending and self._pending_bytes + _FRAMING + len(entry) > self._limit:
                await self._flush()
            if not self._pending:
                self._pending_start = position
            self._pending.append(entry)
            self._pending_bytes += _FRAMING + len(entry)
            self._size += len(data)
            self._last = position

    async def _flush(self) -> None:
        assert self._pending_start is not None
        first, _ = await self._writer.append(self._pending)
        self._records.append((first, self._writer.index.last_sequence, self._pending_start))
        self._pending, self._pending_bytes, self._pending_start = [], 0, None

    async def finish(self, horizon: Position) -> JetStreamCompactedReader:
        if self._pending:
            await self._flush()
        info = CompactedInfo(
            self.ledger_id,
            horizon,
            self._writer.index.entries,
            self._size,
            self._last,
            tuple(self._records),
        )
        return JetStreamCompactedReader(self._ledgers, info)

    async def abort(self) -> None:
        self._writer.fenced = True  # nothing more from this builder
        self._ml.release(self.ledger_id)  # listed for purging since its creation


class JetStreamCompactedLedgers:
    """The compacted ledgers of a broker's managed ledgers in JetStream (see the module
    docstring)."""

    def __init__(self, ledgers: JetStreamLedgers, max_record_bytes: int) -> None:
        self._ledgers = ledgers
        self._limit = max_record_bytes

    async def create(self, ledger: ManagedLedger) -> JetStreamCompactedBuilder:
        """A new ledger, listed for purging in the stored ledger list before it is written."""
        ml = _owned(ledger)
        ledger_id = await self._ledgers.allocate_ledger_id()
        ml.hold(ledger_id, writing=True)
        await ml.store_list_now()
        return JetStreamCompactedBuilder(self._ledgers, ml, ledger_id, self._limit)

    async def open_committed(self, ledger: ManagedLedger) -> JetStreamCompactedReader | None:
        """The compacted ledger the ledger list names (read when the managed ledger was
        opened: no request)."""
        info = _owned(ledger).compacted
        return JetStreamCompactedReader(self._ledgers, info) if info is not None else None

    async def commit(self, ledger: ManagedLedger, compacted: CompactedLedgerReader) -> None:
        """Name ``compacted`` in the ledger list and list the previous one for purging, in
        one compare-and-set write."""
        ml = _owned(ledger)
        if not isinstance(compacted, JetStreamCompactedReader):
            raise StorageError(f"{compacted!r} is not a compacted ledger in JetStream")
        if ml.fenced or ml.closed:
            raise StorageError(f"managed ledger {ml.name} is no longer written here")
        previous = ml.compacted
        ml.unlist(compacted.ledger_id)
        if previous is not None:
            ml.hold(previous.ledger_id)
        ml.compacted = compacted.info
        await ml.store_list_now()

    async def delete(self, ledger: ManagedLedger, compacted: CompactedLedgerReader) -> None:
        """Purge a replaced (or uncommitted) compacted ledger: listed for purging already,
        its records go with the owner's next purge."""
        compacted.close()
        ml = _owned(ledger)
        if ml.compacted is not None and ml.compacted.ledger_id == compacted.ledger_id:
            return  # the committed one (a commit whose answer was lost but stored)
        ml.release(compacted.ledger_id)

    async def forget(self, name: str) -> None:
        """Nothing: deleting the managed ledger deletes the compacted ledger it names."""
