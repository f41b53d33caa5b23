"""What every dispatcher shares: the consumer list, scheduling and entry preparation.

A dispatcher moves entries from its subscription's cursor to consumers that have permits. It
never awaits: reads come from the managed ledger's cache or files, and writes go into the
consumers' transports. ``schedule()`` coalesces the many triggers (flow, new entries, acks,
redelivery requests) into one dispatch pass per event-loop iteration.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from starquake.protocol.framing import entry_num_messages
from starquake.storage import Entry, Position

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.subscription import Subscription

PreparedEntry = tuple[Position, bytes, int, int]


class Dispatcher:
    """Base class; subclasses implement :meth:`dispatch`."""

    def __init__(self, subscription: Subscription, max_read_batch: int) -> None:
        self.subscription = subscription
        self.consumers: list[Consumer] = []
        self.max_read_batch = max_read_batch
        self._scheduled = False
        self.closed = False

    # --- consumers ----------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        self.consumers.append(consumer)
        self.schedule()

    def remove_consumer(self, consumer: Consumer) -> None:
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self.schedule()

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        consumer.permits += permits
        self.schedule()

    # --- triggers ----------------------------------------------------------------------------

    def schedule(self) -> None:
        """Run :meth:`dispatch` soon (once, however often this is called before it runs)."""
        if self._scheduled or self.closed:
            return
        self._scheduled = True
        try:
            asyncio.get_running_loop().call_soon(self._run)
        except RuntimeError:  # no running loop (synchronous tests): dispatch now
            self._run()

    def _run(self) -> None:
        self._scheduled = False
        if not self.closed:
            self.dispatch()

    def dispatch(self) -> None:
        raise NotImplementedError

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Send ``positions`` (all of the consumer's unacked entries when None) again."""
        raise NotImplementedError

    def reset(self) -> None:
        """Forget dispatch state after the cursor moved (seek); consumers start over."""
        for consumer in self.consumers:
            consumer.pending_acks.clear()
        self.schedule()

    def close(self) -> None:
        self.closed = True

    # --- helpers -----------------------------------------------------------------------------

    def prepare(self, entries: list[Entry]) -> list[PreparedEntry]:
        counts = self.subscription.redelivery_counts
        return [
            (e.position, e.data, entry_num_messages(e.data), counts.get(e.position, 0))
            for e in entries
        ]

    def note_redelivered(self, positions: list[Position]) -> None:
        counts = self.subscription.redelivery_counts
        for position in positions:
            counts[position] = counts.get(position, 0) + 1
