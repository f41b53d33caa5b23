"""Exclusive and Failover: one active consumer gets every entry, in order.

Failover picks the active consumer the way Pulsar does: consumers sorted by priority level (lower
number first) then, for partitioned topics, by name, keeping only the highest-priority group; a
partition goes to ``group[partition % len(group)]``, a non-partitioned topic to the first consumer
that subscribed. Every change of the active consumer rewinds the cursor to the first unacked
entry, so the new active consumer receives the previous one's unacked messages and everything
after them, in order, and every consumer is told with ACTIVE_CONSUMER_CHANGE. On a Failover
subscription the rewind, the first dispatch to the new active consumer and the notice wait
``activeConsumerFailoverDelayTimeMillis`` (Pulsar's default: 1 s), so that the consumer that was
active can acknowledge what it already received; flow requests and redelivery requests that
come meanwhile are served by the dispatch that follows the wait, as in Pulsar.

An active consumer that asked for ``read_compacted`` is served through the topic's compacted
view first (see :mod:`starquake.broker.compaction.reading`).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from starquake.broker.compaction.view import CompactedEntry, compacted_entry_info
from starquake.broker.dispatch.base import Dispatcher
from starquake.broker.entry_info import EntryInfo
from starquake.protocol import commands
from starquake.storage import Entry, Position

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.dispatch.base import DispatchedSubscription


class SingleActiveConsumerDispatcher(Dispatcher):
    """Dispatcher for Exclusive and Failover subscriptions."""

    active: Consumer | None = None

    def __init__(
        self, subscription: DispatchedSubscription, max_read_batch: int, *, failover: bool
    ) -> None:
        super().__init__(subscription, max_read_batch)
        self.failover = failover
        self.active = None
        # As in Pulsar, the unacknowledged-message limits hold back Shared and Key_Shared
        # consumers only: an Exclusive or Failover consumer (a reader) is bounded by its permits.
        self.max_unacked_per_consumer = 0
        self.max_unacked_per_subscription = 0
        config = subscription.topic.service.config
        self.precise = config.preciseDispatcherFlowControl
        """Count permits as messages when reading (else as entries, Pulsar's default)."""
        self.switch_delay = config.activeConsumerFailoverDelayTimeMillis / 1000 if failover else 0
        self._switching: asyncio.TimerHandle | None = None
        """The wait after a change of the active consumer (Failover), while it lasts."""

    def add_consumer(self, consumer: Consumer) -> None:
        """Take a consumer in and elect the active one again."""
        self.consumers.append(consumer)
        self._elect(joined=consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        """Let a consumer go and elect the active one again."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._elect()

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

    def _elect(self, joined: Consumer | None = None) -> None:
        """Pick the active consumer again. As in Pulsar, a change is told to every consumer
        (after the wait, on Failover); a consumer that ``joined`` without changing it is told
        which one is active."""
        previous = self.active
        self.active = self._pick()
        if self.active is previous:
            if self.failover and joined is not None:
                self._tell(joined)
            self.schedule()
            return
        if previous is not None:
            previous.clear_pending()
        if self.active is not None and self.switch_delay > 0:
            if self._switching is None:  # a change during the wait is served when it ends
                self._switching = self._start_wait()
            if self._switching is not None:
                return
        self._serve()

    def _start_wait(self) -> asyncio.TimerHandle | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no running loop (synchronous tests): no wait
            return None
        return loop.call_later(self.switch_delay, self._switched)

    def _switched(self) -> None:
        """The wait after a change of the active consumer is over."""
        self._switching = None
        if not self.closed:
            self._serve()

    def _serve(self) -> None:
        """Serve the active consumer chosen: rewind to the first unacknowledged entry, tell the
        consumers which one is active (Failover), and dispatch to it."""
        self.subscription.rewind()
        if self.failover:
            self._notify()
        self.schedule()

    def _notify(self) -> None:
        for consumer in self.consumers:
            self._tell(consumer)

    def _tell(self, consumer: Consumer) -> None:
        consumer.cnx.write(
            commands.active_consumer_change(consumer.consumer_id, consumer is self.active)
        )

    def close(self) -> None:
        """Stop dispatching, and the wait after a change of the active consumer."""
        super().close()
        if self._switching is not None:
            self._switching.cancel()
            self._switching = None

    async def dispatch(self) -> None:
        """Send entries in order to the active consumer while it has permits."""
        subscription = self.subscription
        while True:
            consumer = self.active
            if consumer is None or self._switching is not None or not self.can_receive(consumer):
                return
            permits = consumer.permits
            wanted = self.entries_to_read(permits) if self.precise else permits
            entries = await subscription.read_entries(
                min(wanted, self.max_read_batch),
                compacted=consumer.read_compacted,
                max_bytes=self.max_read_bytes,
            )
            # A change of the active consumer rewinds the cursor, which empties a read that
            # was waiting; a closed dispatcher's subscription rewinds or goes away.
            if not entries or self.closed or consumer is not self.active:
                return
            if consumer.permits <= 0:  # held back while the read waited (a full write buffer)
                subscription.read_back(entries[0])
                return
            # precise: up to the entry that uses the last permit; else a permit stood for an
            # entry, and everything read is sent
            batch = []
            budget = consumer.permits
            for entry in entries:
                if budget <= 0 and self.precise:
                    subscription.read_back(entry)
                    break
                info = self.info(entry)
                budget -= info.num_messages
                batch.append(self.prepared(consumer, entry, info))
            self.note_read(len(batch), consumer.permits - budget)
            self.send(consumer, batch)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        # Ordering forbids redelivering single messages here: rewind and resend all unacked.
        """Rewind and resend the active consumer's unacknowledged messages."""
        if consumer is not self.active or self._switching is not None:
            return  # (during the wait, as Pulsar: the rewind that ends it resends everything)
        pending = consumer.take_pending(positions)
        if positions is not None:
            consumer.take_pending()
        self.note_redelivered(pending)
        self.subscription.rewind()
        self.schedule()

    def info(self, entry: Entry) -> EntryInfo:
        """As the base, but a compacted entry's batch may be smaller than stored."""
        if isinstance(entry, CompactedEntry):  # its batch may be smaller than the stored one
            return compacted_entry_info(entry)
        return super().info(entry)
