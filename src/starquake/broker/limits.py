"""Per-topic limits a topic or namespace policy may set: how many producers and consumers a
topic admits (``maxProducers`` / ``maxConsumers`` on the topic first, then the namespace's
``maxProducersPerTopic`` / ``maxConsumersPerTopic``; 0 or unset: no limit)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starquake.broker import applied_policies
from starquake.broker.errors import ConsumerBusyError, ProducerBusyError

if TYPE_CHECKING:
    from starquake.broker.nonpersistent import NonPersistentTopic
    from starquake.broker.topic import PersistentTopic


def _limit(topic: PersistentTopic | NonPersistentTopic, field: str) -> int:
    value = applied_policies.applied(topic.service, topic.name, field)
    return int(value) if value else 0


def check_producer_limit(topic: PersistentTopic | NonPersistentTopic) -> None:
    """Refuse one more producer once the applied producer limit is reached."""
    limit = _limit(topic, "max_producers_per_topic")
    if limit and len(topic.producers) >= limit:
        raise ProducerBusyError(f"Topic reached max producers limit ({limit})")


def check_consumer_limit(topic: PersistentTopic | NonPersistentTopic) -> None:
    """Refuse one more consumer once the applied consumer limit is reached, counted over all
    subscriptions."""
    limit = _limit(topic, "max_consumers_per_topic")
    if limit and sum(len(s.consumers) for s in topic.subscriptions.values()) >= limit:
        raise ConsumerBusyError(f"Topic reached max consumers limit ({limit})")
