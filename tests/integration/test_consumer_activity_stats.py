"""The stats operators read to find stuck consumers carry real values: when each consumer last
got messages, acknowledged and asked for more, when the subscription's mark-delete position
last moved, the messages per entry, and the cursor's consumed counter. Through a broker process
with the official client."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import admin_json
from broker_process import BrokerProcess, broker_process, process_client
from polling import wait_for

NS = "/admin/v2/persistent/public/default"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with broker_process(tmp_path / "data") as proc:
        yield proc


def _now_ms() -> int:
    return int(time.time() * 1000)


def _subscription(broker: BrokerProcess, topic: str, name: str) -> Any:
    status, stats = admin_json(broker, "GET", f"{NS}/{topic}/stats")
    assert status == 200, stats
    return stats["subscriptions"][name]


def _publish_batches(client: pulsar.Client, topic: str, batches: int, size: int) -> None:
    producer = client.create_producer(
        f"persistent://public/default/{topic}",
        batching_enabled=True,
        batching_max_messages=size,
        batching_max_publish_delay_ms=60_000,
    )
    for _ in range(batches):
        for i in range(size):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
    producer.close()


def test_activity_timestamps_and_counters_of_a_consumer(broker: BrokerProcess) -> None:
    topic = "activity"
    client = process_client(broker.url)
    try:
        before_subscribe = _now_ms()
        consumer = client.subscribe(f"persistent://public/default/{topic}", "s")
        sub = _subscription(broker, topic, "s")
        assert sub["lastConsumedFlowTimestamp"] >= before_subscribe  # the first FLOW
        assert sub["consumers"][0]["lastConsumedFlowTimestamp"] >= before_subscribe
        assert sub["lastConsumedTimestamp"] == 0 and sub["lastAckedTimestamp"] == 0
        assert sub["lastMarkDeleteAdvancedTimestamp"] == 0

        before_publish = _now_ms()
        _publish_batches(client, topic, batches=2, size=4)
        received = [consumer.receive(10_000) for _ in range(8)]

        def dispatched() -> bool:
            return _subscription(broker, topic, "s")["lastConsumedTimestamp"] >= before_publish

        wait_for(dispatched, "the dispatch time in the stats")
        sub = _subscription(broker, topic, "s")
        assert sub["consumers"][0]["avgMessagesPerEntry"] == 4
        assert sub["lastAckedTimestamp"] == 0  # nothing acknowledged yet: a stuck consumer

        before_ack = _now_ms()
        for message in received:
            consumer.acknowledge(message)

        def acked() -> bool:
            current = _subscription(broker, topic, "s")
            return bool(
                current["lastAckedTimestamp"] >= before_ack
                and current["lastMarkDeleteAdvancedTimestamp"] >= before_ack
            )

        wait_for(acked, "the acknowledgment times in the stats")
        sub = _subscription(broker, topic, "s")
        assert sub["consumers"][0]["lastAckedTimestamp"] >= before_ack
        assert sub["lastAckedTimestamp"] <= _now_ms()
        internal = admin_json(broker, "GET", f"{NS}/{topic}/internalStats")[1]
        assert internal["entriesAddedCounter"] == 2
        assert internal["cursors"]["s"]["messagesConsumedCounter"] == 2
        consumer.close()
    finally:
        client.close()


def test_an_idle_subscription_keeps_its_flow_and_mark_delete_times(
    broker: BrokerProcess,
) -> None:
    """The subscription keeps the times it records itself once its consumers leave."""
    topic = "idle"
    client = process_client(broker.url)
    try:
        consumer = client.subscribe(f"persistent://public/default/{topic}", "s")
        _publish_batches(client, topic, batches=1, size=2)
        for _ in range(2):
            consumer.acknowledge(consumer.receive(10_000))
        wait_for(
            lambda: _subscription(broker, topic, "s")["lastMarkDeleteAdvancedTimestamp"] > 0,
            "the mark-delete time",
        )
        consumer.close()
        sub = _subscription(broker, topic, "s")
        assert sub["consumers"] == []
        assert sub["lastConsumedFlowTimestamp"] > 0
        assert sub["lastMarkDeleteAdvancedTimestamp"] > 0
    finally:
        client.close()


def test_a_non_persistent_consumer_shows_its_dispatch_and_flow_times(
    broker: BrokerProcess,
) -> None:
    topic = "non-persistent://public/default/np"
    client = process_client(broker.url)
    try:
        before = _now_ms()
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic, batching_enabled=False)
        producer.send(b"x")
        consumer.receive(10_000)
        path = "/admin/v2/non-persistent/public/default/np/stats"
        stats = admin_json(broker, "GET", path)[1]
        entry = stats["subscriptions"]["s"]["consumers"][0]
        assert entry["lastConsumedTimestamp"] >= before
        assert entry["lastConsumedFlowTimestamp"] >= before
        assert entry["avgMessagesPerEntry"] == 1
        assert stats["subscriptions"]["s"]["lastConsumedTimestamp"] >= before
    finally:
        client.close()


def test_partitioned_stats_show_the_latest_time_of_the_partitions(broker: BrokerProcess) -> None:
    assert admin_json(broker, "PUT", f"{NS}/spread/partitions", 3)[0] == 204
    client = process_client(broker.url)
    try:
        consumer = client.subscribe("persistent://public/default/spread", "s")
        producer = client.create_producer(
            "persistent://public/default/spread",
            batching_enabled=False,
            message_routing_mode=pulsar.PartitionsRoutingMode.RoundRobinDistribution,
        )
        for i in range(6):
            producer.send(f"m{i}".encode())
        for _ in range(6):
            consumer.acknowledge(consumer.receive(10_000))

        def merged() -> Any:
            stats = admin_json(broker, "GET", f"{NS}/spread/partitioned-stats")[1]
            return stats["subscriptions"]["s"]

        wait_for(lambda: merged()["lastMarkDeleteAdvancedTimestamp"] > 0, "the acks")
        sub = merged()
        now = _now_ms()
        for key in ("lastConsumedTimestamp", "lastAckedTimestamp", "lastConsumedFlowTimestamp"):
            assert 0 < sub[key] <= now, (key, sub[key])  # the latest, not a sum of times
        assert sub["lastMarkDeleteAdvancedTimestamp"] <= now
    finally:
        client.close()
