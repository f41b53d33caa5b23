"""Reading a subscription through its topic's compacted view (``read_compacted`` consumers).

As Pulsar's compacted topic reads: while the subscription's read position is at or before the
compaction horizon, it is served the compacted entries at or after that position, under their
original ids; once the view is exhausted the cursor moves to the entry after the horizon and
reading goes on in the live log.

The position in the view is kept here rather than in the managed cursor: a compacted entry
may lie in a ledger that was trimmed since, and the cursor only holds positions of stored
ledgers. It is set when reading (re)starts: from where a reader asked to start, else after
the cursor's mark-delete position, and from the very beginning of the view when nothing of
the stored log is acknowledged yet (a subscription at the earliest position also gets the
compacted entries of trimmed ledgers). Rewinds (redelivery, a new active consumer) and cursor
resets (seek) restart it. Entries the subscription acknowledged individually are skipped.

Acknowledgments of compacted entries in trimmed ledgers cannot be recorded by the cursor (they
lie before its mark-delete position): a durable subscription whose mark-delete position has
not moved past them gets them again after a rewind.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from starquake.broker.compaction.view import CompactedEntry
from starquake.broker.entry_info import LastMessage
from starquake.storage import EARLIEST, Entry, Position, StorageError

if TYPE_CHECKING:
    from starquake.broker.compaction.state import TopicCompaction
    from starquake.broker.consumer import DispatcherApi
    from starquake.storage import ManagedCursor, ManagedLedger

__all__ = ["CompactedReads", "CompactedSubscription", "CompactedTopic", "last_compacted_message"]


class CompactedTopic(Protocol):
    """What a compacted read looks at in a topic: its compacted view and its live log."""

    @property
    def compaction(self) -> TopicCompaction:
        """The compacted view and the state of the topic's compactions."""

    @property
    def ledger(self) -> ManagedLedger:
        """The topic's managed ledger."""

    async def last_message_position(self) -> LastMessage:
        """Last durable entry and its last batch index."""


class CompactedSubscription(Protocol):
    """What a compacted read uses of its subscription."""

    @property
    def topic(self) -> CompactedTopic:
        """The subscription's topic."""

    @property
    def cursor(self) -> ManagedCursor:
        """The subscription's cursor (the live log past the view's horizon)."""

    @property
    def dispatcher(self) -> DispatcherApi | None:
        """The subscription's dispatcher (None before any consumer)."""

    def read_live(
        self, max_entries: int, max_bytes: int | None = None
    ) -> Coroutine[Any, Any, list[Entry]]:
        """The next entries of the live log at the cursor (what transactions hide left out),
        within ``max_bytes`` (at least one)."""


async def last_compacted_message(topic: CompactedTopic) -> LastMessage:
    """The last message a ``read_compacted`` consumer can get, and its batch index: the live
    log's last one when it lies after the compaction horizon, else the view's last one
    (``-1:-1`` when the view is empty: every key was deleted). As in Pulsar, a live log
    without any entry (all trimmed, e.g. by a truncate) answers with the view's last one."""
    view = topic.compaction.view
    live = await topic.last_message_position()
    if view is None or (topic.ledger.last_confirmed > view.horizon and live.position.entry_id >= 0):
        return live
    found = await view.last_message()
    return found if found is not None else LastMessage(Position(-1, -1), -1)


class CompactedReads:
    """The read position of one subscription in its topic's compacted view."""

    def __init__(self, subscription: CompactedSubscription, start: Position | None = None) -> None:
        self._subscription = subscription
        self._requested = start
        self.position: Position | None = None
        """Next position to look up in the view; None while reading the live log."""
        self._epoch = 0
        """Counts restarts: a read that waited across one is dropped."""
        self.restart()

    def restart(self) -> None:
        """Start reading again from where the subscription stands (see the module docstring)."""
        cursor = self._subscription.cursor
        self._epoch += 1
        requested, self._requested = self._requested, None
        if requested is not None:
            start = requested
        else:
            md = cursor.mark_delete_position
            first = cursor.ledger.position_before_first()
            if md.entry_id < 0 and md.ledger_id <= first.ledger_id:
                start = EARLIEST
            else:
                start = Position(md.ledger_id, md.entry_id + 1)
        view = self._subscription.topic.compaction.view
        self.position = start if view is not None and start <= view.horizon else None

    def _skip(self, position: Position) -> bool:
        cursor = self._subscription.cursor
        return position > cursor.mark_delete_position and cursor.is_acked(position)

    async def read(self, max_entries: int, max_bytes: int | None = None) -> list[Entry]:
        """Up to ``max_entries`` entries: compacted ones first, then the live log's (those
        within ``max_bytes``, at least one)."""
        cursor = self._subscription.cursor
        view = self._subscription.topic.compaction.view
        if view is None:
            self.position = None
            return await self._subscription.read_live(max_entries, max_bytes)
        if self.position is None:
            if cursor.read_position > view.horizon:
                return await self._subscription.read_live(max_entries, max_bytes)
            self.position = cursor.read_position  # a compaction passed the read position
        epoch = self._epoch
        try:
            entries, following = await view.read_from(self.position, max_entries, self._skip)
        except StorageError:
            if self._subscription.topic.compaction.view is view:
                raise
            entries = []  # replaced (and deleted) while the read waited
        if self._subscription.topic.compaction.view is not view or self._epoch != epoch:
            # a new view came, or the reading restarted, while the read waited: read again
            dispatcher = self._subscription.dispatcher
            if dispatcher is not None:
                dispatcher.schedule()
            return []
        if following is not None:
            self.position = following
            dispatcher = self._subscription.dispatcher
            if not entries and dispatcher is not None:
                dispatcher.schedule()  # only acknowledged entries so far: go on next turn
            return entries
        self.position = None
        horizon = view.horizon
        cursor.seek((horizon.ledger_id, horizon.entry_id + 1))
        if entries:
            return entries
        return await self._subscription.read_live(max_entries, max_bytes)

    def read_back(self, entry: Entry) -> None:
        """``entry`` was read but not dispatched: it is the next one to read."""
        if isinstance(entry, CompactedEntry):
            self.position = entry.position
        else:
            self._subscription.cursor.seek(entry.position)
