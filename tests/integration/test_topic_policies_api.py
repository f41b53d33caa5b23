"""Topic-level policies over real HTTP: Pulsar's paths and bodies, ``?applied=true`` resolution
(topic, then namespace, then broker), refusals (400/404/405/412), partitioned topics, and
persistence across a broker restart on the same data directory."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from admin_http import admin_json as _call

from starquake.broker.embedded import EmbeddedBroker

NS = "/admin/v2/namespaces/public/default"

# (path, a value to set on the topic)
ROUND_TRIPS: list[tuple[str, Any]] = [
    ("retention", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}),
    ("deduplicationEnabled", True),
    ("maxUnackedMessagesOnConsumer", 7),
    ("maxUnackedMessagesOnSubscription", 70),
    ("delayedDelivery", {"active": False, "tickTime": 500, "maxDeliveryDelayInMillis": 60000}),
    ("compactionThreshold", 1 << 20),
    ("maxProducers", 3),
    ("maxConsumers", 4),
    (
        "inactiveTopicPolicies",
        {
            "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
            "maxInactiveDurationSeconds": 120,
            "deleteWhileInactive": True,
        },
    ),
]

BAD_VALUES: list[tuple[str, Any]] = [
    ("retention", {"retentionTimeInMinutes": 10, "retentionSizeInMB": 0}),
    ("retention", {"retentionTimeInMinutes": -2, "retentionSizeInMB": 10}),
    ("retention", {"retentionTimeInMinutes": 10}),
    ("deduplicationEnabled", "yes"),
    ("maxUnackedMessagesOnConsumer", -1),
    ("maxUnackedMessagesOnSubscription", 1.5),
    ("delayedDelivery", {"tickTime": 100}),
    ("delayedDelivery", {"active": True, "tickTime": 0}),
    ("compactionThreshold", "big"),
    ("maxProducers", b"{oops"),
    ("maxConsumers", None),
    ("inactiveTopicPolicies", {"deleteWhileInactive": True, "inactiveTopicDeleteMode": "never"}),
]


def _topic_path(local: str, domain: str = "persistent") -> str:
    return f"/admin/v2/{domain}/public/default/{local}"


def _new_topic(broker: EmbeddedBroker) -> str:
    local = f"tp-{uuid.uuid4().hex[:8]}"
    assert _call(broker, "PUT", _topic_path(local)) == (204, None)
    return _topic_path(local)


def test_each_policy_round_trips(broker: EmbeddedBroker) -> None:
    topic = _new_topic(broker)
    for path, value in ROUND_TRIPS:
        assert _call(broker, "GET", f"{topic}/{path}") == (204, None), path
        assert _call(broker, "POST", f"{topic}/{path}", value) == (204, None), path
        assert _call(broker, "GET", f"{topic}/{path}") == (200, value), path
        assert _call(broker, "GET", f"{topic}/{path}?applied=true") == (200, value), path
    for path, _value in ROUND_TRIPS:
        assert _call(broker, "DELETE", f"{topic}/{path}") == (204, None), path
        assert _call(broker, "GET", f"{topic}/{path}") == (204, None), path


def test_message_ttl_takes_the_query_parameter(broker: EmbeddedBroker) -> None:
    topic = _new_topic(broker)
    assert _call(broker, "GET", f"{topic}/messageTTL") == (204, None)
    assert _call(broker, "POST", f"{topic}/messageTTL?messageTTL=90") == (204, None)
    assert _call(broker, "GET", f"{topic}/messageTTL") == (200, 90)
    assert _call(broker, "POST", f"{topic}/messageTTL", 30) == (204, None)  # a JSON body too
    assert _call(broker, "GET", f"{topic}/messageTTL") == (200, 30)
    for bad in ("-1", "soon"):
        status, body = _call(broker, "POST", f"{topic}/messageTTL?messageTTL={bad}")
        assert status == 400 and body["reason"], bad
    assert _call(broker, "POST", f"{topic}/messageTTL")[0] == 400
    assert _call(broker, "GET", f"{topic}/messageTTL") == (200, 30)
    assert _call(broker, "DELETE", f"{topic}/messageTTL?messageTTL=0") == (204, None)
    assert _call(broker, "GET", f"{topic}/messageTTL") == (204, None)


def test_applied_is_topic_then_namespace_then_broker(tmp_path: Path) -> None:
    settings = {
        "ttlDurationDefaultInSeconds": 11,
        "maxUnackedMessagesPerConsumer": 123,
        "defaultRetentionTimeInMinutes": 5,
        "defaultRetentionSizeInMB": 6,
        "brokerServiceCompactionThresholdInBytes": 999,
        "delayedDeliveryTickTimeMillis": 250,
    }
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        topic = _new_topic(broker)

        def applied(path: str) -> Any:
            status, value = _call(broker, "GET", f"{topic}/{path}?applied=true")
            assert status == 200, path
            return value

        assert applied("messageTTL") == 11
        assert applied("maxUnackedMessagesOnConsumer") == 123
        assert applied("retention") == {"retentionTimeInMinutes": 5, "retentionSizeInMB": 6}
        assert applied("compactionThreshold") == 999
        assert applied("deduplicationEnabled") is False
        assert applied("maxProducers") == 0
        assert applied("delayedDelivery") == {
            "active": True,
            "tickTime": 250,
            "maxDeliveryDelayInMillis": 0,
        }
        assert applied("inactiveTopicPolicies")["inactiveTopicDeleteMode"] == (
            "delete_when_no_subscriptions"
        )

        assert _call(broker, "POST", f"{NS}/messageTTL", 22)[0] == 204
        assert _call(broker, "POST", f"{NS}/maxUnackedMessagesPerConsumer", 456)[0] == 204
        assert _call(broker, "POST", f"{NS}/delayedDelivery", {"active": False})[0] == 204
        assert applied("messageTTL") == 22
        assert applied("maxUnackedMessagesOnConsumer") == 456
        # the fields a stored value leaves out are the broker's
        assert applied("delayedDelivery") == {
            "active": False,
            "tickTime": 250,
            "maxDeliveryDelayInMillis": 0,
        }
        assert _call(broker, "GET", f"{topic}/messageTTL") == (204, None)  # not the topic's

        assert _call(broker, "POST", f"{topic}/messageTTL?messageTTL=33")[0] == 204
        assert _call(broker, "POST", f"{topic}/maxUnackedMessagesOnConsumer", 0)[0] == 204
        assert applied("messageTTL") == 33
        assert applied("maxUnackedMessagesOnConsumer") == 0  # 0 on the topic wins too


def test_backlog_quotas_by_type(broker: EmbeddedBroker) -> None:
    topic = _new_topic(broker)
    assert _call(broker, "GET", f"{topic}/backlogQuotaMap") == (200, {})
    status, applied = _call(broker, "GET", f"{topic}/backlogQuotaMap?applied=true")
    assert status == 200
    assert applied["destination_storage"]["policy"] == "producer_request_hold"
    assert applied["destination_storage"]["limitSize"] == -1

    size = {"limitSize": 1 << 20, "limitTime": -1, "policy": "producer_exception"}
    age = {"limitSize": -1, "limitTime": 30, "policy": "consumer_backlog_eviction"}
    assert _call(broker, "POST", f"{topic}/backlogQuota", size) == (204, None)
    assert _call(broker, "POST", f"{topic}/backlogQuota?backlogQuotaType=message_age", age)[0] == (
        204
    )
    assert _call(broker, "GET", f"{topic}/backlogQuotaMap") == (
        200,
        {"destination_storage": size, "message_age": age},
    )
    ns_quota = {"limitSize": 5, "limitTime": -1, "policy": "producer_request_hold"}
    assert _call(broker, "POST", f"{NS}/backlogQuota", ns_quota)[0] == 204
    assert _call(broker, "GET", f"{topic}/backlogQuotaMap?applied=true")[1]["message_age"] == age

    status, body = _call(broker, "POST", f"{topic}/backlogQuota?backlogQuotaType=size", size)
    assert status == 400 and "backlogQuotaType" in body["reason"]
    assert _call(broker, "POST", f"{topic}/backlogQuota", {"limitSize": 5})[0] == 400

    assert _call(broker, "DELETE", f"{topic}/backlogQuota?backlogQuotaType=message_age")[0] == 204
    assert _call(broker, "GET", f"{topic}/backlogQuotaMap") == (
        200,
        {"destination_storage": size},
    )
    assert _call(broker, "DELETE", f"{topic}/backlogQuota")[0] == 204
    assert _call(broker, "GET", f"{topic}/backlogQuotaMap") == (200, {})
    # nothing left on the topic: the namespace's map applies
    assert _call(broker, "GET", f"{topic}/backlogQuotaMap?applied=true") == (
        200,
        {"destination_storage": ns_quota},
    )


def test_retention_must_exceed_the_backlog_quota(broker: EmbeddedBroker) -> None:
    topic = _new_topic(broker)
    quota = {"limitSize": 10 * 1024 * 1024, "limitTime": -1, "policy": "producer_exception"}
    assert _call(broker, "POST", f"{topic}/backlogQuota", quota)[0] == 204
    small = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 10}
    status, body = _call(broker, "POST", f"{topic}/retention", small)
    assert status == 412 and "Retention Quota must exceed" in body["reason"]
    large = {"retentionTimeInMinutes": -1, "retentionSizeInMB": 11}
    assert _call(broker, "POST", f"{topic}/retention", large)[0] == 204
    bigger = {"limitSize": 20 * 1024 * 1024, "limitTime": -1, "policy": "producer_exception"}
    status, body = _call(broker, "POST", f"{topic}/backlogQuota", bigger)
    assert status == 412 and "Backlog Quota exceeds" in body["reason"]
    assert _call(broker, "GET", f"{topic}/backlogQuotaMap")[1] == {"destination_storage": quota}

    # the same rule at the namespace level, and Pulsar's rule on single zero limits
    assert _call(broker, "POST", f"{NS}/backlogQuota", quota)[0] == 204
    status, body = _call(broker, "POST", f"{NS}/retention", small)
    assert status == 412 and "for namespace" in body["reason"]
    half_zero = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 100}
    status, body = _call(broker, "POST", f"{NS}/retention", half_zero)
    assert status == 400 and "Setting a single time or size limit to 0" in body["reason"]
    none = {"retentionTimeInMinutes": 0, "retentionSizeInMB": 0}
    assert _call(broker, "POST", f"{NS}/retention", none)[0] == 204
    assert _call(broker, "GET", f"{NS}/retention") == (200, none)


def test_bad_values_are_refused_and_change_nothing(broker: EmbeddedBroker) -> None:
    topic = _new_topic(broker)
    assert _call(broker, "POST", f"{topic}/maxProducers", 2)[0] == 204
    for path, value in BAD_VALUES:
        status, body = _call(broker, "POST", f"{topic}/{path}", value)
        assert status == 400, (path, value, status, body)
        assert body["reason"], path
    assert _call(broker, "GET", f"{topic}/maxProducers") == (200, 2)
    for path, _value in ROUND_TRIPS:
        if path != "maxProducers":
            assert _call(broker, "GET", f"{topic}/{path}") == (204, None), path


def test_unknown_topic_or_namespace_is_404(broker: EmbeddedBroker) -> None:
    for path, value in ROUND_TRIPS:
        for target in (_topic_path("missing"), "/admin/v2/persistent/public/nowhere/t"):
            status, body = _call(broker, "POST", f"{target}/{path}", value)
            assert status == 404 and body["reason"], (target, path)
            assert _call(broker, "GET", f"{target}/{path}")[0] == 404
            assert _call(broker, "DELETE", f"{target}/{path}")[0] == 404
    assert _call(broker, "GET", f"{_topic_path('missing')}/backlogQuotaMap")[0] == 404


def test_disabled_topic_policies_answer_405(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data", topicLevelPoliciesEnabled=False) as broker:
        topic = _new_topic(broker)
        for path, value in ROUND_TRIPS:
            status, body = _call(broker, "POST", f"{topic}/{path}", value)
            assert status == 405, path
            assert body["reason"] == (
                "Topic level policies is disabled, to enable the topic level policy and retry."
            )
            assert _call(broker, "GET", f"{topic}/{path}")[0] == 405
        assert _call(broker, "GET", f"{topic}/backlogQuotaMap")[0] == 405
        # namespace policies still work
        assert _call(broker, "POST", f"{NS}/maxUnackedMessagesPerConsumer", 9)[0] == 204


@pytest.mark.parametrize("domain", ["persistent", "non-persistent"])
def test_partitioned_topic_policies_apply_to_every_partition(
    broker: EmbeddedBroker, domain: str
) -> None:
    local = f"pt-{uuid.uuid4().hex[:8]}"
    base = _topic_path(local, domain)
    assert _call(broker, "PUT", f"{base}/partitions", 3) == (204, None)
    assert _call(broker, "POST", f"{base}/maxConsumers", 5) == (204, None)
    for i in range(3):
        partition = _topic_path(f"{local}-partition-{i}", domain)
        assert _call(broker, "GET", f"{partition}/maxConsumers") == (200, 5)
    assert _call(broker, "POST", f"{_topic_path(local + '-partition-1', domain)}/maxConsumers", 6)[
        0
    ] == (204)
    assert _call(broker, "GET", f"{base}/maxConsumers") == (200, 6)
    assert _call(broker, "DELETE", f"{base}/partitions")[0] == 204
    assert _call(broker, "GET", f"{base}/maxConsumers")[0] == 404


def test_policies_survive_a_restart_and_go_with_their_topic(tmp_path: Path) -> None:
    data = tmp_path / "data"
    local = f"keep-{uuid.uuid4().hex[:8]}"
    topic = _topic_path(local)
    quota = {"limitSize": 1 << 20, "limitTime": -1, "policy": "producer_request_hold"}
    with EmbeddedBroker(data) as broker:
        assert _call(broker, "PUT", topic)[0] == 204
        assert _call(broker, "PUT", f"{topic}-parted/partitions", 2)[0] == 204
        for path, value in ROUND_TRIPS:
            assert _call(broker, "POST", f"{topic}/{path}", value)[0] == 204, path
        assert _call(broker, "POST", f"{topic}/messageTTL?messageTTL=77")[0] == 204
        assert _call(broker, "POST", f"{topic}/backlogQuota", quota)[0] == 204
        assert _call(broker, "POST", f"{topic}-parted/maxProducers", 8)[0] == 204
    with EmbeddedBroker(data) as broker:
        for path, value in ROUND_TRIPS:
            assert _call(broker, "GET", f"{topic}/{path}") == (200, value), path
        assert _call(broker, "GET", f"{topic}/messageTTL") == (200, 77)
        assert _call(broker, "GET", f"{topic}/backlogQuotaMap") == (
            200,
            {"destination_storage": quota},
        )
        assert _call(broker, "GET", f"{topic}-parted-partition-1/maxProducers") == (200, 8)
        # deleting the topic deletes its policies: a topic created again starts without them
        assert _call(broker, "DELETE", f"{topic}?force=true")[0] == 204
        assert _call(broker, "PUT", topic)[0] == 204
        for path, _value in ROUND_TRIPS:
            assert _call(broker, "GET", f"{topic}/{path}") == (204, None), path
        assert _call(broker, "GET", f"{topic}/backlogQuotaMap") == (200, {})
