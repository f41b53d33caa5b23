"""Per-topic limits a topic or namespace policy may set: how many producers and consumers a
topic admits (``maxProducers`` / ``maxConsumers`` on the topic first, then the namespace's
``maxProducersPerTopic`` / ``maxConsumersPerTopic``; 0 or unset: no limit)."""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import TYPE_CHECKING, Protocol

from starquake.broker import applied_policies
from starquake.broker.errors import ConsumerBusyError, ProducerBusyError

if TYPE_CHECKING:
    from starquake.broker.contexts import PolicyContext
    from starquake.common.topic_name import TopicName


class _WithConsumers(Protocol):
    @property
    def consumers(self) -> Sized:
        """The connected consumers."""


class LimitedTopic(Protocol):
    """What the limits count in a topic, persistent or not."""

    @property
    def name(self) -> TopicName:
        """The topic's name (its policies apply)."""

    @property
    def service(self) -> PolicyContext:
        """Where the topic's applied policies come from."""

    @property
    def producers(self) -> Sized:
        """The connected producers."""

    @property
    def subscriptions(self) -> Mapping[str, _WithConsumers]:
        """The subscriptions by name."""


def check_producer_limit(topic: LimitedTopic) -> None:
    """Refuse one more producer once the applied producer limit is reached."""
    limit = applied_policies.max_producers(topic.service, topic.name)
    if limit and len(topic.producers) >= limit:
        raise ProducerBusyError(f"Topic reached max producers limit ({limit})")


def check_consumer_limit(topic: LimitedTopic) -> None:
    """Refuse one more consumer once the applied consumer limit is reached, counted over all
    subscriptions."""
    limit = applied_policies.max_consumers(topic.service, topic.name)
    if limit and sum(len(s.consumers) for s in topic.subscriptions.values()) >= limit:
        raise ConsumerBusyError(f"Topic reached max consumers limit ({limit})")
