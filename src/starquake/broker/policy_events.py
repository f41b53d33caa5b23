"""What a change of namespace or topic policies does to the topics already loaded.

Most policies (retention, message TTL, backlog quotas, compaction threshold, inactive-topic
deletion, producer and consumer limits) are read through
:mod:`~starquake.broker.applied_policies` each time they are checked, so a change applies from
the next check on. A few values are cached where they are used on every dispatch pass, and are
refreshed here when a policy changes:

- the unacknowledged-message limits of Shared and Key_Shared dispatchers
  (``max_unacked_messages_per_consumer`` / ``..._per_subscription``; Exclusive and Failover
  subscriptions have none, as in Pulsar);
- delayed delivery of Shared and Key_Shared subscriptions: turning it on gives them a tracker, so
  messages read from then on wait for their delivery time; turning it off hands the messages the
  tracker holds to the dispatcher, which delivers them at once. A new tick time applies to
  dispatchers created from then on (a new subscription, or after the topic is reloaded);
- the longest delivery delay a producer may ask for (``maxDeliveryDelayInMillis``, checked on
  publish as Pulsar checks it: a message whose delivery time is further than that past its
  publish time is refused with NotAllowed).

Deduplication is not refreshed here: switching it on recovers state from the stored log, which
waits for the sends in flight, so the endpoints await
:meth:`~starquake.broker.service.BrokerService.deduplication_changed` for their scope.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from starquake.broker import applied_policies
from starquake.broker.contexts import PolicyContext
from starquake.broker.delayed_delivery import InMemoryDelayedDeliveryTracker
from starquake.broker.dispatch.shared import SharedDispatcher
from starquake.broker.dispatch.single_active import SingleActiveConsumerDispatcher
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.compaction.service import CompactionService
    from starquake.broker.subscription import Subscription
    from starquake.broker.topic import PersistentTopic

__all__ = ["affected_topics", "forget_topic", "refresh", "refresh_topic"]

log = logging.getLogger(__name__)

# Later than any delivery time: asks a tracker for every position it holds.
_END_OF_TIME_MS = 1 << 62


class PolicyEventsContext(PolicyContext, Protocol):
    """What a policy change reads of the broker: the policies, the loaded topics, and the
    compactions (a compaction threshold set on a topic creates its compaction cursor)."""

    @property
    def topics(self) -> Mapping[str, PersistentTopic]:
        """The loaded persistent topics by full name."""

    @property
    def compaction(self) -> CompactionService:
        """The broker's compactions."""


def affected_topics(service: PolicyEventsContext, scope: str | TopicName) -> list[PersistentTopic]:
    """The loaded persistent topics under ``scope``: a namespace (``tenant/ns``), or a topic
    (every partition of a partitioned topic)."""
    if isinstance(scope, TopicName):
        base = scope.partitioned_topic_name
        return [t for t in service.topics.values() if t.name.partitioned_topic_name == base]
    return [t for t in service.topics.values() if t.name.namespace_name == scope]


def refresh(service: PolicyEventsContext, scope: str | TopicName) -> int:
    """Refresh the cached policy values of the loaded topics under ``scope``; how many."""
    topics = affected_topics(service, scope)
    for topic in topics:
        refresh_topic(service, topic)
    return len(topics)


def refresh_topic(service: PolicyEventsContext, topic: PersistentTopic) -> None:
    """Apply the topic's current policies to the topic and its subscriptions' dispatchers."""
    service.compaction.pre_create_cursor(topic)
    topic.max_delivery_delay_ms = applied_policies.max_delivery_delay_ms(service, topic.name)
    per_consumer = applied_policies.max_unacked_per_consumer(service, topic.name)
    per_subscription = applied_policies.max_unacked_per_subscription(service, topic.name)
    delayed, tick_ms = applied_policies.delayed_delivery(service, topic.name)
    for subscription in list(topic.subscriptions.values()):
        dispatcher = subscription.dispatcher
        if dispatcher is None or dispatcher.closed:
            continue
        if not isinstance(dispatcher, SingleActiveConsumerDispatcher):
            dispatcher.max_unacked_per_consumer = per_consumer
            dispatcher.max_unacked_per_subscription = per_subscription
        if isinstance(dispatcher, SharedDispatcher):
            _apply_delayed_delivery(subscription, dispatcher, delayed, tick_ms)
        dispatcher.schedule()


def _apply_delayed_delivery(
    subscription: Subscription, dispatcher: SharedDispatcher, enabled: bool, tick_ms: int
) -> None:
    tracker = subscription.delayed_tracker
    if enabled and tracker is None:
        strict = subscription.topic.service.config.isDelayedDeliveryDeliverAtTimeStrict
        subscription.delayed_tracker = InMemoryDelayedDeliveryTracker(tick_ms, strict)
    elif not enabled and tracker is not None:
        held = tracker.get_scheduled(len(tracker), _END_OF_TIME_MS)
        subscription.delayed_tracker = None
        if held:
            dispatcher.add_replay(held)


async def forget_topic(service: PolicyContext, topic: TopicName) -> None:
    """Remove the topic-level policies of a deleted topic, so that a topic created later under
    the same name starts without them (a partition's are its partitioned topic's: kept)."""
    if topic.is_partition or not service.resources.topic_policies(topic):
        return
    await asyncio.to_thread(service.resources.set_topic_policies, topic, {})
    log.info("topic-level policies of %s removed with the topic", topic)
