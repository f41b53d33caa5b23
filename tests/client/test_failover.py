"""``AutoClusterFailover`` between two broker processes: the client produces and consumes on
the primary, moves to the secondary once the primary is killed (kill -9), and back to the
primary once it runs again; its producer and consumer follow each switch."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from broker_process import BrokerProcess, read_all
from polling import wait_for

import starquake.client as sq


def _receive_until(consumer: Any, payload: bytes) -> list[bytes]:
    """Receive (and acknowledge) until ``payload`` arrives; redeliveries of earlier messages
    (acknowledgements a killed broker never stored) may come first."""
    seen = []
    while True:
        msg = consumer.receive(30_000)
        consumer.acknowledge(msg)
        seen.append(msg.data())
        if msg.data() == payload:
            return seen


def test_client_fails_over_to_the_secondary_and_switches_back(tmp_path: Path) -> None:
    primary = BrokerProcess(tmp_path / "primary")
    secondary = BrokerProcess(tmp_path / "secondary")
    primary.start()
    secondary.start()
    topic = f"persistent://public/default/failover-{uuid.uuid4().hex[:12]}"
    config = sq.AutoClusterFailover(
        sq.ServiceInfo(primary.url),
        [sq.ServiceInfo(secondary.url)],
        check_interval_ms=200,
        failover_threshold=2,
        switch_back_threshold=2,
    )
    client = sq.Client(config, operation_timeout_seconds=30)
    try:
        assert client.get_service_info().service_url == primary.url
        producer = client.create_producer(topic, batching_enabled=False)
        consumer = client.subscribe(topic, "sub", initial_position=sq.InitialPosition.Earliest)
        producer.send(b"on-primary")
        assert _receive_until(consumer, b"on-primary") == [b"on-primary"]

        primary.kill()
        wait_for(lambda: client.get_service_info().service_url == secondary.url, "failover")
        producer.send(b"on-secondary")
        assert _receive_until(consumer, b"on-secondary")[-1] == b"on-secondary"
        assert [data for data, _ in read_all(secondary.url, topic)] == [b"on-secondary"]

        primary.start()
        wait_for(lambda: client.get_service_info().service_url == primary.url, "switch back")
        producer.send(b"back-on-primary")
        assert _receive_until(consumer, b"back-on-primary")[-1] == b"back-on-primary"
        on_primary = [data for data, _ in read_all(primary.url, topic)]
        assert on_primary == [b"on-primary", b"back-on-primary"]
        client.close()
    finally:
        primary.cleanup()
        secondary.cleanup()
