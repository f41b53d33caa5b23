"""Which cursors and quotas count: checked on PRODUCER with the periodic check off, so a topic
stays over its quota and only the producer check enforces it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import admin_json
from backlog_quota_helpers import refused
from official_client import official_client
from polling import wait_for

from starquake.broker import backlog_quota
from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.topic import PersistentTopic

NAMESPACE = "/admin/v2/namespaces/public/default"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", backlogQuotaCheckEnabled=False) as running:
        yield running


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    c = official_client(broker)
    try:
        yield c
    finally:
        c.close()


def quota(broker: EmbeddedBroker, kind: str, size: int = -1, seconds: int = -1) -> None:
    body = {"limitSize": size, "limitTime": seconds, "policy": "producer_request_hold"}
    path = f"{NAMESPACE}/backlogQuota?backlogQuotaType={kind}"
    assert admin_json(broker, "POST", path, body)[0] == 204


def topic_stats(broker: EmbeddedBroker, topic: str) -> Any:
    path = topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"
    return admin_json(broker, "GET", path)[1]


def test_the_size_quota_is_exceeded_at_the_limit(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"x" * 100)
    backlog = topic_stats(broker, topic)["backlogSize"]
    assert backlog > 500
    quota(broker, "destination_storage", size=backlog + 1)
    assert not refused(client, topic)
    quota(broker, "destination_storage", size=backlog)  # Pulsar: backlog >= limit
    assert refused(client, topic)


def test_readers_do_not_make_a_backlog(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"x" * 100)
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    quota(broker, "destination_storage", size=1)
    quota(broker, "message_age", seconds=1)
    assert topic_stats(broker, topic)["backlogSize"] == 0
    assert not refused(client, topic)
    assert reader.read_next(5000).data() == b"x" * 100


def test_an_age_limit_of_zero_is_no_quota(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "sub")
    client.create_producer(topic).send(b"old enough")
    quota(broker, "message_age", seconds=0)
    assert not refused(client, topic)
    assert topic_stats(broker, topic)["backlogQuotaLimitTime"] == 0  # shown as set


def test_the_compaction_cursor_counts_like_any_durable_cursor(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    for _ in range(5):
        producer.send(b"x" * 100)
    for _ in range(5):
        consumer.acknowledge(consumer.receive(5000))
    wait_for(lambda: not topic_stats(broker, topic)["backlogSize"], "the acknowledgments")
    loaded = broker.service.topics[topic]
    assert isinstance(loaded, PersistentTopic)

    async def open_compaction_cursor() -> None:
        loaded.ledger.open_cursor("__compaction", "earliest")

    broker.call(open_compaction_cursor())
    body = topic_stats(broker, topic)
    assert body["backlogSize"] > 500
    assert body["oldestBacklogMessageSubscriptionName"] == "__compaction"
    quota(broker, "destination_storage", size=500)
    assert refused(client, topic)


def test_topic_quota_of_one_kind_keeps_the_namespace_quota_of_the_other(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"x" * 100)
    base = topic.replace("persistent://", "/admin/v2/persistent/")
    generous = {"limitSize": 10**9, "limitTime": -1, "policy": "producer_request_hold"}
    path = f"{base}/backlogQuota?backlogQuotaType=destination_storage"
    assert admin_json(broker, "POST", path, generous)[0] == 204
    assert not refused(client, topic)
    quota(broker, "message_age", seconds=1)  # the namespace's age quota still applies
    wait_for(lambda: refused(client, topic), "the namespace's age quota to refuse producers")
    assert topic_stats(broker, topic)["backlogQuotaLimitSize"] == 10**9


def test_size_eviction_moves_the_slowest_cursors_in_turn(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "slow").close()
    middle = client.subscribe(topic, "middle")
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(100):
        producer.send(b"%03d" % i + b"x" * 17)
    for _ in range(60):
        middle.acknowledge(middle.receive(5000))
    wait_for(
        lambda: topic_stats(broker, topic)["subscriptions"]["middle"]["msgBacklog"] == 40,
        "the acknowledgments at the broker",
    )
    body = topic_stats(broker, topic)
    limit = body["backlogSize"] // 5  # below what "middle" alone holds back
    body = {"limitSize": limit, "limitTime": -1, "policy": "consumer_backlog_eviction"}
    path = f"{NAMESPACE}/backlogQuota?backlogQuotaType=destination_storage"
    assert admin_json(broker, "POST", path, body)[0] == 204
    service = broker.service
    loaded = service.topics[topic]
    assert isinstance(loaded, PersistentTopic)

    async def check() -> bool:
        return await backlog_quota.check_topic(service, loaded)

    assert broker.call(check())
    after = topic_stats(broker, topic)
    assert after["backlogSize"] <= 0.9 * limit
    slow, mid = (after["subscriptions"][s]["msgBacklog"] for s in ("slow", "middle"))
    assert 0 < slow <= 20 and 0 < mid <= 20
    assert not broker.call(check())  # under the quota now: nothing more to do
