"""The policies that apply to a topic, as Pulsar resolves them.

A value set on the topic (topic-level policies, when ``topicLevelPoliciesEnabled``) wins over
its namespace's, which wins over the broker's configuration. Every function reads the typed
in-memory views of the stored policies (:class:`starquake.broker.policy_types.Policies`, made
once per stored version), so they are cheap enough to call on each periodic check: a policy
change takes effect on live topics at the next check, without a restart.

Stored field names (the same at both levels; Pulsar's names in its ``Policies``)::

    retention_policies          {"retentionTimeInMinutes": m, "retentionSizeInMB": s}
    message_ttl_in_seconds      seconds
    deduplicationEnabled        bool
    backlog_quota_map           {"destination_storage" | "message_age":
                                     {"limitSize": bytes, "limitTime": seconds, "policy": name}}
    max_producers_per_topic, max_consumers_per_topic
    max_unacked_messages_per_consumer, max_unacked_messages_per_subscription
    delayed_delivery_policies   {"active": bool, "tickTime": ms, "maxDeliveryDelayInMillis": ms}
    compaction_threshold        bytes
    inactive_topic_policies     {"inactiveTopicDeleteMode": mode,
                                 "maxInactiveDurationSeconds": s, "deleteWhileInactive": bool}
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from starquake.broker.policy_types import DESTINATION_STORAGE, Policies
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.contexts import PolicyContext

__all__ = [
    "AutoTopicCreation",
    "BacklogQuota",
    "DelayedDelivery",
    "InactiveTopicPolicy",
    "RetentionPolicy",
    "applied",
    "auto_topic_creation",
    "backlog_quota",
    "compaction_threshold",
    "deduplication",
    "delayed_delivery",
    "inactive_topic_policy",
    "max_consumers",
    "max_producers",
    "max_unacked_per_consumer",
    "max_unacked_per_subscription",
    "message_ttl",
    "retention",
]


T = TypeVar("T")


def applied(
    service: PolicyContext, topic: TopicName, pick: Callable[[Policies], T | None]
) -> T | None:
    """The topic's own value of the policy ``pick`` reads, else its namespace's (None when
    neither sets it)."""
    resources = service.resources
    if service.config.topicLevelPoliciesEnabled:
        value = pick(resources.topic_view(topic))
        if value is not None:
            return value
    return pick(resources.namespace_view(topic.namespace_name))


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """How long and how much acknowledged data to keep (-1: no limit, 0: keep nothing)."""

    time_minutes: int
    size_mb: int

    @property
    def infinite(self) -> bool:
        """Whether acknowledged messages are kept forever (both limits negative)."""
        return self.time_minutes < 0 and self.size_mb < 0


def retention(service: PolicyContext, topic: TopicName) -> RetentionPolicy:
    """The retention that applies to a topic: topic, then namespace, then broker default."""
    value = applied(service, topic, lambda p: p.retention_policies)
    if value is None:
        config = service.config
        return RetentionPolicy(
            config.defaultRetentionTimeInMinutes, config.defaultRetentionSizeInMB
        )
    return RetentionPolicy(value.retention_time_in_minutes, value.retention_size_in_mb)


def message_ttl(service: PolicyContext, topic: TopicName) -> int:
    """Seconds after which unacknowledged messages expire (0: never)."""
    value = applied(service, topic, lambda p: p.message_ttl_in_seconds)
    return service.config.ttlDurationDefaultInSeconds if value is None else value


def deduplication(service: PolicyContext, topic: TopicName) -> bool:
    """Whether message deduplication is on for a topic."""
    value = applied(service, topic, lambda p: p.deduplication_enabled)
    return service.config.brokerDeduplicationEnabled if value is None else value


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """A backlog quota: ``limit_size`` bytes or ``limit_time`` seconds (-1: no limit)."""

    limit_size: int
    limit_time: int
    policy: str


def backlog_quota(service: PolicyContext, topic: TopicName, kind: str) -> BacklogQuota | None:
    """The quota of ``kind`` (``destination_storage`` or ``message_age``), or None.

    Each kind resolves on its own, as in Pulsar: a topic that sets only one kind keeps its
    namespace's quota of the other."""
    value = applied(service, topic, lambda p: p.backlog_quota_map.get(kind))
    config = service.config
    if value is None:
        if kind == DESTINATION_STORAGE:
            size, seconds = config.backlogQuotaDefaultLimitBytes, -1
        else:
            size, seconds = -1, config.backlogQuotaDefaultLimitSecond
        policy = config.backlogQuotaDefaultRetentionPolicy
    else:
        size, seconds, policy = value.size_bytes, value.time_seconds, value.policy
    if (size if kind == DESTINATION_STORAGE else seconds) < 0:
        return None
    return BacklogQuota(size, seconds, policy)


def _limit(
    service: PolicyContext, topic: TopicName, pick: Callable[[Policies], int | None], default: int
) -> int:
    value = applied(service, topic, pick)
    return default if value is None else value


def max_producers(service: PolicyContext, topic: TopicName) -> int:
    """How many producers a topic admits (0: no limit)."""
    return _limit(service, topic, lambda p: p.max_producers_per_topic, 0)


def max_consumers(service: PolicyContext, topic: TopicName) -> int:
    """How many consumers a topic admits over all its subscriptions (0: no limit)."""
    return _limit(service, topic, lambda p: p.max_consumers_per_topic, 0)


def max_unacked_per_consumer(service: PolicyContext, topic: TopicName) -> int:
    """The unacknowledged-message limit of each consumer of a topic (0: none)."""
    return _limit(
        service,
        topic,
        lambda p: p.max_unacked_messages_per_consumer,
        service.config.maxUnackedMessagesPerConsumer,
    )


def max_unacked_per_subscription(service: PolicyContext, topic: TopicName) -> int:
    """The unacknowledged-message limit of each subscription of a topic (0: none)."""
    return _limit(
        service,
        topic,
        lambda p: p.max_unacked_messages_per_subscription,
        service.config.maxUnackedMessagesPerSubscription,
    )


class DelayedDelivery(NamedTuple):
    """Whether delayed delivery is on, and the tick of its tracker."""

    enabled: bool
    tick_ms: int


def delayed_delivery(service: PolicyContext, topic: TopicName) -> DelayedDelivery:
    """Whether delayed delivery is on for a topic, and its tick in milliseconds."""
    value = applied(service, topic, lambda p: p.delayed_delivery_policies)
    config = service.config
    if value is None:
        return DelayedDelivery(config.delayedDeliveryEnabled, config.delayedDeliveryTickTimeMillis)
    tick = config.delayedDeliveryTickTimeMillis if value.tick_time is None else value.tick_time
    return DelayedDelivery(value.active, tick)


def max_delivery_delay_ms(service: PolicyContext, topic: TopicName) -> int:
    """The longest delivery delay a producer may ask for on ``topic`` (0: any): the delayed
    delivery policy's ``maxDeliveryDelayInMillis``, when delayed delivery is on."""
    enabled = delayed_delivery(service, topic).enabled
    value = applied(service, topic, lambda p: p.delayed_delivery_policies)
    if not enabled or value is None or value.max_delivery_delay_in_millis is None:
        return 0
    return value.max_delivery_delay_in_millis


def compaction_threshold(service: PolicyContext, topic: TopicName) -> int:
    """Backlog bytes past which the topic is compacted automatically (0: never)."""
    return _limit(
        service,
        topic,
        lambda p: p.compaction_threshold,
        service.config.brokerServiceCompactionThresholdInBytes,
    )


class AutoTopicCreation(NamedTuple):
    """Whether a topic is created on first use, of which type and how many partitions."""

    allowed: bool
    topic_type: str
    """``partitioned`` or ``non-partitioned``."""
    partitions: int


def auto_topic_creation(service: PolicyContext, namespace: str) -> AutoTopicCreation:
    """How topics of ``namespace`` are created on first use: the namespace's override, else
    the broker's settings."""
    override = service.resources.namespace_view(namespace).auto_topic_creation_override
    config = service.config
    if override is None:
        return AutoTopicCreation(
            config.allowAutoTopicCreation,
            config.allowAutoTopicCreationType,
            config.defaultNumPartitions,
        )
    return AutoTopicCreation(
        override.allow_auto_topic_creation,
        override.topic_type or config.allowAutoTopicCreationType,
        override.default_num_partitions or config.defaultNumPartitions,
    )


@dataclass(frozen=True, slots=True)
class InactiveTopicPolicy:
    """When an inactive topic is deleted: on or off, after how long, and how idle."""

    delete_while_inactive: bool
    max_inactive_seconds: int
    mode: str  # delete_when_no_subscriptions | delete_when_subscriptions_caught_up


def inactive_topic_policy(service: PolicyContext, topic: TopicName) -> InactiveTopicPolicy:
    """The inactive-topic policy of a topic: topic, then namespace, then broker."""
    value = applied(service, topic, lambda p: p.inactive_topic_policies)
    config = service.config
    duration = config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
    if duration < 0:
        duration = int(config.brokerDeleteInactiveTopicsFrequencySeconds)
    mode = config.brokerDeleteInactiveTopicsMode
    if value is None:
        return InactiveTopicPolicy(config.brokerDeleteInactiveTopicsEnabled, duration, mode)
    return InactiveTopicPolicy(
        value.delete_while_inactive,
        duration
        if value.max_inactive_duration_seconds is None
        else value.max_inactive_duration_seconds,
        mode if value.inactive_topic_delete_mode is None else value.inactive_topic_delete_mode,
    )
