"""One compaction of one topic: the previous compacted view plus the log after it, into a new
compacted ledger.

Inputs: the previous view (if any) and the managed ledger from the entry after the previous
horizon up to its last confirmed entry when the compaction starts, the new horizon. Producers
go on appending meanwhile; what they add lies after the horizon and is left for the next
compaction.

Two passes, as Pulsar's two-phase compactor: the first finds the latest message of each key
(keeping only message ids in memory), the second copies the kept entries into the new file,
rebuilding batches that lose some of their messages. Entries of the managed ledger are read on
the event loop in bounded chunks (its reads are fast and not thread-safe); parsing and
rewriting happen in a worker thread, one chunk at a time, so the loop is never held long, and
so do a compacted ledger file's writes (a JetStream one's are requests awaited on the loop).

Commit: the new compacted ledger is written completely and made durable (its store: files of
the broker, or a JetStream ledger in cluster mode, :mod:`starquake.storage.compacted_store`),
then recorded as the topic's (the commit point); only then is the new view served, the
``__compaction`` cursor's mark-delete position moved to the horizon (it holds back the trimming
of ledgers the compaction has not passed yet) and the previous compacted ledger deleted. A
crash before the record leaves a compacted ledger nothing names, deleted when the topic is
next loaded; after it, the new view is the one loaded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple

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
from starquake.storage.compacted_store import (
    CompactedLedgerBuilder,
    CompactedLedgerReader,
    CompactedLedgerStore,
)

if TYPE_CHECKING:
    from starquake.broker.contexts import StorageContext
    from starquake.broker.topic import PersistentTopic

__all__ = ["COMPACTION_CURSOR", "CompactionError", "Compactor", "compaction_cursor"]

log = logging.getLogger(__name__)

COMPACTION_CURSOR = "__compaction"
"""The durable cursor that marks the compaction horizon (Pulsar's compaction subscription)."""

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


class _Outcome(NamedTuple):
    """Entries and messages written to a compacted ledger."""

    entries: int
    messages: int

    def plus(self, other: _Outcome) -> _Outcome:
        return _Outcome(self.entries + other.entries, self.messages + other.messages)


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
        self.store: CompactedLedgerStore = service.storage.compacted_ledgers
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
        old: CompactedLedgerReader | None = None
        if previous is not None:
            start = ledger.next_position(previous.horizon)
            old = await previous.ledger.reopen()  # the view may close while this reads
        else:
            start = ledger.position_before_first()
        try:
            latest = LatestPerKey(self.service.config.topicCompactionRetainNullKey)
            read = await self._phase_one(old, start, horizon, latest)
            new_ledger, kept = await self._phase_two(old, start, horizon, latest.result(), read)
        finally:
            if old is not None:
                old.close()
        await self._commit(new_ledger)
        # committed: the new view is the topic's from here on, even if what follows fails
        view = CompactedView(new_ledger)
        self.removed = max(latest.messages - kept.messages, 0)
        if state.closed:
            view.close()  # the topic was unloaded meanwhile: its next load opens the new one
        else:
            state.install(view)
            if horizon > cursor.mark_delete_position:
                cursor.mark_delete(horizon)
        if previous is not None:
            await self.store.delete(ledger, previous.ledger)
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
        self,
        old: CompactedLedgerReader | None,
        start: Position,
        horizon: Position,
        latest: LatestPerKey,
    ) -> _Read:
        """Feed every message of the previous view and of the log up to ``horizon`` to
        ``latest``; what was read (phase two checks it reads the same)."""
        old_entries = 0
        if old is not None:
            async for chunk in self._old(old):
                await asyncio.to_thread(_add_chunk, latest, chunk)
                old_entries += len(chunk)
        count = 0
        last: Position | None = None
        async for chunk in self._live(start, horizon):
            await asyncio.to_thread(_add_chunk, latest, chunk)
            count += len(chunk)
            last = chunk[-1].position
        return _Read(old_entries, count, last)

    async def _phase_two(
        self,
        old: CompactedLedgerReader | None,
        start: Position,
        horizon: Position,
        selection: Selection,
        expected: _Read,
    ) -> tuple[CompactedLedgerReader, _Outcome]:
        """Write what ``selection`` keeps into a new compacted ledger, finished and reopened;
        an unfinished one is deleted."""
        writer = await self.store.create(self.topic.ledger)
        try:
            kept = _Outcome(0, 0)
            old_entries = 0
            if old is not None:
                async for chunk in self._old(old):
                    kept = kept.plus(await self._copy(chunk, selection, writer))
                    old_entries += len(chunk)
                if old_entries != expected.old_entries:
                    raise CompactionError(f"compacted ledger {old.ledger_id} changed")
            count = 0
            last: Position | None = None
            async for chunk in self._live(start, horizon):
                kept = kept.plus(await self._copy(chunk, selection, writer))
                count += len(chunk)
                last = chunk[-1].position
            if (count, last) != (expected.live_entries, expected.last_live):
                raise CompactionError(
                    f"the log of {self.topic.full_name} changed during its compaction "
                    f"({expected.live_entries} entries read, then {count}): ledgers were trimmed"
                )
            return await writer.finish(horizon), kept
        except BaseException:
            await writer.abort()
            raise

    async def _copy(
        self, chunk: Sequence[Entry], selection: Selection, writer: CompactedLedgerBuilder
    ) -> _Outcome:
        """Rewrite ``chunk`` in a worker thread, then append what it keeps to ``writer``."""
        out, messages = await asyncio.to_thread(_kept_of_chunk, chunk, selection)
        if out:
            await writer.append(out)
        return _Outcome(len(out), messages)

    async def _commit(self, compacted: CompactedLedgerReader) -> None:
        """Record ``compacted`` as the topic's (the commit point); on failure it is deleted."""
        ledger = self.topic.ledger
        try:
            self._check()
            await self.store.commit(ledger, compacted)
        except BaseException:
            await self.store.delete(ledger, compacted)
            raise

    async def _old(self, old: CompactedLedgerReader) -> AsyncIterator[list[Entry]]:
        """The entries of the previous compacted ledger, in chunks (damaged ones left out)."""
        position: Position | None = Position(-1, -1)
        last = old.last
        while position is not None and last is not None:
            self._check()
            try:
                records = await old.read_from(position, CHUNK_ENTRIES)
            except StorageError as exc:
                raise CompactionError(
                    f"cannot read compacted ledger {old.ledger_id}: {exc}"
                ) from exc
            if not records:
                return
            chunk = [Entry(r.position, r.data) for r in records if r.data is not None]
            end = records[-1].position
            position = None if end >= last else Position(end.ledger_id, end.entry_id + 1)
            if chunk:
                yield chunk

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


def _add_chunk(latest: LatestPerKey, chunk: Sequence[Entry]) -> None:
    latest.add_entries(entry_facts(entry.position, entry.data) for entry in chunk)


def _kept_of_chunk(
    chunk: Sequence[Entry], selection: Selection
) -> tuple[list[tuple[Position, bytes | memoryview]], int]:
    """The kept entries of ``chunk`` (batches rebuilt as needed) and their messages."""
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
    return out, messages
