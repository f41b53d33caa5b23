"""Per-topic limits a namespace may set: how many producers and consumers a topic admits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starquake.broker.errors import ConsumerBusyError, ProducerBusyError

if TYPE_CHECKING:
    from starquake.broker.nonpersistent import NonPersistentTopic
    from starquake.broker.topic import PersistentTopic


def check_producer_limit(topic: PersistentTopic | NonPersistentTopic) -> None:
    """Refuse one more producer once ``maxProducersPerTopic`` are attached."""
    limit = topic.service.policy_limit(topic.name.namespace_name, "max_producers_per_topic")
    if limit and len(topic.producers) >= limit:
        raise ProducerBusyError(f"Topic reached max producers limit ({limit})")


def check_consumer_limit(topic: PersistentTopic | NonPersistentTopic) -> None:
    """Refuse one more consumer once ``maxConsumersPerTopic`` are attached over all
    subscriptions."""
    limit = topic.service.policy_limit(topic.name.namespace_name, "max_consumers_per_topic")
    if limit and sum(len(s.consumers) for s in topic.subscriptions.values()) >= limit:
        raise ConsumerBusyError(f"Topic reached max consumers limit ({limit})")
