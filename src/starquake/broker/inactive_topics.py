"""Deleting inactive topics, as Pulsar's broker does (``brokerDeleteInactiveTopics*``).

Every ``brokerDeleteInactiveTopicsFrequencySeconds`` each loaded topic is checked against the
inactive-topic policy that applies to it (topic, namespace, then broker settings). A topic is
active while it has producers or consumers, and, by the policy's mode, while it has
subscriptions (``delete_when_no_subscriptions``) or while a subscription has a backlog
(``delete_when_subscriptions_caught_up``). A topic that has stayed inactive for
``maxInactiveDurationSeconds`` is deleted with its data (and, in the second mode, its caught-up
subscriptions). A partition is deleted on its own; its partitioned topic's metadata stays, so
the partition comes back on the next use, as Pulsar does by default. Non-persistent topics are
simply dropped from memory. As in Pulsar, system topics (the transaction coordinators' logs)
are never deleted so.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Protocol

from starquake.broker import applied_policies, system_topics, topic_admin
from starquake.broker.errors import BrokerServiceError
from starquake.broker.resources import NotFoundError
from starquake.broker.topic_admin import TopicAdminContext

if TYPE_CHECKING:
    from starquake.broker.consumer import SubscriptionApi
    from starquake.broker.nonpersistent import NonPersistentTopic
    from starquake.broker.topic import PersistentTopic

log = logging.getLogger(__name__)

NO_SUBSCRIPTIONS = "delete_when_no_subscriptions"
CAUGHT_UP = "delete_when_subscriptions_caught_up"


def is_active(topic: PersistentTopic | NonPersistentTopic, mode: str) -> bool:
    """Whether ``topic`` counts as active under the delete ``mode``."""
    if topic.producers:
        return True
    subscriptions: list[SubscriptionApi] = list(topic.subscriptions.values())
    if any(s.consumers for s in subscriptions):
        return True
    if mode == CAUGHT_UP:
        return any(s.durable and s.backlog() > 0 for s in subscriptions)
    return any(s.durable for s in subscriptions)


class InactiveTopicsContext(TopicAdminContext, Protocol):
    """What the deletion of inactive topics reads of the broker: every loaded topic, and what
    deleting one takes."""

    def all_topics(self) -> list[PersistentTopic | NonPersistentTopic]:
        """Every loaded topic, persistent and non-persistent."""


async def delete_inactive_topics(service: InactiveTopicsContext, now: float | None = None) -> int:
    """Delete the loaded topics that stayed inactive long enough; returns how many."""
    if now is None:
        now = time.monotonic()
    deleted = 0
    for topic in list(service.all_topics()):
        if topic.closed or system_topics.is_system_topic(topic.name):
            continue
        try:
            policy = applied_policies.inactive_topic_policy(service, topic.name)
        except NotFoundError:
            continue
        if not policy.delete_while_inactive or is_active(topic, policy.mode):
            topic.last_active = now
            continue
        if now - topic.last_active < policy.max_inactive_seconds:
            continue
        try:
            await topic_admin.delete_topic(service, topic.name, force=False)
        except BrokerServiceError as exc:
            log.warning("inactive topic %s could not be deleted: %s", topic.full_name, exc)
            continue
        log.info(
            "topic %s deleted after %d s without activity",
            topic.full_name,
            policy.max_inactive_seconds,
        )
        deleted += 1
    return deleted
