"""Topic-level policies in the admin API, on Pulsar's paths under
``/admin/v2/{persistent|non-persistent}/{tenant}/{namespace}/{topic}/``.

A policy set on a topic overrides its namespace's, which overrides the broker's configuration
(see :mod:`starquake.broker.applied_policies`). Those of a partitioned topic apply to every
partition; a partition's name reaches its partitioned topic's policies.

For each policy, ``GET`` answers the topic's own value (204 without a body when the topic sets
none) or, with ``?applied=true``, the value in force: the topic's, else the namespace's, else
the broker's default. ``POST`` sets it, ``DELETE`` removes it (204 either way). Values are
checked before anything is stored (400 with a reason), as are the conflicts Pulsar refuses
(412: a retention that does not exceed the backlog quota, and the reverse). The topic, or the
partitioned topic, must exist (404). With ``topicLevelPoliciesEnabled=false`` every endpoint
answers 405, as Pulsar does.

- ``retention`` ``{"retentionTimeInMinutes", "retentionSizeInMB"}``;
- ``messageTTL``: seconds, given as the query parameter ``messageTTL`` (as Pulsar's admin
  client sends it; a JSON number body is taken too);
- ``deduplicationEnabled`` (bool): switched at once on the affected loaded topics, in place
  (producers and consumers stay connected);
- ``maxUnackedMessagesOnConsumer``, ``maxUnackedMessagesOnSubscription`` (0: no limit);
- ``delayedDelivery`` ``{"active", "tickTime", "maxDeliveryDelayInMillis"}``;
- ``backlogQuota`` (``POST``/``DELETE`` with the ``backlogQuotaType`` query parameter,
  ``{"limitSize", "limitTime", "policy"}``) and ``backlogQuotaMap`` (``GET``);
- ``compactionThreshold`` (bytes), ``maxProducers``, ``maxConsumers`` (0: no limit);
- ``inactiveTopicPolicies`` ``{"inactiveTopicDeleteMode", "maxInactiveDurationSeconds",
  "deleteWhileInactive"}``.

Storage: Pulsar keeps topic policies as events in a system topic of each namespace,
``__change_events``, read back by every broker. Starquake keeps them in its metadata store
instead (the key ``/admin/topic-policies/<tenant>/<namespace>/<domain>/<topic>``): a change is
written atomically and durably before the request is answered, and every policy is read into
memory at start, so no system topic exists (users may not create one either). Every change is
announced with ``BrokerService.policies_changed``: loaded topics apply it at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from starquake.broker.admin.policies import (
    CHECKS,
    PolicyConflict,
    QuotaScope,
    drop_quota,
    policy_routes,
    put_quota,
    quota_fits_retention,
    set_policy,
)
from starquake.broker.admin.replies import (
    NO_CONTENT,
    BadRequest,
    NotAllowed,
    Reply,
    json_body,
    whole_number,
)
from starquake.broker.admin.routing import Route
from starquake.broker.admin.topics import TOPIC, flag, topic_of
from starquake.broker.errors import TopicNotFoundError
from starquake.broker.policy_types import (
    DESTINATION_STORAGE,
    MESSAGE_AGE,
    STORED,
    BacklogQuota,
    DelayedDeliveryPolicies,
    InactiveTopicPolicies,
    RetentionPolicies,
    overlay,
    stored_form,
)
from starquake.broker.web import Call, Need, json_reply
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.config import BrokerConfig
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

DISABLED = "Topic level policies is disabled, to enable the topic level policy and retry."


class PoliciesDisabled(NotAllowed):
    """``topicLevelPoliciesEnabled`` is false (HTTP 405)."""


def _inactive_duration(config: BrokerConfig) -> int:
    duration = config.brokerDeleteInactiveTopicsMaxInactiveDurationSeconds
    return duration if duration >= 0 else int(config.brokerDeleteInactiveTopicsFrequencySeconds)


@dataclass(frozen=True)
class TopicPolicy:
    """One policy: its stored field and the broker's default (what ``applied`` falls back to)."""

    field: str
    default: Callable[[BrokerConfig], object]
    """The broker's value: a policy object, a number or a flag."""

    @property
    def attr(self) -> str:
        """The policy's attribute in the typed view of stored policies."""
        return STORED[self.field][0]


POLICIES: dict[str, TopicPolicy] = {
    "retention": TopicPolicy(
        "retention_policies",
        lambda c: RetentionPolicies(c.defaultRetentionTimeInMinutes, c.defaultRetentionSizeInMB),
    ),
    "messageTTL": TopicPolicy("message_ttl_in_seconds", lambda c: c.ttlDurationDefaultInSeconds),
    "deduplicationEnabled": TopicPolicy(
        "deduplicationEnabled", lambda c: c.brokerDeduplicationEnabled
    ),
    "maxUnackedMessagesOnConsumer": TopicPolicy(
        "max_unacked_messages_per_consumer", lambda c: c.maxUnackedMessagesPerConsumer
    ),
    "maxUnackedMessagesOnSubscription": TopicPolicy(
        "max_unacked_messages_per_subscription", lambda c: c.maxUnackedMessagesPerSubscription
    ),
    "delayedDelivery": TopicPolicy(
        "delayed_delivery_policies",
        lambda c: DelayedDeliveryPolicies(
            c.delayedDeliveryEnabled, c.delayedDeliveryTickTimeMillis, 0
        ),
    ),
    "compactionThreshold": TopicPolicy(
        "compaction_threshold", lambda c: c.brokerServiceCompactionThresholdInBytes
    ),
    "maxProducers": TopicPolicy("max_producers_per_topic", lambda c: 0),
    "maxConsumers": TopicPolicy("max_consumers_per_topic", lambda c: 0),
    "inactiveTopicPolicies": TopicPolicy(
        "inactive_topic_policies",
        lambda c: InactiveTopicPolicies(
            c.brokerDeleteInactiveTopicsEnabled,
            c.brokerDeleteInactiveTopicsMode,
            _inactive_duration(c),
        ),
    ),
}

BACKLOG_TYPES = (DESTINATION_STORAGE, MESSAGE_AGE)


def _message_ttl(params: dict[str, str], body: bytes) -> int:
    raw = params.get("messageTTL")
    if raw is None:
        value = json_body(body)
        if value is None:
            raise BadRequest("give the TTL in seconds as the query parameter messageTTL")
    else:
        value = whole_number(raw, "messageTTL")
    ttl = CHECKS["message_ttl_in_seconds"](value)
    assert isinstance(ttl, int)
    return ttl


def topic_for(service: BrokerService, params: dict[str, str]) -> TopicName:
    """The topic a request names; 405 when topic policies are off, 404 when it does not
    exist."""
    topic = topic_of(params)
    if not service.config.topicLevelPoliciesEnabled:
        raise PoliciesDisabled(DISABLED)
    service.check_namespace(topic)
    if not (service.topic_exists(topic) or service.loaded_topic(topic) is not None):
        raise TopicNotFoundError(f"Topic {topic} not found")
    return topic


async def change(
    service: BrokerService, topic: TopicName, edit: Callable[[dict[str, Any]], None]
) -> None:
    """Apply ``edit`` to the topic's policies, store them (a compare-and-set: brokers sharing
    the configuration lose none of each other's changes), and tell the live topics."""
    await asyncio.to_thread(service.resources.update_topic_policies, topic, edit)
    service.policies_changed(topic)


async def store(service: BrokerService, topic: TopicName, field: str, value: Any) -> None:
    """Store one policy of a topic (None: remove it)."""
    await change(service, topic, lambda policies: set_policy(policies, field, value))
    log.info("topic %s: %s set to %s", topic.partitioned_topic_name, field, value)
    if field == "deduplicationEnabled":
        await service.deduplication_changed(topic)


def applied(service: BrokerService, topic: TopicName, policy: TopicPolicy) -> object:
    """The value in force: the topic's, else the namespace's, else the broker's default (which
    also fills the fields a policy object leaves out)."""
    resources = service.resources
    value = getattr(resources.topic_view(topic), policy.attr)
    if value is None:
        value = getattr(resources.namespace_view(topic.namespace_name), policy.attr)
    default = policy.default(service.config)
    return default if value is None else overlay(default, value)


def retention_of(service: BrokerService, topic: TopicName) -> RetentionPolicies | None:
    """The retention in force on a topic: its own, else its namespace's."""
    value = service.resources.topic_view(topic).retention_policies
    return value or service.resources.namespace_view(topic.namespace_name).retention_policies


def destination_quota_of(service: BrokerService, topic: TopicName) -> BacklogQuota | None:
    """The storage backlog quota in force on a topic, if any."""
    resources = service.resources
    for view in (resources.topic_view(topic), resources.namespace_view(topic.namespace_name)):
        quota = view.backlog_quota_map.get("destination_storage")
        if quota is not None:
            return quota
    return None


def check_value(service: BrokerService, topic: TopicName, value: object) -> None:
    """Refuse (412) a retention that does not exceed the topic's backlog quota."""
    quota = destination_quota_of(service, topic)
    if isinstance(value, RetentionPolicies) and not quota_fits_retention(
        quota, value, service.config.backlogQuotaDefaultLimitBytes
    ):
        raise PolicyConflict(
            "Retention Quota must exceed configured backlog quota for topic. "
            "Please increase retention quota and retry"
        )


async def get_policy(service: BrokerService, call: Call, *, path: str) -> Reply:
    """The topic's value of the policy (``applied=true``: the value in force)."""
    policy = POLICIES[path]
    topic = topic_for(service, call.params)
    if flag(call.params, "applied"):
        return json_reply(200, stored_form(applied(service, topic, policy)))
    value = service.resources.topic_policy(topic, policy.field)
    return NO_CONTENT if value is None else json_reply(200, value)


async def set_policy_value(service: BrokerService, call: Call, *, path: str) -> Reply:
    """Set the policy on the topic from the body (checked first)."""
    field = POLICIES[path].field
    topic = topic_for(service, call.params)
    value: object
    if path == "messageTTL":
        value = _message_ttl(call.params, call.body)
    else:
        value = CHECKS[field](json_body(call.body))
    check_value(service, topic, value)
    await store(service, topic, field, stored_form(value))
    return NO_CONTENT


async def delete_policy(service: BrokerService, call: Call, *, path: str) -> Reply:
    """Remove the policy from the topic."""
    await store(service, topic_for(service, call.params), POLICIES[path].field, None)
    return NO_CONTENT


# --- backlog quotas: a map by quota type -----------------------------------------------------


async def get_quotas(service: BrokerService, call: Call) -> Reply:
    """The topic's backlog quotas by type (``applied``: those in force)."""
    topic = topic_for(service, call.params)
    config = service.config
    quotas = service.resources.topic_policy(topic, "backlog_quota_map") or {}
    if not quotas and flag(call.params, "applied"):
        quotas = service.resources.policy(topic.namespace_name, "backlog_quota_map") or {}
        if not quotas:
            default = {
                "limitSize": config.backlogQuotaDefaultLimitBytes,
                "limitTime": config.backlogQuotaDefaultLimitSecond,
                "policy": config.backlogQuotaDefaultRetentionPolicy,
            }
            quotas = dict.fromkeys(BACKLOG_TYPES, default)
    return json_reply(200, quotas)


def _scope(service: BrokerService, call: Call) -> QuotaScope:
    topic = topic_for(service, call.params)
    name = str(topic.partitioned_topic_name)
    return QuotaScope("topic", name, retention_of(service, topic), partial(change, service, topic))


async def set_quota(service: BrokerService, call: Call) -> Reply:
    """Set the topic's backlog quota of the ``backlogQuotaType`` given."""
    await put_quota(service, call, _scope(service, call))
    return NO_CONTENT


async def delete_quota(service: BrokerService, call: Call) -> Reply:
    """Remove the topic's backlog quota of the ``backlogQuotaType`` given."""
    await drop_quota(call, _scope(service, call))
    return NO_CONTENT


def _policy_routes() -> list[Route]:
    routes = []
    for path in POLICIES:
        handlers = (
            partial(get_policy, path=path),
            partial(set_policy_value, path=path),
            partial(delete_policy, path=path),
        )
        routes += policy_routes(TOPIC, path, _ADMIN, handlers, "POST")
    return routes


_ADMIN = Need.TOPIC_ADMIN
ROUTES = [
    *_policy_routes(),
    Route("GET", f"{TOPIC}/backlogQuotaMap", get_quotas, _ADMIN),
    Route("POST", f"{TOPIC}/backlogQuota", set_quota, _ADMIN, "BacklogQuota"),
    Route("DELETE", f"{TOPIC}/backlogQuota", delete_quota, _ADMIN),
]
"""The endpoints of topic policies."""
