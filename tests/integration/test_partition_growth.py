"""A partitioned topic grown over HTTP while producers and consumers use it: they find the new
partitions on their own, and messages flow through every partition."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pulsar
import pytest
from admin_http import http_call

from starquake.broker.embedded import EmbeddedBroker
from starquake.client import Client

NS = "/admin/v2/persistent/public/default"


def _grow(broker: EmbeddedBroker, local: str, count: int) -> None:
    status, body = http_call(broker.web_service_url, "POST", f"{NS}/{local}/partitions", count)
    assert status == 204, body


def _partition_of(message: Any) -> str:
    return str(message.topic_name()).rsplit("-partition-", 1)[1]


def _run(client: Any, broker: EmbeddedBroker, deadline_s: float) -> set[str]:
    """Produce without pause and consume while the topic grows from 2 to 4 partitions;
    returns the partitions messages were received from after the growth."""
    local = f"grow-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{local}"
    status, body = http_call(broker.web_service_url, "PUT", f"{NS}/{local}/partitions", 2)
    assert status == 204, body
    consumer = client.subscribe(topic, "all", consumer_type=pulsar.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False)
    stop = threading.Event()
    errors: list[BaseException] = []

    def produce() -> None:
        try:
            i = 0
            while not stop.is_set():
                producer.send(f"m{i}".encode())
                i += 1
                time.sleep(0.005)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        before = {_partition_of(consumer.receive(timeout_millis=10000)) for _ in range(20)}
        assert before <= {"0", "1"}
        _grow(broker, local, 4)
        seen: set[str] = set()
        deadline = time.monotonic() + deadline_s
        while seen != {"0", "1", "2", "3"}:
            assert time.monotonic() < deadline, f"only partitions {sorted(seen)} delivered"
            message = consumer.receive(timeout_millis=10000)
            consumer.acknowledge(message)
            seen.add(_partition_of(message))
        return seen
    finally:
        stop.set()
        thread.join(timeout=10)
        assert not errors, errors


def test_our_client_picks_up_new_partitions(broker: EmbeddedBroker) -> None:
    client = Client(broker.service_url, partitions_update_interval_seconds=1)
    try:
        assert _run(client, broker, deadline_s=20) == {"0", "1", "2", "3"}
    finally:
        client.close()


@pytest.mark.timeout(200)
def test_official_client_over_http_picks_up_new_partitions(broker: EmbeddedBroker) -> None:
    # The official client looks for new partitions once a minute (its default).
    client = pulsar.Client(broker.web_service_url, operation_timeout_seconds=10)
    try:
        assert _run(client, broker, deadline_s=100) == {"0", "1", "2", "3"}
    finally:
        client.close()
