"""The policies that apply to a topic, as Pulsar resolves them.

A value set on the topic (topic-level policies, when ``topicLevelPoliciesEnabled``) wins over
its namespace's, which wins over the broker's configuration. Every function reads in-memory
copies only, so they are cheap enough to call on each periodic check: a policy change takes
effect on live topics at the next check, without a restart.

Stored field names (the same at both levels)::

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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.contexts import PolicyContext

__all__ = [
    "BacklogQuota",
    "InactiveTopicPolicy",
    "RetentionPolicy",
    "applied",
    "backlog_quota",
    "compaction_threshold",
    "deduplication",
    "delayed_delivery",
    "inactive_topic_policy",
    "max_unacked_per_consumer",
    "max_unacked_per_subscription",
    "message_ttl",
    "retention",
]

DESTINATION_STORAGE = "destination_storage"
MESSAGE_AGE = "message_age"


def applied(service: PolicyContext, topic: TopicName, field: str) -> Any:
    """The topic's own value of ``field``, else its namespace's (None when neither sets it)."""
    if service.config.topicLevelPoliciesEnabled:
        value = service.resources.topic_policy(topic, field)
        if value is not None:
            return value
    return service.resources.policy(topic.namespace_name, field)


@dataclass(frozen=True)
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
    value = applied(service, topic, "retention_policies")
    if value is None:
        config = service.config
        return RetentionPolicy(
            config.defaultRetentionTimeInMinutes, config.defaultRetentionSizeInMB
        )
    return RetentionPolicy(int(value["retentionTimeInMinutes"]), int(value["retentionSizeInMB"]))


def message_ttl(service: PolicyContext, topic: TopicName) -> int:
    """Seconds after which unacknowledged messages expire (0: never)."""
    value = applied(service, topic, "message_ttl_in_seconds")
    return service.config.ttlDurationDefaultInSeconds if value is None else int(value)


def deduplication(service: PolicyContext, topic: TopicName) -> bool:
    """Whether message deduplication is on for a topic."""
    value = applied(service, topic, "deduplicationEnabled")
    return service.config.brokerDeduplicationEnabled if value is None else bool(value)


@dataclass(frozen=True)
class BacklogQuota:
    """A backlog quota: ``limit_size`` bytes or ``limit_time`` seconds (-1: no limit)."""

    limit_size: int
    limit_time: int
    policy: str


def backlog_quota(service: PolicyContext, topic: TopicName, kind: str) -> BacklogQuota | None:
    """The quota of ``kind`` (``destination_storage`` or ``message_age``), or None.

    Each kind resolves on its own, as in Pulsar: a topic that sets only one kind keeps its
    namespace's quota of the other."""
    value = None
    if service.config.topicLevelPoliciesEnabled:
        value = (service.resources.topic_policy(topic, "backlog_quota_map") or {}).get(kind)
    if value is None:
        quotas = service.resources.policy(topic.namespace_name, "backlog_quota_map")
        value = quotas.get(kind) if quotas else None
    config = service.config
    if value is None:
        if kind == DESTINATION_STORAGE:
            size, seconds = config.backlogQuotaDefaultLimitBytes, -1
        else:
            size, seconds = -1, config.backlogQuotaDefaultLimitSecond
        if (size if kind == DESTINATION_STORAGE else seconds) < 0:
            return None
        return BacklogQuota(size, seconds, config.backlogQuotaDefaultRetentionPolicy)
    size = int(value.get("limitSize", value.get("limit", -1)))
    seconds = int(value.get("limitTime", -1))
    if (size if kind == DESTINATION_STORAGE else seconds) < 0:
        return None
    return BacklogQuota(size, seconds, str(value["policy"]))


def _limit(service: PolicyContext, topic: TopicName, field: str, default: int) -> int:
    value = applied(service, topic, field)
    return default if value is None else int(value)


def max_unacked_per_consumer(service: PolicyContext, topic: TopicName) -> int:
    """The unacknowledged-message limit of each consumer of a topic (0: none)."""
    return _limit(
        service,
        topic,
        "max_unacked_messages_per_consumer",
        service.config.maxUnackedMessagesPerConsumer,
    )


def max_unacked_per_subscription(service: PolicyContext, topic: TopicName) -> int:
    """The unacknowledged-message limit of each subscription of a topic (0: none)."""
    return _limit(
        service,
        topic,
        "max_unacked_messages_per_subscription",
        service.config.maxUnackedMessagesPerSubscription,
    )


def delayed_delivery(service: PolicyContext, topic: TopicName) -> tuple[bool, int]:
    """(enabled, tick time in milliseconds)."""
    value = applied(service, topic, "delayed_delivery_policies")
    config = service.config
    if value is None:
        return config.delayedDeliveryEnabled, config.delayedDeliveryTickTimeMillis
    return bool(value.get("active", True)), int(
        value.get("tickTime", config.delayedDeliveryTickTimeMillis)
    )


def max_delivery_delay_ms(service: PolicyContext, topic: TopicName) -> int:
    """The longest delivery delay a producer may ask for on ``topic`` (0: any): the delayed
    delivery policy's ``maxDeliveryDelayInMillis``, when delayed delivery is on."""
    enabled, _ = delayed_delivery(service, topic)
    value = applied(service, topic, "delayed_delivery_policies")
    if not enabled or not value:
        return 0
    return int(value.get("maxDeliveryDelayInMillis", 0))


def compaction_threshold(service: PolicyContext, topic: TopicName) -> int:
    """Backlog bytes past which the topic is compacted automatically (0: never)."""
    return _limit(
        service,
        topic,
        "compaction_threshold",
        service.config.brokerServiceCompactionThresholdInBytes,
    )


@dataclass(frozen=True)
class InactiveTopicPolicy:
    """When an inactive topic is deleted: on or off, after how long, and how idle."""

    delete_while_inactive: bool
    max_inactive_seconds: int
    mode: str  # delete_when_no_subscriptions | delete_when_subscriptions_caught_up


def inactive_topic_policy(service: PolicyContext, topic: TopicName) -> InactiveTopicPolicy:
    """The inactive-topic policy of a topic: topic, then namespace, then broker."""
    value = applied(service, topic, "inactive_topic_policies")
    config = service.config
    default_duration = config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
    if default_duration < 0:
        default_duration = int(config.brokerDeleteInactiveTopicsFrequencySeconds)
    if value is None:
        return InactiveTopicPolicy(
            config.brokerDeleteInactiveTopicsEnabled,
            default_duration,
            config.brokerDeleteInactiveTopicsMode,
        )
    return InactiveTopicPolicy(
        bool(value.get("deleteWhileInactive", config.brokerDeleteInactiveTopicsEnabled)),
        int(value.get("maxInactiveDurationSeconds", default_duration)),
        str(value.get("inactiveTopicDeleteMode", config.brokerDeleteInactiveTopicsMode)),
    )
