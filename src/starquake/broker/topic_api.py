"""What a connection needs from a topic, persistent or not.

:class:`~starquake.broker.topic.PersistentTopic` and
:class:`~starquake.broker.nonpersistent.NonPersistentTopic` both satisfy :class:`TopicApi`, and
their subscriptions :class:`~starquake.broker.consumer.SubscriptionApi` (defined next to the
consumer, which holds its subscription); code that needs storage (seek, cursors, the managed
ledger) checks for the persistent classes explicitly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from starquake.broker.consumer import SubscribedTopic, SubscriptionApi
from starquake.broker.producer import ProducerTopic
from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.producer import Producer
    from starquake.broker.producer_access import ProducerRegistry


class TopicApi(SubscribedTopic, ProducerTopic, Protocol):
    """A topic as connections see it: what they read through a consumer's subscription
    (:class:`~starquake.broker.consumer.SubscribedTopic`) and through a producer
    (:class:`~starquake.broker.producer.ProducerTopic`), and more."""

    @property
    def closed(self) -> bool:
        """The topic is closing or closed (unloaded, deleted): it takes no new producer or
        consumer (one registering across the close is told to retry)."""

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

    def generate_producer_name(self) -> str:
        """A producer name unique in the cluster, for producers that bring none."""

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

    def stats(self) -> dict[str, Any]:
        """The topic's stats in Pulsar's JSON shape."""

    def close(self) -> None:
        """Disconnect every producer and consumer and stop taking messages."""
