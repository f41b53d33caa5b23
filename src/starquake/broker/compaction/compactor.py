"""One compaction of one topic: the previous compacted view plus the log after it, into a new
compacted ledger.

Inputs: the previous view (if any) and the managed ledger from the entry after the previous
horizon up to its last confirmed entry when the compaction starts, the new horizon. Producers
go on appending meanwhile; what they add lies after the horizon and is left for the next
compaction.

Two passes, as Pulsar's two-phase compactor: the first finds the latest message of each key
(keeping only message ids in memory), the second copies the kept entries into the new file,
rebuilding batches that lose some of their messages. Entries of the managed ledger are read on
the event loop in bounded chunks (its reads are fast and not thread-safe); parsing, rewriting
and writing happen in a worker thread, one chunk at a time, so the loop is never held long.

Commit: the new file is written completely and fsynced, then the metadata key
``/compaction/<ledger name>`` is written (from a worker thread) to name it; only then is the new
view served, the ``__compaction`` cursor's mark-delete position moved to the horizon (it holds
back the trimming of ledgers the compaction has not passed yet) and the previous file deleted.
A crash before the metadata write leaves an unreferenced file, removed when the topic is next
loaded; after it, the new view is the one loaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import quote

from starquake.broker.compaction.entries import entry_facts, rebuild_batch
from starquake.broker.compaction.selection import (
    DROP,
    LatestPerKey,
    Selection,
    plan_entry,
)
from starquake.broker.compaction.view import CompactedView
from starquake.broker.subscription import Subscription
from starquake.storage import Entry, ManagedCursor, Position, StorageError
from starquake.storage.compacted import (
    CompactedLedger,
    CompactedLedgerWriter,
    compacted_file_name,
    open_compacted_ledger,
)
from starquake.storage.segment import fsync_dir

if TYPE_CHECKING:
    from starquake.broker.contexts import StorageContext
    from starquake.broker.topic import PersistentTopic

__all__ = [
    "COMPACTION_CURSOR",
    "CompactionError",
    "CompactionRecord",
    "Compactor",
    "compaction_cursor",
    "metadata_key",
]

log = logging.getLogger(__name__)

COMPACTION_CURSOR = "__compaction"
"""The durable cursor that marks the compaction horizon (Pulsar's compaction subscription)."""

METADATA_PREFIX = "/compaction/"
CHUNK_ENTRIES = 1000
CHUNK_BYTES = 4 * 1024 * 1024


def compaction_cursor(topic: PersistentTopic) -> ManagedCursor:
    """The topic's ``__compaction`` cursor (and subscription), created at the earliest
    position if it does not exist yet."""
    cursor = topic.ledger.cursors.get(COMPACTION_CURSOR)
    if cursor is None:
        cursor = topic.ledger.open_cursor(COMPACTION_CURSOR, "earliest")
        topic.subscriptions[COMPACTION_CURSOR] = Subscription(
            topic, COMPACTION_CURSOR, cursor, durable=True
        )
    return cursor


class CompactionError(Exception):
    """A compaction that could not complete; the previous view stays."""


def metadata_key(ledger_name: str) -> str:
    """The metadata key naming the committed compacted ledger of a managed ledger."""
    return METADATA_PREFIX + quote(ledger_name, safe="")


class CompactionRecord(NamedTuple):
    """What the metadata key stores: the compacted ledger, its horizon and its file."""

    ledger_id: int
    horizon: Position
    file: str

    def encode(self) -> bytes:
        """The record as stored in the metadata store (compact JSON)."""
        doc = {"ledgerId": self.ledger_id, "horizon": list(self.horizon), "file": self.file}
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> CompactionRecord:
        """The record stored as ``raw`` (ValueError if it is not one)."""
        try:
            doc = json.loads(raw)
            horizon = Position(int(doc["horizon"][0]), int(doc["horizon"][1]))
            return cls(int(doc["ledgerId"]), horizon, str(doc["file"]))
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise CompactionError(f"damaged compaction record: {exc}") from exc


class _Outcome(NamedTuple):
    """Entries and messages written to a compacted ledger."""

    entries: int
    messages: int


class _Read(NamedTuple):
    """What phase one read: entries of the previous view, of the log, and the log's last."""

    old_entries: int
    live_entries: int
    last_live: Position | None


class Compactor:
    """Compacts ``topic`` once (:meth:`run`); ``should_stop`` aborts it before it commits."""

    def __init__(
        self, service: StorageContext, topic: PersistentTopic, should_stop: Callable[[], bool]
    ) -> None:
        self.service = service
        self.topic = topic
        self.should_stop = should_stop
        self.removed = 0
        """Messages the last run left out of the view (replaced, deleted or without a key)."""

    def _check(self) -> None:
        if self.should_stop():
            raise CompactionError(f"compaction of {self.topic.full_name} was stopped")

    async def run(self) -> CompactedView | None:
        """Compact; the new view (already installed), or None when there was nothing to do."""
        topic = self.topic
        ledger = topic.ledger
        state = topic.compaction
        horizon = ledger.last_confirmed
        if topic.txn is not None:  # as a consumer: not past the first open transaction
            horizon = topic.txn.last_visible(horizon)
        previous = state.view
        if previous is not None and horizon <= previous.horizon:
            return None  # nothing was added since the last compaction
        first = ledger.first_position()
        if previous is None and (first is None or horizon < first):
            return None  # an empty topic (or nothing a consumer may see yet)
        cursor = compaction_cursor(self.topic)
        if previous is not None:
            start = ledger.next_position(previous.horizon)
            old: tuple[Path, int] | None = (previous.ledger.path, previous.ledger_id)
        else:
            start = ledger.position_before_first()
            old = None
        latest = LatestPerKey(self.service.config.topicCompactionRetainNullKey)
        read = await self._phase_one(old, start, horizon, latest)
        new_ledger, kept = await self._phase_two(old, start, horizon, latest.result(), read)
        await self._commit(new_ledger, horizon)
        # committed: the new view is the topic's from here on, even if what follows fails
        view = CompactedView(new_ledger)
        self.removed = max(latest.messages - kept.messages, 0)
        if state.closed:
            view.close()  # the topic was unloaded meanwhile: its next load opens the new file
        else:
            state.install(view)
            if horizon > cursor.mark_delete_position:
                cursor.mark_delete(horizon)
        if old is not None:
            await asyncio.to_thread(_remove, old[0])
        log.info(
            "compacted %s up to %s: %d entries (%d messages of %d) in compacted ledger %d",
            topic.full_name,
            horizon,
            kept.entries,
            kept.messages,
            latest.messages,
            new_ledger.ledger_id,
        )
        return view

    async def _phase_one(
        self, old: tuple[Path, int] | None, start: Position, horizon: Position, latest: LatestPerKey
    ) -> _Read:
        """Feed every message of the previous view and of the log up to ``horizon`` to
        ``latest``; what was read (phase two checks it reads the same)."""
        old_entries = await asyncio.to_thread(self._scan_old, old, latest) if old else 0
        count = 0
        last: Position | None = None
        async for chunk in self._live(start, horizon):
            await asyncio.to_thread(_add_chunk, latest, chunk)
            count += len(chunk)
            last = chunk[-1].position
        return _Read(old_entries, count, last)

    async def _phase_two(
        self,
        old: tuple[Path, int] | None,
        start: Position,
        horizon: Position,
        selection: Selection,
        expected: _Read,
    ) -> tuple[CompactedLedger, _Outcome]:
        """Write what ``selection`` keeps into a new compacted ledger, finished and reopened;
        an unfinished file is removed."""
        ledger_id = await self.service.storage.allocate_ledger_id()
        path = self.topic.ledger.directory / compacted_file_name(ledger_id)
        writer = await asyncio.to_thread(CompactedLedgerWriter, path, ledger_id)
        try:
            kept = _Outcome(0, 0)
            if old is not None:
                kept = await asyncio.to_thread(
                    self._copy_old, old, selection, writer, expected.old_entries
                )
            count = 0
            last: Position | None = None
            async for chunk in self._live(start, horizon):
                outcome = await asyncio.to_thread(_copy_chunk, chunk, selection, writer)
                kept = _Outcome(kept.entries + outcome.entries, kept.messages + outcome.messages)
                count += len(chunk)
                last = chunk[-1].position
            if (count, last) != (expected.live_entries, expected.last_live):
                raise CompactionError(
                    f"the log of {self.topic.full_name} changed during its compaction "
                    f"({expected.live_entries} entries read, then {count}): ledgers were trimmed"
                )
            await asyncio.to_thread(writer.finish, horizon)
            return await asyncio.to_thread(open_compacted_ledger, path, ledger_id), kept
        except BaseException:
            await asyncio.to_thread(writer.abort)
            raise

    async def _commit(self, compacted: CompactedLedger, horizon: Position) -> None:
        """Store the record naming ``compacted`` (the commit point); on failure the file goes."""
        key = metadata_key(self.topic.ledger.name)
        record = CompactionRecord(compacted.ledger_id, horizon, compacted.path.name).encode()
        store = self.service.metadata

        def write() -> None:
            try:
                store.put(key, record)
            except Exception:
                if store.get(key) != record:  # not stored after all
                    raise

        try:
            self._check()
            await asyncio.to_thread(write)
        except BaseException:
            compacted.close()
            await asyncio.to_thread(_remove, compacted.path)
            raise

    async def _live(self, start: Position, horizon: Position) -> AsyncIterator[list[Entry]]:
        """The managed ledger's entries from ``start`` to ``horizon``, in chunks (read on the
        event loop)."""
        ledger = self.topic.ledger
        hidden = self.topic.txn.hidden if self.topic.txn is not None else set()
        position = start
        while True:
            self._check()
            try:
                chunk = await ledger.read_entries(position, CHUNK_ENTRIES, CHUNK_BYTES)
            except StorageError as exc:
                raise CompactionError(f"cannot read {self.topic.full_name}: {exc}") from exc
            chunk = [entry for entry in chunk if entry.position <= horizon]
            if not chunk:
                return
            last = chunk[-1].position
            if hidden:  # aborted messages and transaction markers stay out of the view
                chunk = [entry for entry in chunk if entry.position not in hidden]
            if chunk:
                yield chunk
            if last >= horizon:
                return
            position = ledger.next_position(last)

    # --- worker-thread side -------------------------------------------------------------------

    def _scan_old(self, old: tuple[Path, int], latest: LatestPerKey) -> int:
        ledger = open_compacted_ledger(*old)
        try:
            total = len(ledger)
            for first in range(0, total, CHUNK_ENTRIES):
                self._check()
                records = ledger.read(first, CHUNK_ENTRIES)
                latest.add_entries(
                    entry_facts(r.position, r.data) for r in records if r.data is not None
                )
            return total
        finally:
            ledger.close()

    def _copy_old(
        self,
        old: tuple[Path, int],
        selection: Selection,
        writer: CompactedLedgerWriter,
        expected: int,
    ) -> _Outcome:
        ledger = open_compacted_ledger(*old)
        try:
            if len(ledger) != expected:
                raise CompactionError(f"compacted ledger {old[0]} changed during compaction")
            entries = messages = 0
            for first in range(0, len(ledger), CHUNK_ENTRIES):
                self._check()
                chunk = [
                    Entry(r.position, r.data)
                    for r in ledger.read(first, CHUNK_ENTRIES)
                    if r.data is not None
                ]
                outcome = _copy_chunk(chunk, selection, writer)
                entries += outcome.entries
                messages += outcome.messages
            return _Outcome(entries, messages)
        finally:
            ledger.close()


def _add_chunk(latest: LatestPerKey, chunk: Sequence[Entry]) -> None:
    latest.add_entries(entry_facts(entry.position, entry.data) for entry in chunk)


def _copy_chunk(
    chunk: Sequence[Entry], selection: Selection, writer: CompactedLedgerWriter
) -> _Outcome:
    """Append the kept entries of ``chunk`` (batches rebuilt as needed) to ``writer``."""
    out: list[tuple[Position, bytes | memoryview]] = []
    messages = 0
    for entry in chunk:
        facts = entry_facts(entry.position, entry.data)
        plan = plan_entry(facts, selection)
        if plan == DROP:
            continue
        if plan is None:  # KEEP_ALL
            out.append((entry.position, entry.data))
            messages += facts.batch_size or 1
        else:
            out.append((entry.position, rebuild_batch(entry.data, plan)))
            messages += len(plan)
    writer.append(out)
    return _Outcome(len(out), messages)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        fsync_dir(path.parent)
