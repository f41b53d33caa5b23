"""Fault tolerance: the broker restarts under a live producer and consumer."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

from admin_http import http_call

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker


def test_broker_restart_same_port(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = EmbeddedBroker(data).start()
    port = broker.broker_port
    topic = "persistent://public/default/restart"
    client = sq.Client(broker.service_url, operation_timeout_seconds=20)
    try:
        consumer = client.subscribe(
            topic,
            "s",
            consumer_type=sq.ConsumerType.Shared,
            initial_position=sq.InitialPosition.Earliest,
        )
        producer = client.create_producer(topic, batching_enabled=True, send_timeout_millis=60000)
        results: dict[int, Any] = {}
        lock = threading.Lock()

        def callback_for(i: int) -> Any:
            def cb(res: Any, mid: Any) -> None:
                with lock:
                    results[i] = res

            return cb

        for i in range(50):
            producer.send(f"before-{i}".encode())
        received: set[bytes] = set()
        for _ in range(20):
            msg = consumer.receive(timeout_millis=5000)
            received.add(msg.data())
            consumer.acknowledge(msg)
        time.sleep(0.3)  # let the grouped acks go out

        broker.stop()
        for i in range(50):  # queued while the broker is down
            producer.send_async(f"during-{i}".encode(), callback_for(i))
        broker = EmbeddedBroker(data, brokerServicePort=port).start()

        producer.flush()
        assert all(r == sq.Result.Ok for r in results.values()) and len(results) == 50
        producer.send(b"after")
        expected = (
            {f"before-{i}".encode() for i in range(50)}
            | {f"during-{i}".encode() for i in range(50)}
            | {b"after"}
        )
        deadline = time.time() + 30
        while not expected <= received and time.time() < deadline:
            try:
                msg = consumer.receive(timeout_millis=1000)
            except sq.Timeout:
                continue
            received.add(msg.data())
            consumer.acknowledge(msg)
        assert expected <= received
        assert producer.is_connected() and consumer.is_connected()
    finally:
        client.close()
        broker.stop()


def test_a_producer_and_a_consumer_follow_a_topic_unloaded_again_and_again(
    broker: EmbeddedBroker,
) -> None:
    """Unloads in quick succession: a CLOSE_PRODUCER / CLOSE_CONSUMER can come with the answer
    to the handler's own registration; it must register again, not believe it is served."""
    client = sq.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        for round_ in range(15):
            topic = f"persistent://public/default/unloads-{uuid.uuid4().hex[:8]}"
            producer = client.create_producer(topic, send_timeout_millis=5000)
            consumer = client.subscribe(topic, "s", initial_position=sq.InitialPosition.Earliest)
            path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/unload"
            for _ in range(4):
                status, _ = http_call(broker.web_service_url, "PUT", path)
                assert status == 204
            producer.send(f"after-{round_}".encode())
            assert consumer.receive(timeout_millis=5000).data() == f"after-{round_}".encode()
            producer.close()
            consumer.close()
    finally:
        client.close()
