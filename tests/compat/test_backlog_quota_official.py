"""Backlog quotas with the official client: each policy, for both quota kinds, on live topics.

The quotas are set through the admin API after the topic is loaded (a policy change applies
without a restart); the broker checks them every 0.2 s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import admin_json
from backlog_quota_helpers import Sends, refused
from polling import wait_for

from starquake.broker.embedded import EmbeddedBroker

NAMESPACE = "/admin/v2/namespaces/public/default"
STORAGE = "destination_storage"
AGE = "message_age"
HOLD = "producer_request_hold"
EXCEPTION = "producer_exception"
EVICTION = "consumer_backlog_eviction"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", backlogQuotaCheckIntervalInSeconds=0.2) as running:
        yield running


def set_quota(
    broker: EmbeddedBroker, kind: str, policy: str, *, size: int = -1, seconds: int = -1
) -> None:
    body = {"limitSize": size, "limitTime": seconds, "policy": policy}
    status, reply = admin_json(
        broker, "POST", f"{NAMESPACE}/backlogQuota?backlogQuotaType={kind}", body
    )
    assert status == 204, reply


def stats(broker: EmbeddedBroker, topic: str) -> Any:
    path = topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"
    status, body = admin_json(broker, "GET", path)
    assert status == 200, body
    return body


def disconnected(broker: EmbeddedBroker, topic: str) -> Callable[[], bool]:
    return lambda: not stats(broker, topic)["publishers"]


def fill(producer: pulsar.Producer, count: int, size: int = 100) -> None:
    for i in range(count):
        producer.send(f"{i:04d}".encode() + b"x" * (size - 4))


def ack_all(consumer: pulsar.Consumer, count: int) -> None:
    for _ in range(count):
        consumer.acknowledge(consumer.receive(5000))


# --- producer_request_hold ------------------------------------------------------------------


def test_size_quota_hold_blocks_sends_until_the_backlog_is_consumed(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
    fill(producer, 10)
    set_quota(broker, STORAGE, HOLD, size=500)
    wait_for(disconnected(broker, topic), "the producer to be disconnected")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
        client.create_producer(topic)
    sends = Sends()
    for i in range(3):
        producer.send_async(f"held-{i}".encode(), sends.callback)
    # Held: the producer stays off the topic and a new one is still refused, after the sends.
    assert refused(client, topic) and disconnected(broker, topic)()
    assert sends.count() == 0
    ack_all(consumer, 10)
    wait_for(lambda: sends.count() == 3, "the held sends", timeout=30)
    assert sends.results == [pulsar.Result.Ok] * 3
    assert [consumer.receive(5000).data() for _ in range(3)] == [b"held-0", b"held-1", b"held-2"]


def test_age_quota_hold_blocks_sends_until_the_old_messages_are_acknowledged(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
    fill(producer, 5)
    set_quota(broker, AGE, HOLD, seconds=1)
    wait_for(disconnected(broker, topic), "the producer to be disconnected")
    body = stats(broker, topic)
    assert body["backlogQuotaLimitTime"] == 1
    assert body["oldestBacklogMessageAgeSeconds"] >= 1
    assert body["oldestBacklogMessageSubscriptionName"] == "sub"
    sends = Sends()
    producer.send_async(b"held", sends.callback)
    # Held: the producer stays off the topic and a new one is still refused, after the sends.
    assert refused(client, topic) and disconnected(broker, topic)()
    assert sends.count() == 0
    ack_all(consumer, 5)
    wait_for(lambda: sends.count() == 1, "the held send", timeout=30)
    assert sends.results == [pulsar.Result.Ok]
    assert consumer.receive(5000).data() == b"held"


def test_removing_the_quota_releases_a_held_producer(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
    fill(producer, 10)
    set_quota(broker, STORAGE, HOLD, size=500)
    wait_for(disconnected(broker, topic), "the producer to be disconnected")
    sends = Sends()
    producer.send_async(b"held", sends.callback)
    # Held: the producer stays off the topic and a new one is still refused, after the sends.
    assert refused(client, topic) and disconnected(broker, topic)()
    assert sends.count() == 0
    status, _ = admin_json(broker, "DELETE", f"{NAMESPACE}/backlogQuota?backlogQuotaType={STORAGE}")
    assert status == 204
    wait_for(lambda: sends.count() == 1, "the held send", timeout=30)
    assert sends.results == [pulsar.Result.Ok]
    assert stats(broker, topic)["backlogQuotaLimitSize"] == -1


# --- producer_exception ---------------------------------------------------------------------


def test_size_quota_exception_fails_sends_until_the_backlog_is_consumed(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
    fill(producer, 10)
    set_quota(broker, STORAGE, EXCEPTION, size=500)
    wait_for(disconnected(broker, topic), "the producer to be disconnected")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    sends = Sends()
    for i in range(3):
        producer.send_async(f"refused-{i}".encode(), sends.callback)
    wait_for(lambda: sends.count() == 3, "the sends to fail")
    assert sends.results == [pulsar.Result.ProducerBlockedQuotaExceededException] * 3
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        producer.send(b"refused")
    ack_all(consumer, 10)
    wait_for(lambda: stats(broker, topic)["backlogSize"] < 500, "the backlog to drop")
    producer.send(b"accepted")  # once reconnected
    assert consumer.receive(5000).data() == b"accepted"


def test_age_quota_exception_fails_sends(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
    fill(producer, 3)
    set_quota(broker, AGE, EXCEPTION, seconds=1)
    wait_for(disconnected(broker, topic), "the producer to be disconnected")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        producer.send(b"refused")
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)


# --- consumer_backlog_eviction --------------------------------------------------------------


def test_size_quota_eviction_moves_the_slowest_subscription(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "slow").close()  # durable, and never reads
    fast = client.subscribe(topic, "fast")
    producer = client.create_producer(topic, batching_enabled=False)
    fill(producer, 100, size=20)
    ack_all(fast, 100)
    # the official client sends acknowledgements in the background: wait until they are applied,
    # or "fast" is as far behind as "slow" and eviction may pick it
    wait_for(
        lambda: stats(broker, topic)["subscriptions"]["fast"]["msgBacklog"] == 0,
        "the fast subscription's acknowledgements",
    )
    before = stats(broker, topic)
    assert before["subscriptions"]["slow"]["msgBacklog"] == 100
    limit = before["backlogSize"] // 2
    set_quota(broker, STORAGE, EVICTION, size=limit)
    # Pulsar aims at 90 % of the limit
    wait_for(lambda: stats(broker, topic)["backlogSize"] <= 0.9 * limit, "the eviction")
    after = stats(broker, topic)
    assert 0 < after["subscriptions"]["slow"]["msgBacklog"] < 100
    assert after["subscriptions"]["fast"]["msgBacklog"] == 0
    assert len(after["publishers"]) == 1  # the producer is left alone
    producer.send(b"still accepted")
    assert fast.receive(5000).data() == b"still accepted"
    client.create_producer(topic).send(b"a new producer too")


def test_age_quota_eviction_expires_old_messages(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    client.subscribe(topic, "slow").close()
    producer = client.create_producer(topic, batching_enabled=False)
    fill(producer, 5)
    set_quota(broker, AGE, EVICTION, seconds=2)
    wait_for(
        lambda: stats(broker, topic)["subscriptions"]["slow"]["msgBacklog"] == 0,
        "the old messages to expire",
    )
    body = stats(broker, topic)
    assert body["subscriptions"]["slow"]["totalMsgExpired"] == 5
    assert body["oldestBacklogMessageAgeSeconds"] == -1
    assert len(body["publishers"]) == 1
    producer.send(b"still accepted")


@pytest.mark.parametrize(
    ("policy", "refusal"),
    [
        (HOLD, pulsar.ProducerBlockedQuotaExceededError),
        (EXCEPTION, pulsar.ProducerBlockedQuotaExceededException),
        (EVICTION, None),
    ],
)
def test_new_producer_on_a_topic_over_quota(
    tmp_path: Path, topic: str, policy: str, refusal: type[Exception] | None
) -> None:
    # without the periodic check the topic stays over its quota: only PRODUCER enforces it
    with EmbeddedBroker(tmp_path / "data", backlogQuotaCheckEnabled=False) as broker:
        client = pulsar.Client(
            broker.service_url,
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            client.subscribe(topic, "sub")
            producer = client.create_producer(topic, batching_enabled=False)
            fill(producer, 10)
            set_quota(broker, STORAGE, policy, size=500)
            if refusal is None:
                client.create_producer(topic).send(b"eviction never refuses producers")
            else:
                with pytest.raises(refusal):
                    client.create_producer(topic)
            producer.send(b"the attached producer was not disconnected")
        finally:
            client.close()


# --- stats ----------------------------------------------------------------------------------


def test_stats_show_the_quotas_and_the_oldest_backlog_message(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"nobody subscribed")
    body = stats(broker, topic)
    assert body["backlogQuotaLimitSize"] == -1
    assert body["backlogQuotaLimitTime"] == -1
    assert body["oldestBacklogMessageAgeSeconds"] == -1
    assert body["backlogSize"] == 0  # no durable subscription: no backlog
    consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
    set_quota(broker, STORAGE, EVICTION, size=10**9)
    set_quota(broker, AGE, EVICTION, seconds=3600)
    wait_for(
        lambda: stats(broker, topic)["oldestBacklogMessageAgeSeconds"] >= 1,
        "the message to be a second old",
    )
    body = stats(broker, topic)
    assert body["backlogQuotaLimitSize"] == 10**9
    assert body["backlogQuotaLimitTime"] == 3600
    assert body["backlogSize"] > 0
    assert body["oldestBacklogMessageAgeSeconds"] >= 1
    assert body["oldestBacklogMessageSubscriptionName"] == "sub"
    ack_all(consumer, 1)
    wait_for(lambda: stats(broker, topic)["backlogSize"] == 0, "the backlog to be consumed")
    assert stats(broker, topic)["oldestBacklogMessageAgeSeconds"] == -1


def test_partitioned_topic_producers_are_refused_per_partition(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    broker.create_partitioned_topic(topic, 2)
    client.subscribe(topic, "sub")
    partition = f"{topic}-partition-0"
    producer = client.create_producer(partition, batching_enabled=False)
    fill(producer, 10)
    producer.close()
    set_quota(broker, STORAGE, HOLD, size=500)
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
        client.create_producer(partition)
    with pytest.raises(pulsar.ProducerBlockedQuotaExceededError):
        client.create_producer(topic)  # one partition over the quota is enough
    client.create_producer(f"{topic}-partition-1").send(b"the other partition is not over")
