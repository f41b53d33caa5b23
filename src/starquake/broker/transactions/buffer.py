"""A topic's transaction buffer: which of its entries consumers may not see (yet).

A message sent in a transaction is stored at once, like any other, but not dispatched until
its transaction commits; an aborted transaction's messages are never dispatched. As in Pulsar,
dispatch stops at the *max read position*: the first entry of the oldest transaction still open
on the topic (entries after it wait too, transactional or not, so that order is kept). The end
of a transaction is a marker entry (see :mod:`.markers`), never dispatched either; aborted
entries and markers are acknowledged on each cursor as its reads pass them.

The state is rebuilt when the topic loads from its last snapshot (see :mod:`.buffer_snapshot`)
and the entries stored after it (all of them without one): message entries open their
transaction, markers end it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from starquake.broker.transactions import buffer_snapshot as snapshots
from starquake.broker.transactions.durable import DurableAppends, Kicker
from starquake.broker.transactions.errors import TransactionConflictError, TxnId, txn_text
from starquake.broker.transactions.markers import EntryKind, classify, marker_entry
from starquake.storage import Entry, ManagedCursor, ManagedLedger, Position, StorageError

log = logging.getLogger(__name__)

RECOVERY_READ = 1000
"""Entries read at once while rebuilding the state."""
ENDED_KEPT = 10_000
"""Ended transactions remembered per topic (to refuse their late messages and to answer a
repeated end); the oldest are forgotten beyond this."""


class Woken(Protocol):
    """A subscription: told that entries may have become readable."""

    def on_new_entries(self) -> None:
        """Wake the dispatcher."""


class BufferedTopic(Protocol):
    """What the buffer uses of its topic."""

    @property
    def full_name(self) -> str:
        """The topic's name."""

    @property
    def ledger(self) -> ManagedLedger:
        """The topic's managed ledger."""

    @property
    def subscriptions(self) -> Mapping[str, Woken]:
        """The topic's subscriptions."""


class TopicTransactionBuffer:
    """The transactions of one topic (see the module docstring)."""

    def __init__(
        self,
        topic: BufferedTopic,
        committer: Kicker,
        check_open: Callable[[TxnId], None] = lambda _: None,
        snapshot_every: tuple[int, float] = (
            snapshots.MAX_TRANSACTION_COUNT,
            snapshots.MIN_TIME_SECONDS,
        ),
    ) -> None:
        """``check_open`` raises when the coordinator knows the transaction is not open.
        ``snapshot_every``: a snapshot is taken at an end once this many transactions ended
        since the last one, or this many seconds passed; it is kept where the topic's
        storage keeps it (see :mod:`.buffer_snapshot`)."""
        self._snapshots = snapshots.store_of(topic.ledger)
        self._snapshot_count, self._snapshot_seconds = snapshot_every
        self._snapshot_failed = False
        self.snapshot_position: Position | None = None
        """The position of the snapshot the last load recovered from (None: a full replay)."""
        self._topic = topic
        self._check_open = check_open
        self.appends = DurableAppends(topic.ledger, committer)
        self.open: dict[TxnId, list[Position]] = {}
        """The positions of each open transaction's entries, oldest transaction first."""
        self.hidden: set[Position] = set()
        """Entries never dispatched: aborted messages and markers."""
        self._hidden_from: Position | None = None
        """The first stored position when :attr:`hidden` was last cut to it."""
        self.ended: dict[TxnId, bool] = {}
        """The transactions ended on this topic: True committed, False aborted."""
        self._ending: dict[TxnId, asyncio.Future[None]] = {}
        self.recover_start_ms = 0
        self.recover_end_ms = 0
        self.last_snapshot_ms = 0
        self._snapshot_due = 0
        """Transactions ended since the last snapshot."""
        self._snapshot_at = 0.0
        self._snapshot_task: asyncio.Task[None] | None = None

    @property
    def last_position(self) -> Position:
        """The topic's last stored entry."""
        return self._topic.ledger.last_confirmed

    @property
    def max_read(self) -> Position | None:
        """The first entry of the oldest open transaction (None: nothing held back)."""
        for positions in self.open.values():
            return positions[0]
        return None

    # --- the produce side ---------------------------------------------------------------------

    def check_append(self, txn: TxnId) -> None:
        """Refuse a message of a transaction that already ended (or is ending) here, or that
        its coordinator (when it is this broker's) does not have open: its message would hold
        the topic's dispatch back for ever."""
        if txn in self.ended or txn in self._ending:
            raise TransactionConflictError(
                f"Transaction {txn_text(txn)} already ended on {self._topic.full_name}"
            )
        self._check_open(txn)

    def appended(self, txn: TxnId, position: Position) -> None:
        """A message of ``txn`` was stored at ``position``."""
        self.open.setdefault(txn, []).append(position)

    async def end(self, txn: TxnId, commit: bool) -> None:
        """End ``txn`` on this topic (END_TXN_ON_PARTITION): write its marker and, once the
        marker is durable, show (commit) or drop (abort) its messages. Ending it again with
        the same outcome does nothing; with the other outcome, it cannot be undone (logged)."""
        if txn in self.ended:
            if self.ended[txn] != commit:
                log.warning(
                    "transaction %s already %s on %s: its end as %s changes nothing",
                    txn_text(txn),
                    "committed" if self.ended[txn] else "aborted",
                    self._topic.full_name,
                    "committed" if commit else "aborted",
                )
            return
        ending = self._ending.get(txn)
        if ending is not None:
            await asyncio.shield(ending)
            return
        ending = asyncio.get_running_loop().create_future()
        self._ending[txn] = ending
        try:
            self.forget_trimmed()
            position, durable = self.appends.append(marker_entry(txn, commit))
            self.hidden.add(position)
            await durable
            self._apply_end(txn, commit)
            ending.set_result(None)
            self._snapshot_due += 1
        except BaseException as exc:
            ending.set_exception(exc)
            ending.exception()  # retrieved: a concurrent caller may not be there
            raise
        finally:
            self._ending.pop(txn, None)
        self._maybe_snapshot()
        for subscription in self._topic.subscriptions.values():
            subscription.on_new_entries()

    def _maybe_snapshot(self) -> None:
        """Take a snapshot when one is due (see :mod:`.buffer_snapshot`)."""
        store = self._snapshots
        if not self._snapshot_due or self._ending or self._snapshot_task is not None:
            return
        elapsed = time.monotonic() - self._snapshot_at
        if self._snapshot_due < self._snapshot_count and (
            self._snapshot_at and elapsed < self._snapshot_seconds
        ):
            return
        position = self._topic.ledger.last_confirmed
        # copied here (a few ms for 100,000 hidden entries), encoded off the event loop (tens
        # of ms): the loop goes on changing the originals meanwhile
        state = ({t: list(p) for t, p in self.open.items()}, set(self.hidden), dict(self.ended))
        self._snapshot_due = 0
        self._snapshot_at = time.monotonic()
        writing = self._write_snapshot(store, position, state)
        self._snapshot_task = asyncio.get_running_loop().create_task(writing)

    async def _write_snapshot(
        self, store: snapshots.SnapshotStore, position: Position, state: snapshots.State
    ) -> None:
        try:
            data = await asyncio.to_thread(snapshots.encode, position, state)
            await store.write(data)
            self.last_snapshot_ms = int(time.time() * 1000)
            self._snapshot_failed = False
        except (OSError, StorageError) as exc:  # the next one is taken at a later end
            level = logging.DEBUG if self._snapshot_failed else logging.WARNING
            self._snapshot_failed = True  # one line until one succeeds again
            log.log(level, "transaction buffer snapshot of %s failed: %s", store.where, exc)
        finally:
            self._snapshot_task = None

    def _apply_end(self, txn: TxnId, commit: bool) -> None:
        positions = self.open.pop(txn, [])
        if not commit:
            self.hidden.update(positions)
        self.ended[txn] = commit
        if len(self.ended) > ENDED_KEPT:
            del self.ended[next(iter(self.ended))]

    def forget_trimmed(self) -> None:
        """Drop the hidden positions of ledgers that were trimmed away (only when the first
        stored position moved since the last cut: a pass over every hidden position at each
        end would cost the event loop more with every transaction the ledger holds)."""
        first = self._topic.ledger.first_position()
        if first is not None and first == self._hidden_from:
            return
        self._hidden_from = first
        if first is None:
            self.hidden.clear()
        else:
            self.hidden = {p for p in self.hidden if p >= first}

    def last_visible(self, last: Position) -> Position:
        """The last position up to ``last`` that a consumer may get (before the max read
        position, not hidden); the position before the first entry when there is none."""
        limit = self.max_read
        candidate = last
        if limit is not None and candidate >= limit:
            candidate = self._before(limit)
        while candidate in self.hidden:
            candidate = self._before(candidate)
        return candidate

    def _before(self, position: Position) -> Position:
        """The stored position before ``position``."""
        if position.entry_id > 0:
            return Position(position.ledger_id, position.entry_id - 1)
        ledger = self._topic.ledger
        earlier = [i for i in ledger.ledgers() if i.ledger_id < position.ledger_id and i.entries]
        if earlier:
            return Position(earlier[-1].ledger_id, earlier[-1].entries - 1)
        return ledger.position_before_first()

    # --- recovery -----------------------------------------------------------------------------

    async def recover(self) -> int:
        """Rebuild the state from the topic's stored entries; returns how many were read."""
        self.recover_start_ms = int(time.time() * 1000)
        ledger = self._topic.ledger
        start = ledger.first_position()
        last = ledger.last_confirmed
        read = 0
        snapshot = await snapshots.read(self._snapshots)
        if snapshot is not None and start is not None and snapshot[0] <= last:
            position, (self.open, self.hidden, self.ended) = snapshot
            self.snapshot_position = position
            self._hidden_from = None
            self.forget_trimmed()
            start = max(start, ledger.next_position(position))
        while start is not None and start <= last:
            entries = await ledger.read_entries(start, RECOVERY_READ)
            if not entries:
                break
            self._replay(entries)
            read += len(entries)
            start = ledger.next_position(entries[-1].position)
            await asyncio.sleep(0)  # a long replay never stalls the event loop
        self.recover_end_ms = int(time.time() * 1000)
        return read

    def _replay(self, entries: Iterable[Entry]) -> None:
        for entry in entries:
            kind, txn = classify(entry.data)
            if kind == EntryKind.TXN_MESSAGE:
                if txn in self.ended:
                    if not self.ended[txn]:
                        self.hidden.add(entry.position)
                else:
                    self.appended(txn, entry.position)
            elif kind != EntryKind.PLAIN:
                self.hidden.add(entry.position)
                self._apply_end(txn, kind == EntryKind.COMMIT)


async def read_visible(
    cursor: ManagedCursor,
    buffer: TopicTransactionBuffer,
    max_entries: int,
    max_bytes: int | None = None,
) -> list[Entry]:
    """The next entries a subscription may dispatch: up to the max read position, without
    aborted messages and markers (acknowledged on ``cursor`` as they are passed)."""
    while True:
        entries = await cursor.read_entries(max_entries, max_bytes)
        if not entries:
            return entries
        limit = buffer.max_read
        hidden = buffer.hidden
        visible: list[Entry] = []
        passed: list[Position] = []
        held = False
        for entry in entries:
            position = entry.position
            if limit is not None and position >= limit:
                cursor.seek(position)  # read it again once its transaction ended
                held = True
                break
            if position in hidden:
                passed.append(position)
            else:
                visible.append(entry)
        if passed:
            cursor.delete(passed)
        if visible or held or not cursor.has_more_entries():
            return visible
        await asyncio.sleep(0)  # a long run of hidden entries never stalls the event loop


class Held(Protocol):
    """A subscription's pending acks: which positions wait for their transaction's end."""

    def holds(self, position: Position) -> bool:
        """Whether ``position`` must not be dispatched now."""


async def read_unheld(
    cursor: ManagedCursor,
    buffer: TopicTransactionBuffer | None,
    held: Held,
    max_entries: int,
    max_bytes: int | None = None,
) -> list[Entry]:
    """As :func:`read_visible` (or the cursor's read without a buffer), without the entries
    that open transactions acknowledged on the subscription: they are passed, not
    acknowledged, and delivered again if their transaction aborts."""
    while True:
        if buffer is not None and (buffer.open or buffer.hidden):
            entries = await read_visible(cursor, buffer, max_entries, max_bytes)
        else:
            entries = await cursor.read_entries(max_entries, max_bytes)
        kept = [entry for entry in entries if not held.holds(entry.position)]
        if kept or not entries or not cursor.has_more_entries():
            return kept
        await asyncio.sleep(0)  # a long run of held entries never stalls the event loop
