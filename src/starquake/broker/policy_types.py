"""Namespace and topic policies as typed values, with Pulsar's JSON field names.

Each policy object of Pulsar's admin API is a frozen dataclass here; each of its fields names
its JSON key in ``metadata["json"]`` and its check in ``metadata["check"]``. :func:`from_json`
turns a request body into one (:class:`PolicyError`, naming the field, when a field has the
wrong type, is missing or is out of range); :func:`to_json` turns it back into the JSON form
that is stored, holding the fields that were given, so what is stored is what was stored
before policies were typed.

:class:`Policies` is the typed view of one stored set of policies (a namespace's, or a
topic's): what the resolver (:mod:`starquake.broker.applied_policies`) reads.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, is_dataclass, replace
from typing import Any, TypeVar

from starquake.broker.schemas.compatibility import STRATEGIES

__all__ = [
    "AutoSubscriptionCreationOverride",
    "AutoTopicCreationOverride",
    "BacklogQuota",
    "DelayedDeliveryPolicies",
    "InactiveTopicPolicies",
    "Policies",
    "PolicyError",
    "RetentionPolicies",
    "from_json",
    "to_json",
]

log = logging.getLogger(__name__)

MAX_LONG = 2**63 - 1
"""The largest whole number a policy takes (Pulsar's are Java longs at most)."""

SCHEMA_STRATEGIES = frozenset({"UNDEFINED", *STRATEGIES})
"""What a namespace's schema compatibility strategy may be (``UNDEFINED``: the broker's)."""

HOLD = "producer_request_hold"
EXCEPTION = "producer_exception"
EVICTION = "consumer_backlog_eviction"
BACKLOG_POLICIES = frozenset({HOLD, EXCEPTION, EVICTION})

DESTINATION_STORAGE = "destination_storage"
MESSAGE_AGE = "message_age"
BACKLOG_TYPES = frozenset({DESTINATION_STORAGE, MESSAGE_AGE})
DELETE_MODES = frozenset({"delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"})
TOPIC_TYPES = frozenset({"partitioned", "non-partitioned"})


class PolicyError(ValueError):
    """A policy value that is not what Pulsar takes; the message names the field."""


Check = Callable[[Any, str], Any]
"""A check of one value: (the value, its field's name) -> the value (PolicyError if wrong)."""


def whole(minimum: int = 0) -> Check:
    """A check that a value is a whole number from ``minimum`` to a long's maximum."""

    def check(value: Any, what: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PolicyError(f"{what} must be a whole number from {minimum} to {MAX_LONG}")
        if not minimum <= value <= MAX_LONG:
            raise PolicyError(f"{what} must be a whole number from {minimum} to {MAX_LONG}")
        return value

    return check


def boolean(value: Any, what: str) -> bool:
    """A check that a value is a JSON boolean."""
    if not isinstance(value, bool):
        raise PolicyError(f"{what} must be a JSON boolean: true or false")
    return value


def one_of(names: frozenset[str]) -> Check:
    """A check that a value is one of ``names``."""

    def check(value: Any, what: str) -> str:
        if not isinstance(value, str) or value not in names:
            raise PolicyError(f"{what} must be one of {', '.join(sorted(names))}")
        return value

    return check


def _json(name: str, check: Check, *, required: bool = False) -> Any:
    """A dataclass field read from the JSON key ``name`` (optional ones default to None)."""
    metadata = {"json": name, "check": check}
    if required:
        return field(metadata=metadata)
    return field(default=None, metadata=metadata)


T = TypeVar("T")


def from_json(cls: type[T], value: Any, what: str = "the body") -> T:
    """``value`` (a JSON object) as a ``cls``, every field checked (PolicyError naming the
    field, or ``what`` when ``value`` is not an object)."""
    specs = {f.metadata["json"]: f for f in fields(cls)}  # type: ignore[arg-type]
    if not isinstance(value, dict):
        raise PolicyError(f"{what} must be a JSON object with {', '.join(sorted(specs))}")
    missing = sorted(
        name for name, spec in specs.items() if spec.default is MISSING and name not in value
    )
    if missing:
        raise PolicyError(f"missing {', '.join(missing)} in {what}")
    unknown = sorted(str(key) for key in value if key not in specs)
    if unknown:
        raise PolicyError(f"unknown field(s) {', '.join(unknown)[:200]} in {what}")
    kwargs = {
        specs[key].name: specs[key].metadata["check"](item, key) for key, item in value.items()
    }
    made = cls(**kwargs)
    check = getattr(made, "validate", None)
    if check is not None:
        check()
    return made


def to_json(policy: object) -> dict[str, Any]:
    """The JSON object of a policy: the fields that are set, under Pulsar's names."""
    out = {}
    for spec in fields(policy):  # type: ignore[arg-type]
        value = getattr(policy, spec.name)
        if value is not None:
            out[spec.metadata["json"]] = value
    return out


def stored_form(value: object) -> Any:
    """What is stored for a checked policy value: a policy object's JSON, else the value."""
    return to_json(value) if is_dataclass(value) else value


def without_nulls(value: Any) -> Any:
    """``value`` with the null fields of its objects left out, at every depth."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    return value


def overlay(base: object, given: object) -> object:
    """``given``'s fields that are set over ``base`` (a policy object of the same class); a
    value that is not a policy object is ``given`` itself."""
    if not is_dataclass(given) or isinstance(given, type):
        return given
    changes = {f.name: getattr(given, f.name) for f in fields(given)}
    return replace(base, **{k: v for k, v in changes.items() if v is not None})  # type: ignore[type-var]


@dataclass(frozen=True, slots=True)
class RetentionPolicies:
    """How long and how much acknowledged data to keep (-1: no limit; both 0: none)."""

    retention_time_in_minutes: int = _json("retentionTimeInMinutes", whole(-1), required=True)
    retention_size_in_mb: int = _json("retentionSizeInMB", whole(-1), required=True)

    def validate(self) -> None:
        """Pulsar refuses one limit 0 and the other not."""
        if (self.retention_time_in_minutes == 0) != (self.retention_size_in_mb == 0):
            raise PolicyError(
                "Invalid retention policy: Setting a single time or size limit to 0 is invalid "
                "when one of the limits has a non-zero value. Use the value of -1 instead of 0 "
                "to ignore a specific limit. To disable retention both limits must be set to 0."
            )

    @property
    def infinite(self) -> bool:
        """Whether acknowledged messages are kept forever (both limits negative)."""
        return self.retention_time_in_minutes < 0 and self.retention_size_in_mb < 0


@dataclass(frozen=True, slots=True)
class BacklogQuota:
    """A backlog quota: ``limitSize`` bytes (``limit``: its older name) or ``limitTime``
    seconds (-1 or absent: no limit), and what happens past it."""

    policy: str = _json("policy", one_of(BACKLOG_POLICIES), required=True)
    limit_size: int | None = _json("limitSize", whole(-1))
    limit_time: int | None = _json("limitTime", whole(-1))
    limit: int | None = _json("limit", whole(-1))

    @property
    def size_bytes(self) -> int:
        """The size limit in bytes (-1: none)."""
        if self.limit_size is not None:
            return self.limit_size
        return -1 if self.limit is None else self.limit

    @property
    def time_seconds(self) -> int:
        """The age limit in seconds (-1: none)."""
        return -1 if self.limit_time is None else self.limit_time


@dataclass(frozen=True, slots=True)
class DelayedDeliveryPolicies:
    """Whether producers may delay messages, the tick of the delay tracker and the longest
    delay (absent: the broker's settings)."""

    active: bool = _json("active", boolean, required=True)
    tick_time: int | None = _json("tickTime", whole(1))
    max_delivery_delay_in_millis: int | None = _json("maxDeliveryDelayInMillis", whole())


@dataclass(frozen=True, slots=True)
class InactiveTopicPolicies:
    """When an inactive topic is deleted (absent fields: the broker's settings)."""

    delete_while_inactive: bool = _json("deleteWhileInactive", boolean, required=True)
    inactive_topic_delete_mode: str | None = _json("inactiveTopicDeleteMode", one_of(DELETE_MODES))
    max_inactive_duration_seconds: int | None = _json("maxInactiveDurationSeconds", whole())


@dataclass(frozen=True, slots=True)
class AutoTopicCreationOverride:
    """A namespace's override of the broker's automatic topic creation."""

    allow_auto_topic_creation: bool = _json("allowAutoTopicCreation", boolean, required=True)
    topic_type: str | None = _json("topicType", one_of(TOPIC_TYPES))
    default_num_partitions: int | None = _json("defaultNumPartitions", whole(1))

    def validate(self) -> None:
        """Pulsar needs the topic type when creation is allowed."""
        if self.allow_auto_topic_creation and self.topic_type is None:
            raise PolicyError("topicType is needed when allowAutoTopicCreation is true")


@dataclass(frozen=True, slots=True)
class AutoSubscriptionCreationOverride:
    """A namespace's override of the broker's automatic subscription creation."""

    allow_auto_subscription_creation: bool = _json(
        "allowAutoSubscriptionCreation", boolean, required=True
    )


def _object_of(cls: type[T]) -> Check:
    return lambda value, what: from_json(cls, value, what)


def strategy(value: Any, what: str) -> str:
    """A check that a value names a schema compatibility strategy."""
    if not isinstance(value, str) or value not in SCHEMA_STRATEGIES:
        raise PolicyError(
            f"{what} must be a strategy name, not {str(value)[:40]!r}; one of "
            f"{', '.join(sorted(SCHEMA_STRATEGIES))}"
        )
    return value


def backlog_quota_map(value: Any, what: str) -> dict[str, BacklogQuota]:
    """A check of a map of backlog quotas by their type."""
    if not isinstance(value, dict):
        raise PolicyError(f"{what} must be a JSON object of backlog quotas by type")
    kinds = one_of(BACKLOG_TYPES)
    return {
        kinds(kind, f"the backlog quota type in {what}"): from_json(
            BacklogQuota, quota, f"{what}.{kind}"
        )
        for kind, quota in value.items()
    }


@dataclass(frozen=True, slots=True)
class Policies:
    """The typed view of one stored set of policies (a namespace's or a topic's), under the
    stored names of Pulsar's ``Policies``; None (or an empty map): not set."""

    retention_policies: RetentionPolicies | None = None
    message_ttl_in_seconds: int | None = None
    deduplication_enabled: bool | None = None
    backlog_quota_map: Mapping[str, BacklogQuota] = field(default_factory=dict)
    max_producers_per_topic: int | None = None
    max_consumers_per_topic: int | None = None
    max_unacked_messages_per_consumer: int | None = None
    max_unacked_messages_per_subscription: int | None = None
    delayed_delivery_policies: DelayedDeliveryPolicies | None = None
    compaction_threshold: int | None = None
    inactive_topic_policies: InactiveTopicPolicies | None = None
    auto_topic_creation_override: AutoTopicCreationOverride | None = None
    auto_subscription_creation_override: AutoSubscriptionCreationOverride | None = None
    schema_compatibility_strategy: str | None = None
    is_allow_auto_update_schema: bool | None = None
    schema_validation_enforced: bool | None = None

    @classmethod
    def from_stored(
        cls, stored: Mapping[str, Any], where: str, *, strict: bool = False
    ) -> Policies:
        """The typed view of ``stored`` (the policies of ``where``; a null field is one not
        set). A stored value that does not check is logged and left out; with ``strict``, it is
        refused (PolicyError)."""
        values: dict[str, Any] = {}
        for key, (attr, check) in STORED.items():
            raw = stored.get(key)
            if raw is None:
                continue
            try:
                values[attr] = check(without_nulls(raw), key)
            except PolicyError as exc:
                if strict:
                    raise
                log.warning("%s: stored policy %s ignored: %s", where, key, exc)
        return cls(**values)


STORED: dict[str, tuple[str, Check]] = {
    "retention_policies": ("retention_policies", _object_of(RetentionPolicies)),
    "message_ttl_in_seconds": ("message_ttl_in_seconds", whole()),
    "deduplicationEnabled": ("deduplication_enabled", boolean),
    "backlog_quota_map": ("backlog_quota_map", backlog_quota_map),
    "max_producers_per_topic": ("max_producers_per_topic", whole()),
    "max_consumers_per_topic": ("max_consumers_per_topic", whole()),
    "max_unacked_messages_per_consumer": ("max_unacked_messages_per_consumer", whole()),
    "max_unacked_messages_per_subscription": ("max_unacked_messages_per_subscription", whole()),
    "delayed_delivery_policies": ("delayed_delivery_policies", _object_of(DelayedDeliveryPolicies)),
    "compaction_threshold": ("compaction_threshold", whole()),
    "inactive_topic_policies": ("inactive_topic_policies", _object_of(InactiveTopicPolicies)),
    "autoTopicCreationOverride": (
        "auto_topic_creation_override",
        _object_of(AutoTopicCreationOverride),
    ),
    "autoSubscriptionCreationOverride": (
        "auto_subscription_creation_override",
        _object_of(AutoSubscriptionCreationOverride),
    ),
    "schema_compatibility_strategy": ("schema_compatibility_strategy", strategy),
    "is_allow_auto_update_schema": ("is_allow_auto_update_schema", boolean),
    "schema_validation_enforced": ("schema_validation_enforced", boolean),
}
"""Each stored policy (Pulsar's name in ``Policies``) -> its attribute of :class:`Policies`
and the check of its value."""

NO_POLICIES = Policies()
"""The view of an empty set of policies."""
