"""A subscription: a named cursor over a topic, its consumers and its dispatcher."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from starquake.broker.consumer import Consumer, SubType
from starquake.broker.dispatch.base import Dispatcher
from starquake.broker.dispatch.shared import SharedDispatcher
from starquake.broker.dispatch.single_active import SingleActiveConsumerDispatcher
from starquake.broker.errors import BrokerServiceError, ConsumerBusyError
from starquake.protocol.errors import ServerError
from starquake.storage import ManagedCursor, Position

if TYPE_CHECKING:
    from starquake.broker.topic import PersistentTopic

log = logging.getLogger(__name__)

_SIGNED = 1 << 63
_U64 = 1 << 64


def to_signed(value: int) -> int:
    """Wire ids are uint64; -1 travels as 2**64-1."""
    return value - _U64 if value >= _SIGNED else value


class Subscription:
    """A durable or non-durable subscription of a persistent topic."""

    def __init__(
        self, topic: PersistentTopic, name: str, cursor: ManagedCursor, *, durable: bool
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.sub_type: SubType | None = None
        self.dispatcher: Dispatcher | None = None
        self.redelivery_counts: dict[Position, int] = {}

    @property
    def consumers(self) -> list[Consumer]:
        return list(self.dispatcher.consumers) if self.dispatcher else []

    # --- consumers ----------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer; the first one fixes the subscription type."""
        dispatcher = self.dispatcher
        if dispatcher is not None and dispatcher.consumers:
            if consumer.sub_type != self.sub_type:
                current = self.sub_type.name if self.sub_type is not None else "?"
                raise ConsumerBusyError(
                    f"Subscription {self.name} is of type {current}; "
                    f"a {consumer.sub_type.name} consumer cannot join it"
                )
            if consumer.sub_type == SubType.Exclusive:
                raise ConsumerBusyError("Exclusive consumer is already connected")
        if dispatcher is None or self.sub_type != consumer.sub_type:
            if dispatcher is not None:
                dispatcher.close()
            self.sub_type = consumer.sub_type
            self.dispatcher = self._new_dispatcher(consumer.sub_type)
        assert self.dispatcher is not None
        self.dispatcher.add_consumer(consumer)

    def _new_dispatcher(self, sub_type: SubType) -> Dispatcher:
        batch = self.topic.service.config.dispatcherMaxReadBatchSize
        if sub_type in (SubType.Shared, SubType.Key_Shared):
            return SharedDispatcher(self, batch)
        return SingleActiveConsumerDispatcher(self, batch, failover=sub_type == SubType.Failover)

    def remove_consumer(self, consumer: Consumer) -> None:
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        if not self.durable and not self.consumers:
            self.topic.remove_subscription(self.name)

    # --- acknowledgments ----------------------------------------------------------------------

    def acknowledge_individual(self, consumer: Consumer, positions: Sequence[Position]) -> None:
        cursor = self.cursor
        counts = self.redelivery_counts
        for position in positions:
            consumer.pending_acks.pop(position, None)
            if counts:
                counts.pop(position, None)
        cursor.delete(positions)
        self.topic.service.cursor_changed()

    def acknowledge_cumulative(self, consumer: Consumer, position: Position) -> None:
        if self.sub_type in (SubType.Shared, SubType.Key_Shared):
            raise BrokerServiceError(
                "Cumulative acknowledgment is not allowed on Shared or Key_Shared subscriptions",
                ServerError.NotAllowedError,
            )
        if position.entry_id < -1:
            return
        self.cursor.mark_delete(position)
        for pending in [p for p in consumer.pending_acks if p <= position]:
            del consumer.pending_acks[pending]
        if self.redelivery_counts:
            for counted in [p for p in self.redelivery_counts if p <= position]:
                del self.redelivery_counts[counted]
        self.topic.service.cursor_changed()

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        if self.dispatcher is not None:
            self.dispatcher.redeliver(consumer, positions)

    # --- cursor moves -------------------------------------------------------------------------

    def reset_cursor(self, position: Position) -> None:
        """Move the subscription to ``position``: it and everything after it become unacked."""
        self.cursor.reset(position)
        self.redelivery_counts.clear()
        if self.dispatcher is not None:
            self.dispatcher.reset()
        self.topic.service.cursor_changed()

    def on_new_entries(self) -> None:
        if self.dispatcher is not None and self.dispatcher.consumers:
            self.dispatcher.schedule()

    def backlog(self) -> int:
        return self.cursor.backlog()

    def close(self) -> None:
        if self.dispatcher is not None:
            self.dispatcher.close()
