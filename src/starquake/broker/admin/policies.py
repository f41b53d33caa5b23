"""Namespace policy endpoints of the admin API, under ``/admin/v2/namespaces/{tenant}/{ns}``.

Each policy is stored in the namespace's policies under Pulsar's field name and served on
Pulsar's path: GET answers the value (204 without a body when the namespace leaves it to the
broker's configuration), POST (PUT for the schema compatibility strategy) sets it, DELETE
removes it. Values are checked before anything is stored (400 with a reason otherwise).

- ``deduplication`` (bool): switched at once on the namespace's loaded topics, which stay
  loaded with their producers and consumers connected (as Pulsar does);
- ``retention`` ``{"retentionTimeInMinutes", "retentionSizeInMB"}`` (-1: no limit; both 0: no
  retention; one 0 and the other not is refused, as Pulsar refuses it); a size not above the
  ``destination_storage`` backlog quota, or a time not above its limit time, is refused with 412
  (Pulsar's rule: retention must exceed the backlog quota), and so is such a quota;
- ``messageTTL`` (seconds): unacknowledged messages older than this are expired;
- ``autoTopicCreation`` ``{"allowAutoTopicCreation", "topicType", "defaultNumPartitions"}``
  and ``autoSubscriptionCreation`` ``{"allowAutoSubscriptionCreation"}``: override the broker's
  settings for lookups, producers and consumers from the next request on;
- ``schemaCompatibilityStrategy`` (a strategy name), ``isAllowAutoUpdateSchema`` (bool) and
  ``schemaValidationEnforced`` (bool): how producers' and consumers' schemas are checked;
- ``backlogQuota`` (``POST``/``DELETE``, ``backlogQuotaType`` query parameter) and
  ``backlogQuotaMap`` (``GET``): ``{"limitSize", "limitTime", "policy"}``;
- ``maxProducersPerTopic``, ``maxConsumersPerTopic`` (0: no limit): checked when a producer or
  consumer attaches;
- ``maxUnackedMessagesPerConsumer``, ``maxUnackedMessagesPerSubscription`` (0: no limit): when
  Shared and Key_Shared dispatching pauses;
- ``delayedDelivery`` ``{"active", "tickTime", "maxDeliveryDelayInMillis"}``;
- ``compactionThreshold`` (bytes, set with ``PUT``; 0: no automatic compaction);
- ``inactiveTopicPolicies`` ``{"inactiveTopicDeleteMode", "maxInactiveDurationSeconds",
  "deleteWhileInactive"}``.

Every change is announced with ``BrokerService.policies_changed``, so loaded topics apply it at
once; the periodic checks (retention, TTL, backlog quotas, compaction, inactive topics) read the
applied policies each time.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from starquake.broker.admin.replies import (
    NO_CONTENT,
    BadRequest,
    Reply,
    json_body,
    partition_count_refusal,
)
from starquake.broker.admin.routing import Handler, Route, lock_of
from starquake.broker.errors import BrokerServiceError
from starquake.broker.policy_types import (
    BACKLOG_TYPES,
    AutoSubscriptionCreationOverride,
    AutoTopicCreationOverride,
    BacklogQuota,
    DelayedDeliveryPolicies,
    InactiveTopicPolicies,
    RetentionPolicies,
    boolean,
    from_json,
    stored_form,
    strategy,
    whole,
)
from starquake.broker.resources import NotFoundError
from starquake.broker.web import Call, Need, json_reply

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

_NAMESPACE = r"/admin/v2/namespaces/(?P<tenant>[^/]+)/(?P<namespace>[^/]+)"

Parse = Callable[[Any], object]
"""The check of a request body: its JSON value -> the typed policy (PolicyError, naming the
field, when it is not one)."""


def typed(cls: type[object]) -> Parse:
    """The check of a body that is the JSON object of the policy class ``cls``."""
    return lambda value: from_json(cls, value)


def scalar(check: Callable[[Any, str], Any], what: str) -> Parse:
    """The check of a body that is one value, named ``what`` in a refusal."""
    return lambda value: check(value, what)


class PolicyConflict(BrokerServiceError):
    """A policy that contradicts another one already set (HTTP 412)."""


def quota_fits_retention(
    quota: BacklogQuota | None, retention: RetentionPolicies | None, default_limit_bytes: int
) -> bool:
    """Pulsar's rule: a retention limit, when set, must exceed the backlog quota's (size in
    bytes, time in seconds); ``quota`` None is the broker's default size quota."""
    if retention is None:
        return True
    size_mb = retention.retention_size_in_mb
    minutes = retention.retention_time_in_minutes
    if size_mb <= 0 and minutes <= 0:
        return True
    if quota is None:
        limit_size, limit_time = default_limit_bytes, -1
    else:
        limit_size, limit_time = quota.size_bytes, quota.time_seconds
    if size_mb > 0 and limit_size >= size_mb * 1024 * 1024:
        return False
    return not (minutes > 0 and limit_time >= minutes * 60)


def set_policy(policies: dict[str, Any], field: str, value: Any) -> None:
    """Set ``field`` of ``policies`` to ``value``, or remove it when ``value`` is None."""
    if value is None:
        policies.pop(field, None)
    else:
        policies[field] = value


def remove_backlog_quota(policies: dict[str, Any], *, kind: str) -> None:
    """Remove the quota of ``kind`` from ``policies`` (and the map once it is empty)."""
    quotas = dict(policies.get("backlog_quota_map", {}))
    quotas.pop(kind, None)
    if quotas:
        policies["backlog_quota_map"] = quotas
    else:
        policies.pop("backlog_quota_map", None)


def put_backlog_quota(policies: dict[str, Any], *, kind: str, quota: BacklogQuota) -> None:
    """Set the quota of ``kind`` in ``policies``."""
    policies["backlog_quota_map"] = {
        **policies.get("backlog_quota_map", {}),
        kind: stored_form(quota),
    }


def backlog_quota_type(params: dict[str, str]) -> str:
    """The ``backlogQuotaType`` query parameter (``destination_storage`` when absent)."""
    kind = params.get("backlogQuotaType", "destination_storage")
    if kind not in BACKLOG_TYPES:
        raise BadRequest(f"backlogQuotaType must be one of {', '.join(sorted(BACKLOG_TYPES))}")
    return kind


# Checks of the policies both levels share: stored field -> check of a new value.
CHECKS: dict[str, Parse] = {
    "retention_policies": typed(RetentionPolicies),
    "message_ttl_in_seconds": scalar(whole(), "messageTTL"),
    "deduplicationEnabled": scalar(boolean, "the body"),
    "max_producers_per_topic": scalar(whole(), "maxProducers"),
    "max_consumers_per_topic": scalar(whole(), "maxConsumers"),
    "max_unacked_messages_per_consumer": scalar(whole(), "maxUnackedMessagesPerConsumer"),
    "max_unacked_messages_per_subscription": scalar(whole(), "maxUnackedMessagesPerSubscription"),
    "delayed_delivery_policies": typed(DelayedDeliveryPolicies),
    "compaction_threshold": scalar(whole(), "compactionThreshold"),
    "inactive_topic_policies": typed(InactiveTopicPolicies),
}

# path -> (stored field, check of a new value, HTTP method that sets it)
POLICIES: dict[str, tuple[str, Parse, str]] = {
    "retention": ("retention_policies", CHECKS["retention_policies"], "POST"),
    "messageTTL": ("message_ttl_in_seconds", CHECKS["message_ttl_in_seconds"], "POST"),
    "autoTopicCreation": ("autoTopicCreationOverride", typed(AutoTopicCreationOverride), "POST"),
    "autoSubscriptionCreation": (
        "autoSubscriptionCreationOverride",
        typed(AutoSubscriptionCreationOverride),
        "POST",
    ),
    "schemaCompatibilityStrategy": (
        "schema_compatibility_strategy",
        scalar(strategy, "the body"),
        "PUT",
    ),
    "isAllowAutoUpdateSchema": ("is_allow_auto_update_schema", scalar(boolean, "the body"), "POST"),
    "schemaValidationEnforced": ("schema_validation_enforced", scalar(boolean, "the body"), "POST"),
    "maxProducersPerTopic": (
        "max_producers_per_topic",
        scalar(whole(), "maxProducersPerTopic"),
        "POST",
    ),
    "maxConsumersPerTopic": (
        "max_consumers_per_topic",
        scalar(whole(), "maxConsumersPerTopic"),
        "POST",
    ),
    "maxUnackedMessagesPerConsumer": (
        "max_unacked_messages_per_consumer",
        CHECKS["max_unacked_messages_per_consumer"],
        "POST",
    ),
    "maxUnackedMessagesPerSubscription": (
        "max_unacked_messages_per_subscription",
        CHECKS["max_unacked_messages_per_subscription"],
        "POST",
    ),
    "delayedDelivery": ("delayed_delivery_policies", CHECKS["delayed_delivery_policies"], "POST"),
    "compactionThreshold": ("compaction_threshold", CHECKS["compaction_threshold"], "PUT"),
    "inactiveTopicPolicies": (
        "inactive_topic_policies",
        CHECKS["inactive_topic_policies"],
        "POST",
    ),
}


def namespace_of(service: BrokerService, params: dict[str, str]) -> str:
    """``tenant/namespace`` of the path (404 when it does not exist)."""
    name = f"{params['tenant']}/{params['namespace']}"
    if not service.resources.namespace_exists(name):
        raise NotFoundError(f"Namespace {name} does not exist")
    return name


async def change(
    service: BrokerService, namespace: str, edit: Callable[[dict[str, Any]], None]
) -> None:
    """Apply ``edit`` to the namespace's policies, store them, and tell live topics."""
    async with lock_of(service, __name__):  # one read-modify-write at a time
        # read, edit and store as one step: permission grants edit the same policies
        await asyncio.to_thread(service.resources.update_namespace_policies, namespace, edit)
    service.policies_changed(namespace)


async def store(service: BrokerService, namespace: str, field: str, value: Any) -> None:
    """Store one policy of a namespace (None: remove it)."""
    await change(service, namespace, lambda policies: set_policy(policies, field, value))
    log.info("namespace %s: %s set to %s", namespace, field, value)


def check_retention(service: BrokerService, namespace: str, retention: RetentionPolicies) -> None:
    """Refuse (412) a retention that does not exceed the namespace's backlog quota."""
    quota = service.resources.namespace_view(namespace).backlog_quota_map.get("destination_storage")
    if not quota_fits_retention(quota, retention, service.config.backlogQuotaDefaultLimitBytes):
        raise PolicyConflict("Retention Quota must exceed configured backlog quota for namespace.")


async def get_policy(service: BrokerService, call: Call, *, field: str) -> Reply:
    """The namespace's value of the policy (204: the broker's configuration applies)."""
    value = service.resources.policy(namespace_of(service, call.params), field)
    return NO_CONTENT if value is None else json_reply(200, value)


async def set_policy_value(
    service: BrokerService, call: Call, *, field: str, check: Callable[[Any], Any]
) -> Reply:
    """Set the policy on the namespace from the body (checked first)."""
    namespace = namespace_of(service, call.params)
    value = check(json_body(call.body))
    if isinstance(value, RetentionPolicies):
        check_retention(service, namespace, value)
    if isinstance(value, AutoTopicCreationOverride) and value.default_num_partitions is not None:
        limit = service.config.partition_limit
        refusal = partition_count_refusal(value.default_num_partitions, limit)
        if refusal is not None:
            raise refusal
    await store(service, namespace, field, stored_form(value))
    return NO_CONTENT


async def delete_policy(service: BrokerService, call: Call, *, field: str) -> Reply:
    """Remove the policy from the namespace (the broker's configuration applies)."""
    await store(service, namespace_of(service, call.params), field, None)
    return NO_CONTENT


# --- deduplication: switched in place on the namespace's loaded topics ----------------------


async def get_dedup(service: BrokerService, call: Call) -> Reply:
    """Whether the namespace deduplicates (204 when it leaves it to the broker)."""
    value = service.resources.policy(namespace_of(service, call.params), "deduplicationEnabled")
    return NO_CONTENT if value is None else json_reply(200, bool(value))


async def change_dedup(service: BrokerService, namespace: str, value: bool | None) -> None:
    """Store the namespace's deduplication and switch its loaded topics."""
    await store(service, namespace, "deduplicationEnabled", value)
    await service.deduplication_changed(namespace)


async def set_dedup(service: BrokerService, call: Call) -> Reply:
    """Switch deduplication on or off for the namespace."""
    namespace = namespace_of(service, call.params)
    await change_dedup(service, namespace, boolean(json_body(call.body), "the body"))
    return NO_CONTENT


async def delete_dedup(service: BrokerService, call: Call) -> Reply:
    """Leave deduplication to the broker's configuration."""
    await change_dedup(service, namespace_of(service, call.params), None)
    return NO_CONTENT


# --- backlog quotas: a map by quota type -----------------------------------------------------


async def get_quotas(service: BrokerService, call: Call) -> Reply:
    """The namespace's backlog quotas by type."""
    value = service.resources.policy(namespace_of(service, call.params), "backlog_quota_map")
    return json_reply(200, value or {})


Apply = Callable[[Callable[[dict[str, Any]], None]], Awaitable[None]]
"""Applies an edit to the stored policies of one namespace or topic (and tells live topics)."""


@dataclass(frozen=True)
class QuotaScope:
    """Where a backlog quota request applies: a namespace or a topic."""

    level: str
    """``namespace`` or ``topic``."""
    name: str
    retention: RetentionPolicies | None
    """The retention in force there."""
    apply: Apply


async def put_quota(service: BrokerService, call: Call, scope: QuotaScope) -> None:
    """Set the scope's backlog quota of the ``backlogQuotaType`` given, from the body (412
    when it is not below the retention in force)."""
    kind = backlog_quota_type(call.params)
    quota = from_json(BacklogQuota, json_body(call.body))
    limit = service.config.backlogQuotaDefaultLimitBytes
    if not quota_fits_retention(quota, scope.retention, limit):
        raise PolicyConflict(
            f"Backlog Quota exceeds configured retention quota for {scope.level}. "
            "Please increase retention quota and retry"
        )
    await scope.apply(partial(put_backlog_quota, kind=kind, quota=quota))
    log.info("%s %s: backlog quota %s set to %s", scope.level, scope.name, kind, quota)


async def drop_quota(call: Call, scope: QuotaScope) -> None:
    """Remove the scope's backlog quota of the ``backlogQuotaType`` given."""
    kind = backlog_quota_type(call.params)
    await scope.apply(partial(remove_backlog_quota, kind=kind))
    log.info("%s %s: backlog quota %s removed", scope.level, scope.name, kind)


def _scope(service: BrokerService, call: Call) -> QuotaScope:
    namespace = namespace_of(service, call.params)
    retention = service.resources.namespace_view(namespace).retention_policies
    return QuotaScope("namespace", namespace, retention, partial(change, service, namespace))


async def set_quota(service: BrokerService, call: Call) -> Reply:
    """Set the backlog quota of the ``backlogQuotaType`` given."""
    await put_quota(service, call, _scope(service, call))
    return NO_CONTENT


async def delete_quota(service: BrokerService, call: Call) -> Reply:
    """Remove the backlog quota of the ``backlogQuotaType`` given."""
    await drop_quota(call, _scope(service, call))
    return NO_CONTENT


def policy_routes(
    path: str, name: str, need: Need, handlers: tuple[Handler, Handler, Handler], method: str
) -> list[Route]:
    """The GET, set (``method``) and DELETE routes of the policy ``name`` under ``path``."""
    get, set_, delete = handlers
    return [
        Route("GET", f"{path}/{name}", get, need),
        Route(method, f"{path}/{name}", set_, need, f"the {name} value"),
        Route("DELETE", f"{path}/{name}", delete, need),
    ]


def _policy_routes() -> list[Route]:
    routes = []
    for path, (field, check, method) in POLICIES.items():
        handlers = (
            partial(get_policy, field=field),
            partial(set_policy_value, field=field, check=check),
            partial(delete_policy, field=field),
        )
        routes += policy_routes(_NAMESPACE, path, _ADMIN, handlers, method)
    return routes


_ADMIN = Need.TENANT_ADMIN
ROUTES = [
    *_policy_routes(),
    Route("GET", f"{_NAMESPACE}/deduplication", get_dedup, _ADMIN),
    Route("POST", f"{_NAMESPACE}/deduplication", set_dedup, _ADMIN, "true or false"),
    Route("DELETE", f"{_NAMESPACE}/deduplication", delete_dedup, _ADMIN),
    Route("GET", f"{_NAMESPACE}/backlogQuotaMap", get_quotas, _ADMIN),
    Route("POST", f"{_NAMESPACE}/backlogQuota", set_quota, _ADMIN, "BacklogQuota"),
    Route("DELETE", f"{_NAMESPACE}/backlogQuota", delete_quota, _ADMIN),
]
"""The endpoints of namespace policies."""
