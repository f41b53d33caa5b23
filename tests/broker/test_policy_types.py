"""The typed policies: every body Pulsar takes reads back to the same JSON, every malformed one
is refused naming its field, and policies stored before they were typed still load and apply."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from starquake.broker import applied_policies
from starquake.broker.config import BrokerConfig, load_config
from starquake.broker.policy_types import (
    AutoSubscriptionCreationOverride,
    AutoTopicCreationOverride,
    BacklogQuota,
    DelayedDeliveryPolicies,
    InactiveTopicPolicies,
    Policies,
    PolicyError,
    RetentionPolicies,
    from_json,
    overlay,
    to_json,
)
from starquake.broker.resources import PulsarResources
from starquake.common.topic_name import TopicName
from starquake.storage import SqliteMetadataStore

CLASSES: list[type[Any]] = [
    RetentionPolicies,
    BacklogQuota,
    DelayedDeliveryPolicies,
    InactiveTopicPolicies,
    AutoTopicCreationOverride,
    AutoSubscriptionCreationOverride,
]
GOOD: dict[str, Any] = {
    "retentionTimeInMinutes": 10,
    "retentionSizeInMB": 20,
    "policy": "producer_exception",
    "limitSize": 1024,
    "limitTime": 60,
    "limit": 1024,
    "active": True,
    "tickTime": 5,
    "maxDeliveryDelayInMillis": 1000,
    "deleteWhileInactive": True,
    "inactiveTopicDeleteMode": "delete_when_no_subscriptions",
    "maxInactiveDurationSeconds": 30,
    "allowAutoTopicCreation": False,  # so that topicType is optional
    "topicType": "partitioned",
    "defaultNumPartitions": 3,
    "allowAutoSubscriptionCreation": False,
}
WRONG = st.one_of(
    st.none(),
    st.text(max_size=5),
    st.floats(allow_nan=False),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.sampled_from([2**63, -2, -(2**63)]),
)


def _names(cls: type[Any]) -> list[str]:
    return [f.metadata["json"] for f in fields(cls)]


def _required(cls: type[Any]) -> list[str]:
    return [f.metadata["json"] for f in fields(cls) if f.default is not None]


@given(st.sampled_from(CLASSES), st.data())
def test_a_body_pulsar_takes_reads_back_to_the_same_json(cls: type[Any], data: Any) -> None:
    names = _names(cls)
    optional = [n for n in names if n not in _required(cls)]
    chosen = data.draw(st.lists(st.sampled_from(optional), unique=True)) if optional else []
    body = {name: GOOD[name] for name in [*_required(cls), *chosen]}
    assert to_json(from_json(cls, body)) == body


@given(st.sampled_from(CLASSES), st.data(), WRONG)
def test_a_field_of_the_wrong_type_is_refused_naming_it(
    cls: type[Any], data: Any, wrong: object
) -> None:
    name = data.draw(st.sampled_from(_names(cls)))
    body = {n: GOOD[n] for n in _required(cls)} | {name: wrong}
    with pytest.raises(PolicyError, match=rf"^{name} must be "):
        from_json(cls, body)


@given(st.sampled_from(CLASSES), st.data())
def test_a_missing_required_field_is_named(cls: type[Any], data: Any) -> None:
    name = data.draw(st.sampled_from(_required(cls)))
    body = {n: GOOD[n] for n in _required(cls) if n != name}
    with pytest.raises(PolicyError, match=f"missing {name}"):
        from_json(cls, body)


def test_a_body_that_is_not_an_object_or_has_a_stray_field_is_named() -> None:
    with pytest.raises(PolicyError, match="the body must be a JSON object"):
        from_json(RetentionPolicies, [1])
    with pytest.raises(PolicyError, match=r"unknown field.* nope"):
        from_json(
            AutoSubscriptionCreationOverride, {"allowAutoSubscriptionCreation": 1 == 1, "nope": 1}
        )


def test_a_stored_policy_that_does_not_check_is_refused_strictly_and_skipped_on_load() -> None:
    stored = {"message_ttl_in_seconds": "soon", "compaction_threshold": 5}
    with pytest.raises(PolicyError, match="message_ttl_in_seconds must be"):
        Policies.from_stored(stored, "t/ns", strict=True)
    view = Policies.from_stored(stored, "t/ns")
    assert view.message_ttl_in_seconds is None and view.compaction_threshold == 5
    # a null field is one not set (Pulsar's admin clients send those they leave unset)
    unset = {"allowAutoTopicCreation": False, "topicType": None, "defaultNumPartitions": None}
    view = Policies.from_stored(
        {"autoTopicCreationOverride": unset, "retention_policies": None}, "t/ns", strict=True
    )
    assert view.auto_topic_creation_override == AutoTopicCreationOverride(False)
    assert view.retention_policies is None


# Namespace and topic policies exactly as the broker stored them before they were typed: the
# bodies as given (the quota with only the older "limit", delayed delivery without a tick).
OLD_NAMESPACE = {
    "auth_policies": {"namespace_auth": {"app": ["produce"]}},
    "retention_policies": {"retentionSizeInMB": 50, "retentionTimeInMinutes": 120},
    "message_ttl_in_seconds": 300,
    "deduplicationEnabled": True,
    "backlog_quota_map": {
        "destination_storage": {"limit": 1048576, "policy": "producer_exception"}
    },
    "max_producers_per_topic": 3,
    "delayed_delivery_policies": {"active": False},
    "inactive_topic_policies": {"deleteWhileInactive": True, "maxInactiveDurationSeconds": 7},
    "autoTopicCreationOverride": {"allowAutoTopicCreation": True, "topicType": "partitioned"},
    "schema_compatibility_strategy": "FORWARD",
}
OLD_TOPIC = {
    "message_ttl_in_seconds": 60,
    "backlog_quota_map": {"message_age": {"limitTime": 90, "policy": "producer_request_hold"}},
}
TOPIC = TopicName.parse("persistent://old/ns/t")


def _config() -> BrokerConfig:
    return load_config(overrides={"topicLevelPoliciesEnabled": True})


class _Service:
    def __init__(self, resources: PulsarResources) -> None:
        self.resources = resources
        self.config = _config()


def test_policies_stored_before_typing_load_apply_and_are_kept_byte_for_byte(
    tmp_path: Path,
) -> None:
    path = tmp_path / "metadata.db"
    store = SqliteMetadataStore(path)
    raw_ns = json.dumps(OLD_NAMESPACE, sort_keys=True).encode()
    raw_topic = json.dumps(OLD_TOPIC, sort_keys=True).encode()
    store.put("/admin/tenants/old", b'{"adminRoles": [], "allowedClusters": ["standalone"]}')
    store.put("/admin/policies/old/ns", raw_ns)
    store.put("/admin/topic-policies/old/ns/persistent/t", raw_topic)
    try:
        service = _Service(PulsarResources(store, "standalone"))
        assert applied_policies.retention(service, TOPIC) == applied_policies.RetentionPolicy(
            120, 50
        )
        assert applied_policies.message_ttl(service, TOPIC) == 60  # the topic's own
        assert applied_policies.deduplication(service, TOPIC) is True
        size = applied_policies.backlog_quota(service, TOPIC, "destination_storage")
        assert size == applied_policies.BacklogQuota(1048576, -1, "producer_exception")
        age = applied_policies.backlog_quota(service, TOPIC, "message_age")
        assert age == applied_policies.BacklogQuota(-1, 90, "producer_request_hold")
        assert applied_policies.max_producers(service, TOPIC) == 3
        tick = service.config.delayedDeliveryTickTimeMillis
        assert applied_policies.delayed_delivery(service, TOPIC) == (False, tick)
        inactive = applied_policies.inactive_topic_policy(service, TOPIC)
        assert (inactive.delete_while_inactive, inactive.max_inactive_seconds) == (True, 7)
        # an unrelated change stores every other policy byte for byte as before
        service.resources.update_namespace_policies(
            "old/ns", lambda p: p.update(compaction_threshold=9)
        )
        stored = json.loads(store.get("/admin/policies/old/ns") or b"")
        assert stored == {**OLD_NAMESPACE, "compaction_threshold": 9}
        assert service.resources.namespace_view("old/ns").compaction_threshold == 9
        assert store.get("/admin/topic-policies/old/ns/persistent/t") == raw_topic
    finally:
        store.close()


def test_an_applied_policy_object_takes_the_fields_it_leaves_out_from_the_default() -> None:
    default = DelayedDeliveryPolicies(active=True, tick_time=1000, max_delivery_delay_in_millis=0)
    given = from_json(DelayedDeliveryPolicies, {"active": False, "maxDeliveryDelayInMillis": 5})
    merged = overlay(default, given)
    assert to_json(merged) == {"active": False, "tickTime": 1000, "maxDeliveryDelayInMillis": 5}
    assert overlay(7, 9) == 9  # not a policy object: the value itself
