"""Deletion of inactive topics (``brokerDeleteInactiveTopics*``), with the official client."""

from __future__ import annotations

import time
from pathlib import Path

import pulsar
from admin_http import admin_json
from official_client import official_client
from polling import eventually

from starquake.broker.embedded import EmbeddedBroker

FAST = {
    "brokerDeleteInactiveTopicsFrequencySeconds": 0.2,
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": 1,
}


def listed(broker: EmbeddedBroker) -> list[str]:
    status, names = admin_json(broker, "GET", "/admin/v2/persistent/public/default")
    assert status == 200
    return list(names)


def stays_listed(broker: EmbeddedBroker, topic: str, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if topic not in listed(broker):
            return False
        time.sleep(0.1)
    return True


def disappears(broker: EmbeddedBroker, topic: str, timeout: float = 10.0) -> bool:
    return eventually(lambda: topic not in listed(broker), timeout)


def test_topic_without_subscriptions_is_deleted_once_idle(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        client = official_client(broker)
        try:
            producer = client.create_producer(topic)
            producer.send(b"one")
            assert stays_listed(broker, topic)  # a connected producer keeps it alive
            stats_path = f"/admin/v2/{topic.replace('://', '/')}/stats"
            assert admin_json(broker, "GET", stats_path)[0] == 200
            producer.close()
            assert disappears(broker, topic)
            assert admin_json(broker, "GET", stats_path)[0] == 404
            # it comes back empty on the next use
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert not reader.has_message_available()
            reader.close()
        finally:
            client.close()


def test_a_durable_subscription_keeps_the_topic(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", **FAST) as broker:
        client = official_client(broker)
        try:
            client.subscribe(topic, "kept").close()
            client.create_producer(topic).send(b"one")
            assert stays_listed(broker, topic, 3.0)
        finally:
            client.close()


def test_caught_up_mode_deletes_once_every_subscription_has_read_all(
    tmp_path: Path, topic: str
) -> None:
    settings = {**FAST, "brokerDeleteInactiveTopicsMode": "delete_when_subscriptions_caught_up"}
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        client = official_client(broker)
        try:
            consumer = client.subscribe(topic, "sub")
            consumer.close()
            producer = client.create_producer(topic)
            producer.send(b"one")
            producer.close()
            assert stays_listed(broker, topic)  # "sub" has a backlog
            consumer = client.subscribe(topic, "sub")
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
            consumer.close()
            assert disappears(broker, topic)
        finally:
            client.close()


def test_disabled_keeps_idle_topics(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(
        tmp_path / "data", brokerDeleteInactiveTopicsEnabled=False, **FAST
    ) as broker:
        client = official_client(broker)
        try:
            client.create_producer(topic).close()
            assert stays_listed(broker, topic, 2.5)
        finally:
            client.close()
