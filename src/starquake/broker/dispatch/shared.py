"""Shared: entries go round-robin to the consumers that have permits, each entry to one consumer.

Entries to redeliver (a leaving consumer's unacked ones, or those a consumer asked to get again)
are kept in position order and sent before new entries from the cursor. Their redelivery count
goes up by one each time and travels in the MESSAGE command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starquake.broker.dispatch.base import Dispatcher, PreparedEntry
from starquake.storage import Entry, Position

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer


class SharedDispatcher(Dispatcher):
    """Round-robin dispatcher for Shared subscriptions."""

    def __init__(self, subscription: object, max_read_batch: int) -> None:
        super().__init__(subscription, max_read_batch)  # type: ignore[arg-type]
        self.to_redeliver: set[Position] = set()
        self._next = 0

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        pending = list(consumer.pending_acks)
        consumer.pending_acks.clear()
        if pending:
            self.note_redelivered(pending)
            self.to_redeliver.update(pending)
        self.schedule()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if positions is None:
            chosen = list(consumer.pending_acks)
        else:
            chosen = [p for p in positions if p in consumer.pending_acks]
        for position in chosen:
            del consumer.pending_acks[position]
        self.note_redelivered(chosen)
        self.to_redeliver.update(chosen)
        self.schedule()

    def reset(self) -> None:
        self.to_redeliver.clear()
        super().reset()

    def _read_redeliveries(self, limit: int) -> list[Entry]:
        cursor = self.subscription.cursor
        ledger = self.subscription.topic.ledger
        chosen = sorted(self.to_redeliver)[:limit]
        entries: list[Entry] = []
        for position in chosen:
            self.to_redeliver.discard(position)
            if cursor.is_acked(position):
                continue
            entry = ledger.read_entry(position)
            if entry is not None:
                entries.append(entry)
        return entries

    def _next_consumer(self) -> Consumer | None:
        consumers = self.consumers
        n = len(consumers)
        for _ in range(n):
            if self._next >= n:
                self._next = 0
            consumer = consumers[self._next]
            self._next += 1
            if consumer.permits > 0:
                return consumer
        return None

    def dispatch(self) -> None:
        cursor = self.subscription.cursor
        while True:
            total = sum(c.permits for c in self.consumers if c.permits > 0)
            if total <= 0:
                return
            limit = min(total, self.max_read_batch)
            redelivering = bool(self.to_redeliver)
            entries = self._read_redeliveries(limit) if redelivering else cursor.read_entries(limit)
            if not entries:
                if redelivering:
                    continue
                return
            prepared = self.prepare(entries)
            plan: dict[int, tuple[Consumer, list[PreparedEntry]]] = {}
            for index, item in enumerate(prepared):
                consumer = self._next_consumer()
                if consumer is None:
                    self._give_back(prepared[index:], redelivering)
                    break
                consumer.permits -= item[2]
                slot = plan.get(id(consumer))
                if slot is None:
                    plan[id(consumer)] = (consumer, [item])
                else:
                    slot[1].append(item)
            for consumer, items in plan.values():
                consumer.permits += sum(item[2] for item in items)
                consumer.send_entries(items)

    def _give_back(self, rest: list[PreparedEntry], redelivering: bool) -> None:
        if redelivering:
            self.to_redeliver.update(item[0] for item in rest)
        else:
            self.subscription.cursor.seek(rest[0][0])
