"""Exclusive and Failover: one active consumer gets every entry, in order.

Failover picks the active consumer the way Pulsar does: consumers sorted by priority level (lower
number first) then, for partitioned topics, by name, keeping only the highest-priority group; a
partition goes to ``group[partition % len(group)]``, a non-partitioned topic to the first consumer
that subscribed. Every change of the active consumer rewinds the cursor to the first unacked
entry, so the new active consumer receives the previous one's unacked messages and everything
after them, in order, and every consumer is told with ACTIVE_CONSUMER_CHANGE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starquake.broker.dispatch.base import Dispatcher
from starquake.protocol import commands
from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer


class SingleActiveConsumerDispatcher(Dispatcher):
    """Dispatcher for Exclusive and Failover subscriptions."""

    active: Consumer | None = None

    def __init__(self, subscription: object, max_read_batch: int, *, failover: bool) -> None:
        super().__init__(subscription, max_read_batch)  # type: ignore[arg-type]
        self.failover = failover
        self.active = None

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self._elect(notify_all=True)

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._elect(notify_all=False)

    def _pick(self) -> Consumer | None:
        if not self.consumers:
            return None
        best = min(c.priority_level for c in self.consumers)
        group = [c for c in self.consumers if c.priority_level == best]
        partition = self.subscription.topic.partition_index
        if partition < 0:
            return group[0]
        group.sort(key=lambda c: c.name)
        return group[partition % len(group)]

    def _elect(self, *, notify_all: bool) -> None:
        previous = self.active
        self.active = self._pick()
        changed = self.active is not previous
        if changed:
            if previous is not None:
                previous.pending_acks.clear()
            self.subscription.cursor.rewind()
        if self.failover and (changed or notify_all):
            for consumer in self.consumers:
                consumer.cnx.write(
                    commands.active_consumer_change(consumer.consumer_id, consumer is self.active)
                )
        self.schedule()

    def dispatch(self) -> None:
        consumer = self.active
        if consumer is None:
            return
        cursor = self.subscription.cursor
        while consumer.permits > 0:
            entries = cursor.read_entries(min(consumer.permits, self.max_read_batch))
            if not entries:
                return
            prepared = self.prepare(entries)
            budget = consumer.permits
            take = 0
            for _, _, count, _ in prepared:
                if budget <= 0:
                    break
                budget -= count
                take += 1
            if take < len(prepared):
                cursor.seek(prepared[take][0])
                prepared = prepared[:take]
            consumer.send_entries(prepared)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if consumer is not self.active:
            return
        pending = list(consumer.pending_acks)
        if positions is not None:
            wanted = set(positions)
            pending = [p for p in pending if p in wanted]
        self.note_redelivered(pending)
        consumer.pending_acks.clear()
        self.subscription.cursor.rewind()
        self.schedule()

    def reset(self) -> None:
        super().reset()
