"""The official client given the broker's HTTP URL as its service URL: it looks topics up over
the web port, then produces and consumes over the binary port."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pulsar
import pytest

from starquake.broker.embedded import EmbeddedBroker


def _get(broker: EmbeddedBroker, path: str) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(f"{broker.web_service_url}{path}", timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _name() -> str:
    return f"http-{uuid.uuid4().hex[:10]}"


def test_official_client_over_http_produces_and_consumes(broker: EmbeddedBroker) -> None:
    topic = f"persistent://public/default/{_name()}"
    client = pulsar.Client(broker.web_service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(topic, "sub", initial_position=pulsar.InitialPosition.Earliest)
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"m-{i}".encode())
        got = [consumer.receive(5000).data() for _ in range(10)]
        assert got == [f"m-{i}".encode() for i in range(10)]
        assert client.get_topic_partitions(topic) == [topic]
    finally:
        client.close()


def test_auto_created_partitioned_topic_over_http(tmp_path: Path) -> None:
    settings = {"allowAutoTopicCreationType": "partitioned", "defaultNumPartitions": 3}
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        topic = f"persistent://public/default/{_name()}"
        client = pulsar.Client(broker.web_service_url, operation_timeout_seconds=10)
        try:
            producer = client.create_producer(topic)
            consumer = client.subscribe(
                topic, "sub", initial_position=pulsar.InitialPosition.Earliest
            )
            for i in range(30):
                producer.send(f"m-{i}".encode(), partition_key=f"k{i}")
            got = sorted(consumer.receive(5000).data() for _ in range(30))
            assert got == sorted(f"m-{i}".encode() for i in range(30))
            assert len(client.get_topic_partitions(topic)) == 3
        finally:
            client.close()
        assert _get(broker, f"/admin/v2/{topic.replace('://', '/')}/partitions") == (
            200,
            {"partitions": 3},
        )


def test_pattern_subscription_over_http(broker: EmbeddedBroker) -> None:
    prefix = _name()
    client = pulsar.Client(broker.web_service_url, operation_timeout_seconds=10)
    try:
        producers = [
            client.create_producer(f"persistent://public/default/{prefix}-{i}") for i in range(2)
        ]
        consumer = client.subscribe(
            re.compile(f"persistent://public/default/{prefix}-.*"),
            "sub",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        for i, producer in enumerate(producers):
            producer.send(f"from-{i}".encode())
        got = sorted(consumer.receive(5000).data() for _ in range(2))
        assert got == [b"from-0", b"from-1"]
    finally:
        client.close()


def test_lookup_answers(broker: EmbeddedBroker) -> None:
    status, body = _get(broker, "/lookup/v2/topic/persistent/public/default/some-topic")
    assert status == 200
    assert body == {
        "brokerUrl": broker.service_url,
        "brokerUrlTls": "",
        "httpUrl": broker.web_service_url,
        "httpUrlTls": "",
        "nativeUrl": broker.service_url,
    }
    status, body = _get(
        broker, "/lookup/v2/topic/persistent/public/default/some-topic?listenerName=nope"
    )
    assert status == 412
    assert isinstance(body, dict) and "listener named 'nope'" in body["reason"]
    status, body = _get(broker, "/lookup/v2/topic/persistent/public/nowhere/some-topic")
    assert status == 404
    assert isinstance(body, dict) and "public/nowhere does not exist" in body["reason"]
    status, body = _get(broker, "/admin/v2/namespaces/public/default/topics?mode=SOMETIMES")
    assert status == 400


def test_known_listener_gets_its_url(tmp_path: Path) -> None:
    listeners = "internal:pulsar://10.1.2.3:6650,external:pulsar://broker.example:16650"
    with EmbeddedBroker(tmp_path / "data", advertisedListeners=listeners) as broker:
        path = "/lookup/v2/topic/persistent/public/default/t?listenerName=external"
        status, body = _get(broker, path)
        assert status == 200
        assert isinstance(body, dict) and body["brokerUrl"] == "pulsar://broker.example:16650"


@pytest.mark.parametrize("mode", ["PERSISTENT", "ALL"])
def test_topics_of_a_namespace(broker: EmbeddedBroker, mode: str) -> None:
    name = _name()
    broker.create_partitioned_topic(f"persistent://public/default/{name}", 2)
    status, body = _get(broker, f"/admin/v2/namespaces/public/default/topics?mode={mode}")
    assert status == 200
    assert isinstance(body, list)
    assert f"persistent://public/default/{name}-partition-0" in body
    assert f"persistent://public/default/{name}-partition-1" in body
