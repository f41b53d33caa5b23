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
    from starquake.broker.producers import ProducerRegistry


class DispatcherApi(Protocol):
    """The dispatcher calls a connection makes."""

    @property
    def consumers(self) -> list[Consumer]: ...

    def consumer_flow(self, consumer: Consumer, permits: int) -> None: ...

    def schedule(self) -> None: ...


class SubscriptionApi(Protocol):
    """A subscription as connections see it."""

    @property
    def name(self) -> str: ...

    @property
    def durable(self) -> bool: ...

    @property
    def topic(self) -> TopicApi: ...

    @property
    def consumers(self) -> list[Consumer]: ...

    @property
    def dispatcher(self) -> DispatcherApi | None: ...

    def add_consumer(self, consumer: Consumer) -> None: ...

    def remove_consumer(self, consumer: Consumer) -> None: ...

    def acknowledge_individual(self, consumer: Consumer, positions: Sequence[Position]) -> None: ...

    def acknowledge_batch_index(
        self, consumer: Consumer, position: Position, ack_set: Sequence[int], batch_size: int
    ) -> None: ...

    def acknowledge_cumulative(self, consumer: Consumer, position: Position) -> None: ...

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None: ...

    def backlog(self) -> int: ...


class TopicApi(Protocol):
    """A topic as connections see it."""

    @property
    def full_name(self) -> str: ...

    @property
    def partition_index(self) -> int: ...

    @property
    def is_persistent(self) -> bool: ...

    @property
    def producer_registry(self) -> ProducerRegistry: ...

    @property
    def producers(self) -> dict[int, Producer]: ...

    @property
    def subscriptions(self) -> Mapping[str, SubscriptionApi]: ...

    def add_producer(self, producer: Producer) -> bool: ...

    def remove_producer(self, producer: Producer) -> None: ...

    def generate_producer_name(self) -> str: ...

    def last_sequence_id(self, producer_name: str) -> int: ...

    def publish(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        info: EntryInfo,
        entry: bytes,
        *,
        last_chunk: bool = True,
    ) -> None: ...

    def get_or_create_subscription(
        self,
        name: str,
        *,
        durable: bool,
        initial_earliest: bool,
        start: Position | None,
        start_inclusive: bool,
    ) -> SubscriptionApi: ...

    def remove_subscription(self, name: str) -> None: ...

    def unsubscribe(self, name: str) -> None: ...

    def last_message_position(self) -> tuple[Position, int]: ...

    def batch_size_of(self, position: Position) -> int: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...
