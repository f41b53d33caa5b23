"""What a connection needs from a topic and a subscription, persistent or not.

:class:`~starquake.broker.topic.PersistentTopic` and
:class:`~starquake.broker.nonpersistent.NonPersistentTopic` (and their subscriptions) both
satisfy these protocols; code that needs storage (seek, cursors, the managed ledger) checks for the
persistent classes explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.entry_info import EntryInfo
    from starquake.broker.producer import Producer
    from starquake.broker.producer_access import ProducerRegistry


class DispatcherApi(Protocol):
    """The dispatcher calls a connection makes."""

    @property
    def consumers(self) -> list[Consumer]:
        """The consumers the dispatcher sends to."""

    def consumer_flow(self, consumer: Consumer, permits: int) -> None:
        """Add permits that a consumer's FLOW grants, then dispatch."""

    def schedule(self) -> None:
        """Dispatch soon (once per loop iteration however often it is asked)."""


class SubscriptionApi(Protocol):
    """A subscription as connections see it."""

    @property
    def name(self) -> str:
        """The subscription's name."""

    @property
    def durable(self) -> bool:
        """Whether the subscription's cursor survives a restart."""

    @property
    def topic(self) -> TopicApi:
        """The topic the subscription belongs to."""

    @property
    def consumers(self) -> list[Consumer]:
        """The connected consumers."""

    @property
    def dispatcher(self) -> DispatcherApi | None:
        """The dispatcher of the current subscription type; None before any consumer."""

    last_consumed_flow_timestamp: int
    """When a consumer last asked for messages (epoch milliseconds; 0: never)."""

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer (raises if its type or limits forbid it)."""

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; its unacknowledged messages go to others."""

    def acknowledge_individual(self, consumer: Consumer, positions: Sequence[Position]) -> None:
        """Acknowledge these messages one by one."""

    def acknowledge_batch_index(
        self, consumer: Consumer, position: Position, ack_set: Sequence[int], batch_size: int
    ) -> None:
        """Acknowledge some messages of a batch (``ack_set``: those left)."""

    def acknowledge_cumulative(self, consumer: Consumer, position: Position) -> None:
        """Acknowledge everything up to and including ``position``."""

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Send again a consumer's unacknowledged messages (all of them if None)."""

    def backlog(self) -> int:
        """How many messages wait to be acknowledged."""


class TopicApi(Protocol):
    """A topic as connections see it."""

    @property
    def full_name(self) -> str:
        """The topic's full name (``persistent://tenant/namespace/topic``)."""

    @property
    def partition_index(self) -> int:
        """The partition's index, or -1 for a topic that is not a partition."""

    @property
    def is_persistent(self) -> bool:
        """Whether messages are stored (``persistent://``)."""

    @property
    def producer_registry(self) -> ProducerRegistry:
        """Who may produce: the producers and the access mode's state."""

    @property
    def producers(self) -> dict[int, Producer]:
        """The connected producers by producer id."""

    @property
    def subscriptions(self) -> Mapping[str, SubscriptionApi]:
        """The subscriptions by name."""

    def add_producer(self, producer: Producer) -> bool:
        """Admit a producer (False: wait, an exclusive producer holds the topic)."""

    def remove_producer(self, producer: Producer) -> None:
        """Forget a producer that closed or disconnected."""

    def generate_producer_name(self) -> str:
        """A producer name unique in the cluster, for producers that bring none."""

    def last_sequence_id(self, producer_name: str) -> int:
        """The last sequence id stored for a producer name (-1: none)."""

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
        """Store or hand on a message; its receipt goes to the producer when done."""

    def get_or_create_subscription(
        self,
        name: str,
        *,
        durable: bool,
        initial_earliest: bool,
        start: Position | None,
        start_inclusive: bool,
    ) -> SubscriptionApi:
        """The named subscription, created at the given start if new."""

    def remove_subscription(self, name: str) -> None:
        """Forget a subscription (no-op if unknown)."""

    def forget_new_subscription(self, name: str) -> None:
        """Undo the creation of a durable subscription whose storing failed."""

    def unsubscribe(self, name: str) -> None:
        """Delete a subscription that has no connected consumers."""

    def last_message_position(self) -> tuple[Position, int]:
        """The position of the last message and its batch index."""

    def batch_size_of(self, position: Position) -> int:
        """How many messages the entry at ``position`` holds."""

    def stats(self) -> dict[str, Any]:
        """The topic's stats in Pulsar's JSON shape."""

    def close(self) -> None:
        """Disconnect every producer and consumer and stop taking messages."""
