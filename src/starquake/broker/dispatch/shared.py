"""Shared: entries go round-robin to the consumers that have permits, each entry to one consumer
(highest priority first, see :mod:`starquake.broker.dispatch.round_robin`).

Entries to send again (a leaving consumer's unacked ones, those a consumer asked to get again,
delayed messages that became due) wait in a *replay* set, in position order, and go out before
new entries from the cursor. Their redelivery count goes up by one each time and travels in the
MESSAGE command. New entries whose delivery time is in the future are handed to the delayed
delivery tracker instead of a consumer.

The chunks of one chunked message all go to the consumer that got its first chunk (as Pulsar's
``SharedConsumerAssignor`` does), whatever that consumer's permits, so the client can reassemble
it; a chunk whose message has no owner (its first chunk was acknowledged before a restart) goes
to the next consumer, which discards the incomplete message.

The replay set is bounded in effect: while it holds ``MAX_REPLAY_BEFORE_PAUSE`` positions or
more, no new entries are read, so a subscription whose consumers stall cannot pile up memory.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from starquake.broker.consumer import Dispatch
from starquake.broker.dispatch.base import Dispatcher
from starquake.broker.dispatch.round_robin import RoundRobin
from starquake.broker.entry_info import EntryInfo
from starquake.storage import Entry, Position

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.dispatch.base import DispatchedSubscription

MAX_REPLAY_BEFORE_PAUSE = 10_000
_MAX_PASSES = 64


def now_ms() -> int:
    """The wall clock in milliseconds (delayed delivery times)."""
    return int(time.time() * 1000)


class SharedDispatcher(Dispatcher):
    """Round-robin dispatcher for Shared subscriptions (and the base of Key_Shared)."""

    def __init__(self, subscription: DispatchedSubscription, max_read_batch: int) -> None:
        super().__init__(subscription, max_read_batch)
        self.to_redeliver: set[Position] = set()
        self._round_robin = RoundRobin()
        self._timer: asyncio.TimerHandle | None = None
        self._chunk_owner: dict[str, Consumer] = {}
        self.unkeyed: set[Position] = set()
        """Replays whose sticky key must be read before the next entries go (Key_Shared)."""

    # --- consumers and redelivery -------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Take a consumer in and dispatch to it."""
        super().add_consumer(consumer)
        self._round_robin.consumers_changed(self.consumers)

    def remove_consumer(self, consumer: Consumer) -> None:
        """Let a consumer go; its unacknowledged messages go to the others."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._round_robin.consumers_changed(self.consumers)
        for uuid in [u for u, c in self._chunk_owner.items() if c is consumer]:
            del self._chunk_owner[uuid]
        pending = consumer.take_pending()
        if pending:
            self.note_redelivered(pending)
            self.add_replay(pending)
        for position in pending:
            self.entry_done(position)
        self.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Send a consumer's unacknowledged messages again, to whoever has permits."""
        chosen = consumer.take_pending(positions)
        self.note_redelivered(chosen)
        self.add_replay(chosen)  # before entry_done: Key_Shared takes the keys it knows
        for position in chosen:
            self.entry_done(position)
        self.schedule()

    def add_replay(self, positions: list[Position]) -> None:
        """Queue positions for redelivery."""
        self.to_redeliver.update(positions)

    def discard_replay(self, position: Position) -> None:
        """Drop a position from redelivery (it was acknowledged)."""
        self.to_redeliver.discard(position)

    def reset(self) -> None:
        """Forget redeliveries, chunk owners and delayed messages (after a rewind)."""
        self.to_redeliver.clear()
        self._chunk_owner.clear()
        tracker = self.subscription.delayed_tracker
        if tracker is not None:
            tracker.clear()
        super().reset()

    def close(self) -> None:
        """Stop dispatching and cancel the delayed-delivery timer."""
        super().close()
        if self._timer is not None:
            self._timer.cancel()

    # --- reading --------------------------------------------------------------------------------

    async def _read_replay(self, limit: int) -> list[Entry]:
        cursor = self.subscription.cursor
        chosen = sorted(self.to_redeliver)[:limit]
        wanted = []
        for position in chosen:
            self.discard_replay(position)
            if not cursor.is_acked(position) and not self.subscription.held_in_txn(position):
                wanted.append(position)
        if not wanted:
            return []
        epoch, acks, md = self.epoch, self.acks, cursor.mark_delete_position
        entries = await self.subscription.topic.ledger.replay_entries(wanted)
        if epoch != self.epoch or self.closed:
            return []  # reset (or closed) while reading: what was read is stale
        if acks != self.acks or md != cursor.mark_delete_position:  # acked meanwhile
            return [e for e in entries if not cursor.is_acked(e.position)]
        return entries

    def _new(self, entries: list[Entry]) -> list[tuple[Entry, EntryInfo]]:
        """New entries read from the cursor; those with a future delivery time go to the
        tracker."""
        tracker = self.subscription.delayed_tracker
        out = []
        now = now_ms() if tracker is not None else 0
        for entry in entries:
            info = self.info(entry)
            if (
                tracker is not None
                and info.deliver_at > now
                and (entry.position in tracker or tracker.add(entry.position, info.deliver_at, now))
            ):
                continue
            out.append((entry, info))
        return out

    async def read_keys(self) -> None:
        """Read the keys of :attr:`unkeyed` (Key_Shared; Shared has none)."""
        self.unkeyed.clear()

    def _take_due_delayed(self, limit: int) -> None:
        tracker = self.subscription.delayed_tracker
        if tracker is not None and len(tracker):
            due = tracker.get_scheduled(limit, now_ms())
            if due:
                self.add_replay(due)

    def _arm_timer(self) -> None:
        tracker = self.subscription.delayed_tracker
        if tracker is None or not len(tracker) or self._timer is not None:
            return
        when = tracker.next_delivery_time()
        if when is None:
            return
        delay = max(0.0, (when - now_ms()) / 1000)
        try:
            self._timer = asyncio.get_running_loop().call_later(delay, self._on_timer)
        except RuntimeError:
            return

    def _on_timer(self) -> None:
        self._timer = None
        self.schedule()

    # --- dispatching ----------------------------------------------------------------------------

    def _next_consumer(self) -> Consumer | None:
        return self._round_robin.pick(self.consumers, self.can_receive)

    async def dispatch(self) -> None:
        """Send redeliveries, due delayed messages and new entries round-robin."""
        cursor = self.subscription.cursor
        self._take_due_delayed(self.max_read_batch)
        if self.unkeyed:
            await self.read_keys()
        for _ in range(_MAX_PASSES):
            if self.closed:
                return
            receivers = [c for c in self.consumers if self.can_receive(c)]
            if not receivers:
                break
            permits = sum(c.permits for c in receivers)
            limit = min(permits, self.max_read_batch)
            acks = self.acks
            if self.to_redeliver:
                replay = await self._read_replay(limit)
                if acks != self.acks:  # acknowledgments came while the read waited
                    self.recount()
                if replay and self.assign([(e, self.info(e)) for e in replay], True):
                    continue
                if not replay and self.to_redeliver:
                    continue
            if len(self.to_redeliver) >= MAX_REPLAY_BEFORE_PAUSE:
                break
            entries = await self.subscription.read_entries(
                self.entries_to_read(permits), max_bytes=self.max_read_bytes
            )
            if self.closed:
                return
            if acks != self.acks:
                self.recount()
            batch = self._new(entries)
            if batch:
                self.note_read(len(batch), sum(info.num_messages for _, info in batch))
            elif entries:  # all of them delayed: look as far ahead as the permits again
                self.messages_per_entry = 1.0
            if not batch:
                if cursor.has_more_entries() and not self.subscription.held():
                    continue
                break
            if not self.assign(batch, False):
                break
        self._arm_timer()

    def _chunk_consumer(self, info: EntryInfo) -> Consumer | None:
        owner = self._chunk_owner.get(info.chunk_uuid)
        if owner is None:
            owner = self._next_consumer()
            if owner is None:
                return None
            if not info.last_chunk:
                self._chunk_owner[info.chunk_uuid] = owner
        elif info.last_chunk:
            del self._chunk_owner[info.chunk_uuid]
        return owner

    def assign(self, batch: list[tuple[Entry, EntryInfo]], replaying: bool) -> bool:
        """Send ``batch`` to consumers; returns whether anything was sent."""
        plan: dict[int, tuple[Consumer, list[Dispatch]]] = {}
        for index, (entry, info) in enumerate(batch):
            consumer = self._chunk_consumer(info) if info.chunk_uuid else self._next_consumer()
            if consumer is None:
                rest = [e.position for e, _ in batch[index:]]
                if replaying:
                    self.add_replay(rest)
                else:
                    self.subscription.cursor.seek(rest[0])
                break
            consumer.permits -= info.num_messages
            slot = plan.setdefault(id(consumer), (consumer, []))
            slot[1].append(self.prepared(consumer, entry, info))
        return self.send_plan(plan)
