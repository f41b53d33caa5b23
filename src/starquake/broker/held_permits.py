"""Consumer permits a connection holds back while its writes are paused.

While the transport's write buffer is above its high-water mark, the connection's consumers
get no permits: dispatchers then send them nothing. The permits they had, and those FLOWs bring
meanwhile, are kept here and handed back when the buffer drains.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer


class HeldPermits:
    """Permits held back per consumer id, with the consumer they belong to."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held: dict[int, tuple[Consumer, int]] = {}

    def hold(self, consumer_id: int, consumer: Consumer, permits: int) -> None:
        """Keep ``permits`` more for ``consumer``."""
        _, held = self._held.get(consumer_id, (consumer, 0))
        self._held[consumer_id] = (consumer, held + permits)

    def take_from(self, consumers: dict[int, Consumer]) -> None:
        """Hold back every permit the consumers have now."""
        for consumer_id, consumer in consumers.items():
            if consumer.permits > 0:
                self.hold(consumer_id, consumer, consumer.permits)
                consumer.permits = 0

    def give_back(self, consumers: dict[int, Consumer]) -> None:
        """Hand the held permits to the consumers still connected, through their dispatchers."""
        held, self._held = self._held, {}
        for consumer_id, (consumer, permits) in held.items():
            dispatcher = consumer.subscription.dispatcher
            if consumers.get(consumer_id) is consumer and dispatcher is not None:
                dispatcher.consumer_flow(consumer, permits)

    def clear(self) -> None:
        """Forget every held permit (the connection closed)."""
        self._held.clear()
