"""The official client across unloads in quick succession: its producer and consumer
registrations can arrive while the topic is being closed (the broker answers ServiceNotReady,
"Topic is being closed", and the client retries); every message sent after the unloads is
received."""

from __future__ import annotations

import uuid

import pulsar
from admin_http import http_call
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker


def test_official_producer_and_consumer_follow_a_topic_unloaded_again_and_again(
    broker: EmbeddedBroker,
) -> None:
    client = official_client(broker)
    try:
        for round_ in range(10):
            topic = f"persistent://public/default/unloads-{uuid.uuid4().hex[:8]}"
            producer = client.create_producer(topic, send_timeout_millis=10_000)
            consumer = client.subscribe(
                topic, "s", initial_position=pulsar.InitialPosition.Earliest
            )
            path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/unload"
            for _ in range(4):
                status, _ = http_call(broker.web_service_url, "PUT", path)
                assert status == 204
            producer.send(f"after-{round_}".encode())
            message = consumer.receive(timeout_millis=10_000)
            assert message.data() == f"after-{round_}".encode()
            consumer.acknowledge(message)
            producer.close()
            consumer.close()
    finally:
        client.close()
