"""Namespace policies over HTTP: stored durably, answered on Pulsar's paths, refused with a
reason when malformed, and applied to live topics."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import admin_json as _call

from starquake.broker.embedded import EmbeddedBroker

NS = "/admin/v2/namespaces/public/default"


ROUND_TRIPS: list[tuple[str, str, Any]] = [
    ("retention", "POST", {"retentionTimeInMinutes": 60, "retentionSizeInMB": 100}),
    ("messageTTL", "POST", 3600),
    (
        "autoTopicCreation",
        "POST",
        {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3},
    ),
    ("autoSubscriptionCreation", "POST", {"allowAutoSubscriptionCreation": False}),
    ("schemaCompatibilityStrategy", "PUT", "BACKWARD_TRANSITIVE"),
    ("maxProducersPerTopic", "POST", 5),
    ("maxConsumersPerTopic", "POST", 7),
    ("deduplication", "POST", True),
]

BAD_VALUES: list[tuple[str, str, Any]] = [
    ("retention", "POST", {"retentionTimeInMinutes": "a day", "retentionSizeInMB": 1}),
    ("retention", "POST", {"retentionTimeInMinutes": 1}),
    ("messageTTL", "POST", -5),
    ("messageTTL", "POST", "1h"),
    ("autoTopicCreation", "POST", {"allowAutoTopicCreation": True, "topicType": "bogus"}),
    ("autoTopicCreation", "POST", {"allowAutoTopicCreation": True}),
    ("autoSubscriptionCreation", "POST", {"allow": True}),
    ("schemaCompatibilityStrategy", "PUT", "SOMETIMES"),
    ("maxProducersPerTopic", "POST", 1.5),
    ("maxConsumersPerTopic", "POST", b"{oops"),
    ("deduplication", "POST", "yes"),
]


def test_each_policy_round_trips(broker: EmbeddedBroker) -> None:
    for path, method, value in ROUND_TRIPS:
        assert _call(broker, "GET", f"{NS}/{path}") == (204, None), path  # broker default
        assert _call(broker, method, f"{NS}/{path}", value) == (204, None), path
        assert _call(broker, "GET", f"{NS}/{path}") == (200, value), path
    status, policies = _call(broker, "GET", NS)
    assert status == 200
    assert policies["retention_policies"] == ROUND_TRIPS[0][2]
    assert policies["message_ttl_in_seconds"] == 3600
    assert policies["max_consumers_per_topic"] == 7
    for path, _method, _value in ROUND_TRIPS:
        assert _call(broker, "DELETE", f"{NS}/{path}") == (204, None), path
        assert _call(broker, "GET", f"{NS}/{path}") == (204, None), path


def test_bad_values_are_refused_and_change_nothing(broker: EmbeddedBroker) -> None:
    assert _call(broker, "POST", f"{NS}/messageTTL", 60)[0] == 204
    for path, method, value in BAD_VALUES:
        status, body = _call(broker, method, f"{NS}/{path}", value)
        assert status == 400, (path, value, status)
        assert body["reason"], path
    assert _call(broker, "GET", f"{NS}/messageTTL") == (200, 60)
    for path, method, value in ROUND_TRIPS:
        status, body = _call(broker, method, f"/admin/v2/namespaces/public/nowhere/{path}", value)
        assert status == 404 and body["reason"], path


def test_backlog_quota_map(broker: EmbeddedBroker) -> None:
    assert _call(broker, "GET", f"{NS}/backlogQuotaMap") == (200, {})
    quota = {"limitSize": 1 << 30, "limitTime": -1, "policy": "producer_exception"}
    assert _call(broker, "POST", f"{NS}/backlogQuota", quota) == (204, None)
    assert _call(broker, "GET", f"{NS}/backlogQuotaMap") == (200, {"destination_storage": quota})
    bad = {"limitSize": 1, "policy": "drop_everything"}
    assert _call(broker, "POST", f"{NS}/backlogQuota", bad)[0] == 400
    path = f"{NS}/backlogQuota?backlogQuotaType=nonsense"
    assert _call(broker, "POST", path, quota)[0] == 400
    assert _call(broker, "DELETE", f"{NS}/backlogQuota") == (204, None)
    assert _call(broker, "GET", f"{NS}/backlogQuotaMap") == (200, {})


def test_policies_survive_a_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data") as broker:
        for path, method, value in ROUND_TRIPS:
            assert _call(broker, method, f"{NS}/{path}", value)[0] == 204
    with EmbeddedBroker(tmp_path / "data") as broker:
        for path, _method, value in ROUND_TRIPS:
            assert _call(broker, "GET", f"{NS}/{path}") == (200, value), path


def _topic() -> str:
    return f"persistent://public/default/p-{uuid.uuid4().hex[:8]}"


def test_auto_creation_overrides_apply_at_once(broker: EmbeddedBroker) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
    try:
        off = {"allowAutoTopicCreation": False}
        assert _call(broker, "POST", f"{NS}/autoTopicCreation", off)[0] == 204
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(_topic())
        on = {"allowAutoTopicCreation": True, "topicType": "partitioned", "defaultNumPartitions": 3}
        assert _call(broker, "POST", f"{NS}/autoTopicCreation", on)[0] == 204
        topic = _topic()
        client.create_producer(topic).send(b"x")
        local = topic.rsplit("/", 1)[1]
        path = f"/admin/v2/persistent/public/default/{local}/partitions"
        assert _call(broker, "GET", path) == (200, {"partitions": 3})

        existing = _topic()
        client.subscribe(existing, "first").close()
        no_subs = {"allowAutoSubscriptionCreation": False}
        assert _call(broker, "POST", f"{NS}/autoSubscriptionCreation", no_subs)[0] == 204
        with pytest.raises(pulsar.PulsarException):
            client.subscribe(existing, "second")
        client.subscribe(existing, "first").close()  # an existing one still works
    finally:
        client.close()


def test_producer_and_consumer_limits(broker: EmbeddedBroker) -> None:
    topic = _topic()
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
    try:
        assert _call(broker, "POST", f"{NS}/maxProducersPerTopic", 1)[0] == 204
        assert _call(broker, "POST", f"{NS}/maxConsumersPerTopic", 2)[0] == 204
        client.create_producer(topic)
        with pytest.raises(pulsar.ProducerBusy):
            client.create_producer(topic)
        client.subscribe(topic, "a")
        client.subscribe(topic, "b", consumer_type=pulsar.ConsumerType.Shared)
        with pytest.raises(pulsar.ConsumerBusy):
            client.subscribe(topic, "b", consumer_type=pulsar.ConsumerType.Shared)
        assert _call(broker, "DELETE", f"{NS}/maxProducersPerTopic")[0] == 204
        client.create_producer(topic)  # the limit is gone
    finally:
        client.close()


def test_message_ttl_expires_unacknowledged_messages(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "d", messageExpiryCheckIntervalInMinutes=0.005) as broker:
        topic = _topic()
        local = topic.rsplit("/", 1)[1]
        client = pulsar.Client(broker.service_url, operation_timeout_seconds=5)
        try:
            client.subscribe(topic, "slow").close()
            producer = client.create_producer(topic, batching_enabled=False)
            for _ in range(5):
                producer.send(b"old")
        finally:
            client.close()
        assert _call(broker, "POST", f"{NS}/messageTTL", 1)[0] == 204
        stats_path = f"/admin/v2/persistent/public/default/{local}/stats"
        deadline = time.monotonic() + 15
        while True:
            stats = _call(broker, "GET", stats_path)[1]
            if stats["subscriptions"]["slow"]["msgBacklog"] == 0:
                break
            assert time.monotonic() < deadline, "the TTL never expired the messages"
            time.sleep(0.1)
        assert stats["subscriptions"]["slow"]["totalMsgExpired"] == 5
