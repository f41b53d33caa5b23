"""Non-persistent topics: nothing is stored; each message goes straight to connected consumers.

The producer's receipt is sent at once with id -1:-1. For every subscription the message goes to
one consumer chosen by the subscription type (the active one for Exclusive/Failover, round-robin
for Shared, the key's owner for Key_Shared), or to nobody: a message for a consumer without
permits, or whose connection already has ``nonPersistentMaxPendingBytesPerConnection`` bytes
waiting to be written, is dropped and counted (``msgDropRate`` style counters in the stats).
Messages reach consumers as id ``0:0`` (with their batch index), as Pulsar sends them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from starquake.broker import topic_stats
from starquake.broker.consumer import Consumer
from starquake.broker.dedup import MessageDeduplication
from starquake.broker.dispatch.round_robin import RoundRobin
from starquake.broker.entry_info import EntryInfo, EntryInfoCache, LastMessage
from starquake.broker.errors import (
    ConsumerAssignError,
    ConsumerBusyError,
    ServiceNotReadyError,
    SubscriptionNotFoundError,
)
from starquake.broker.limits import check_consumer_limit, check_producer_limit
from starquake.broker.producer_access import ProducerRegistry, generated_producer_name
from starquake.broker.rates import RateWindow
from starquake.broker.selectors import (
    ConsistentHashingSelector,
    sticky_key_hash,
)
from starquake.broker.selectors import ConsumerAssignError as SelectorRefusal
from starquake.common.topic_name import TopicName
from starquake.protocol import commands
from starquake.protocol.enums import SubType
from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.contexts import TopicContext
    from starquake.broker.producer import Producer, RunEntry
    from starquake.broker.transactions.buffer import TopicTransactionBuffer

log = logging.getLogger(__name__)

NO_POSITION = Position(-1, -1)
_DISPATCH_POSITION = Position(0, 0)


class NonPersistentDispatcher:
    """Chooses the consumer of each message of one non-persistent subscription."""

    def __init__(self, subscription: NonPersistentSubscription, sub_type: SubType) -> None:
        self.subscription = subscription
        self.sub_type = sub_type
        self.consumers: list[Consumer] = []
        self._round_robin = RoundRobin()
        self.selector: ConsistentHashingSelector[Consumer] | None = None
        if sub_type == SubType.Key_Shared:
            self.selector = ConsistentHashingSelector(
                subscription.topic.service.config.subscriptionKeySharedConsistentHashingReplicaPoints
            )

    def add_consumer(self, consumer: Consumer) -> None:
        """Take a consumer in (Key_Shared: give it its hash ranges)."""
        if self.selector is not None:
            try:
                self.selector.add_consumer(consumer, consumer.name)
            except SelectorRefusal as exc:
                raise ConsumerAssignError(str(exc)) from None
        self.consumers.append(consumer)
        self._round_robin.consumers_changed(self.consumers)
        if self.sub_type == SubType.Failover:
            self._notify_active()

    def remove_consumer(self, consumer: Consumer) -> None:
        """Let a consumer go; Failover hands its place to the next one."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        self._round_robin.consumers_changed(self.consumers)
        if self.selector is not None:
            self.selector.remove_consumer(consumer)
        if self.sub_type == SubType.Failover:
            self._notify_active()

    def _active(self) -> Consumer | None:
        if not self.consumers:
            return None
        best = min(c.priority_level for c in self.consumers)
        return next(c for c in self.consumers if c.priority_level == best)

    def _notify_active(self) -> None:
        active = self._active()
        for consumer in self.consumers:
            consumer.cnx.write(
                commands.active_consumer_change(consumer.consumer_id, consumer is active)
            )

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        """Add a consumer's FLOW permits."""
        consumer.permits += permits

    def schedule(self) -> None:
        """Nothing is stored, so there is never anything to catch up on."""

    def choose(self, info: EntryInfo) -> Consumer | None:
        """The consumer that should get a message now, by subscription type; None if nobody."""
        if self.sub_type in (SubType.Exclusive, SubType.Failover):
            return self._active()
        if self.selector is not None:
            return self.selector.select(sticky_key_hash(info.sticky_key))
        return self._round_robin.pick(self.consumers, _has_permits)


class NonPersistentSubscription:
    """A subscription of a non-persistent topic: consumers only, no cursor, no backlog."""

    durable = False

    def __init__(self, topic: NonPersistentTopic, name: str) -> None:
        self.topic = topic
        self.name = name
        self.dispatcher: NonPersistentDispatcher | None = None
        self.msg_drop_counter = 0
        self.last_consumed_flow_timestamp = 0
        """When a consumer last asked for messages (epoch milliseconds; 0: never)."""
        self.departed_out = (0, 0)
        """Messages and bytes dispatched to consumers that have left."""
        self.rates = RateWindow()
        self.expired_counter = 0  # nothing is kept, so nothing expires
        self.expiry_rates = RateWindow()

    @property
    def consumers(self) -> list[Consumer]:
        """The connected consumers, in the dispatcher's order."""
        return list(self.dispatcher.consumers) if self.dispatcher else []

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer, refusing one whose type clashes with those attached."""
        check_consumer_limit(self.topic)
        dispatcher = self.dispatcher
        if dispatcher is not None and dispatcher.consumers:
            if dispatcher.sub_type != consumer.sub_type:
                raise ConsumerBusyError(
                    f"Subscription {self.name} is of type {dispatcher.sub_type.name}; "
                    f"a {consumer.sub_type.name} consumer cannot join it"
                )
            if consumer.sub_type == SubType.Exclusive:
                raise ConsumerBusyError("Exclusive consumer is already connected")
        if dispatcher is None or dispatcher.sub_type != consumer.sub_type:
            dispatcher = NonPersistentDispatcher(self, consumer.sub_type)
            self.dispatcher = dispatcher
        dispatcher.add_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; the subscription goes when its last consumer does."""
        self.topic.last_active = time.monotonic()
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        messages, size = self.departed_out
        self.departed_out = (messages + consumer.msg_out_counter, size + consumer.bytes_out_counter)
        if not self.consumers:
            self.topic.subscriptions.pop(self.name, None)

    def deliver(self, entry: bytes, info: EntryInfo, max_pending: int) -> None:
        """Send a message to its consumer now, or drop and count it."""
        dispatcher = self.dispatcher
        consumer = dispatcher.choose(info) if dispatcher is not None else None
        if (
            consumer is None
            or consumer.permits <= 0
            or consumer.cnx.pending_write_bytes() > max_pending
        ):
            self.msg_drop_counter += info.num_messages
            return
        header = commands.message_frame_header(
            consumer.consumer_id, 0, 0, len(entry), 0, consumer.partition_index
        )
        consumer.permits -= info.num_messages  # before the write, which may hold permits back
        if info.chunk_uuid:
            consumer.chunk_counter += 1
        consumer.msg_out_counter += info.num_messages
        consumer.bytes_out_counter += len(entry)
        consumer.dispatched(info.num_messages)
        consumer.cnx.write_frames([header, entry])

    # Acknowledgments and redelivery mean nothing without storage.
    def acknowledge_individual(self, consumer: Consumer, positions: Sequence[Position]) -> None:
        """Nothing to do: non-persistent messages need no acknowledgment."""
        return None

    def acknowledge_batch_index(
        self, consumer: Consumer, position: Position, ack_set: Sequence[int], batch_size: int
    ) -> None:
        """Nothing to do: non-persistent messages need no acknowledgment."""
        return None

    def acknowledge_cumulative(self, consumer: Consumer, position: Position) -> None:
        """Nothing to do: non-persistent messages need no acknowledgment."""
        return None

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Nothing to do: a non-persistent message is never delivered twice."""
        return None

    def backlog(self) -> int:
        """Always 0: nothing waits for a non-persistent subscription."""
        return 0


class NonPersistentTopic:
    """A topic whose messages live only on their way from producer to consumers."""

    is_persistent = False
    txn: TopicTransactionBuffer | None = None
    """No transactions on a non-persistent topic."""

    def __init__(self, service: TopicContext, name: TopicName) -> None:
        self.service = service
        self.name = name
        self.full_name = str(name)
        self.partition_index = name.partition_index
        self.producer_registry = ProducerRegistry()
        self.subscriptions: dict[str, NonPersistentSubscription] = {}
        self.entry_infos = EntryInfoCache(1)
        self.dedup = MessageDeduplication(self.full_name, enabled=False)
        self.closed = False
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        self.last_active = time.monotonic()
        """When the topic was last seen active (for the deletion of inactive topics)."""
        self.rates = RateWindow()

    @property
    def producers(self) -> dict[int, Producer]:
        """The connected producers by producer id."""
        return self.producer_registry.producers

    def add_producer(self, producer: Producer) -> bool:
        """Admit a producer within the topic's limits and access mode."""
        check_producer_limit(self)
        return self.producer_registry.admit(producer)

    def remove_producer(self, producer: Producer) -> None:
        """Forget a producer that closed or disconnected (the topic was active until now)."""
        self.producer_registry.remove(producer)
        self.last_active = time.monotonic()

    def last_sequence_id(self, producer_name: str) -> int:
        """Always -1: a non-persistent topic keeps no sequence ids."""
        return -1

    def generate_producer_name(self) -> str:
        """A producer name unique in the cluster, for producers that bring none."""
        config = self.service.config
        return generated_producer_name(f"{config.clusterName}-np-{self.service.instance_id}")

    def publish(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        info: EntryInfo,
        entry: bytes,
        *,
        last_chunk: bool = True,
    ) -> None:
        """Hand the message to every subscription now, then confirm it with id -1:-1."""
        if self.closed:
            raise ServiceNotReadyError("Topic is being closed")
        self.msg_in_counter += info.num_messages
        self.bytes_in_counter += len(entry)
        producer.msg_in_counter += info.num_messages
        producer.bytes_in_counter += len(entry)
        if info.chunk_uuid:
            producer.chunk_counter += 1
        limit = self.service.config.nonPersistentMaxPendingBytesPerConnection
        for subscription in list(self.subscriptions.values()):
            subscription.deliver(entry, info, limit)
        producer.on_receipt(
            commands.send_receipt(producer.producer_id, sequence_id, -1, -1, highest_sequence_id)
        )

    takes_runs = False
    """Each message is handed on as it comes (:meth:`publish`)."""

    def publish_run(self, producer: Producer, run: Sequence[RunEntry]) -> None:
        """:meth:`publish` each entry of ``run`` (the connection does not call it here)."""
        if self.closed:
            raise ServiceNotReadyError("Topic is being closed")
        for sequence_id, highest, info, entry, last_chunk in run:
            self.publish(producer, sequence_id, highest, info, entry, last_chunk=last_chunk)

    def forget_new_subscription(self, name: str) -> None:
        """Nothing to undo: non-persistent subscriptions are never stored."""

    def get_or_create_subscription(
        self,
        name: str,
        *,
        durable: bool,
        initial_earliest: bool,
        start: Position | None,
        start_inclusive: bool,
    ) -> NonPersistentSubscription:
        """Subscriptions here are never durable and have no start position."""
        subscription = self.subscriptions.get(name)
        if subscription is None:
            subscription = NonPersistentSubscription(self, name)
            self.subscriptions[name] = subscription
        return subscription

    def batch_size_of(self, position: Position) -> int:
        """Always 1: no entry is kept to look the batch size up in."""
        return 1

    def remove_subscription(self, name: str) -> None:
        """Forget a subscription (no-op if unknown)."""
        if self.subscriptions.pop(name, None) is not None:
            self.last_active = time.monotonic()

    def unsubscribe(self, name: str) -> None:
        """Delete a subscription that has no connected consumers."""
        subscription = self.subscriptions.get(name)
        if subscription is None:
            raise SubscriptionNotFoundError(f"Subscription {name} not found")
        if subscription.consumers:
            raise ConsumerBusyError(f"Subscription {name} has connected consumers")
        self.remove_subscription(name)

    async def last_message_position(self) -> LastMessage:
        """No position and batch index -1: nothing is stored."""
        return LastMessage(NO_POSITION, -1)

    def stats(self) -> dict[str, Any]:
        """The topic's stats in Pulsar's JSON shape."""
        return topic_stats.nonpersistent_stats(self)

    def close(self) -> None:
        """Refuse new messages and disconnect every producer and consumer."""
        self.closed = True
        for producer in list(self.producers.values()):
            producer.disconnect()
        for subscription in list(self.subscriptions.values()):
            for consumer in subscription.consumers:
                consumer.cnx.disconnect_consumer(consumer)


__all__ = ["NonPersistentTopic"]


def _has_permits(consumer: Consumer) -> bool:
    return consumer.permits > 0
