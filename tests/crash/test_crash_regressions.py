"""Regression tests for the bugs the model-based crash test found.

Each bug has the minimal walk the shrinker left (replayed through the crash model) and, where it
helps, a direct test with the official client. A test for a bug not fixed yet is marked
``xfail(strict=True)``: whoever fixes the bug removes the marker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from broker_process import BrokerProcess, process_client
from crash_model import Step, WalkConfig, run_walk
from official_client import drain

TOPIC = "persistent://public/default/regression"
EARLIEST = pulsar.InitialPosition.Earliest


def _replay(config: WalkConfig, steps: list[Step], tmp_path: Path) -> None:
    violation, stats = run_walk(config, steps, tmp_path / "walk")
    assert violation is None, str(violation)
    assert stats.restarts >= 1


@pytest.fixture
def batch_index_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", "acknowledgmentAtBatchIndexLevelEnabled=true")
    proc.start()
    yield proc
    proc.cleanup()


# --- cumulative ack of a message inside a batch, with batch-index acks -------------------------


def test_cumulative_ack_inside_a_batch_keeps_the_rest_of_the_batch(
    batch_index_broker: BrokerProcess,
) -> None:
    client = process_client(batch_index_broker.url)
    consumer = client.subscribe(
        TOPIC, "sub", initial_position=EARLIEST, batch_index_ack_enabled=True
    )
    producer = client.create_producer(
        TOPIC, batching_enabled=True, batching_max_publish_delay_ms=1000
    )
    for i in range(5):
        producer.send_async(f"b{i}".encode(), lambda *_: None)
    producer.flush()
    received = [consumer.receive(timeout_millis=5000) for _ in range(5)]
    assert len({m.message_id().entry_id() for m in received}) == 1  # one batch entry
    consumer.acknowledge_cumulative(received[1])  # b0 and b1
    consumer.close()  # sends the grouped ack first; the clean stop then stores it
    client.close()
    batch_index_broker.stop()
    batch_index_broker.start()
    client = process_client(batch_index_broker.url)
    consumer = client.subscribe(TOPIC, "sub", batch_index_ack_enabled=True)
    assert drain(consumer, acknowledge=False) == [b"b2", b"b3", b"b4"]
    client.close()


def test_walk_cumulative_ack_inside_a_batch_then_clean_restart(tmp_path: Path) -> None:
    # The shrinker's minimal walk (seed 3): a batch of five on topic 2, a Failover
    # subscription from the earliest, a cumulative ack of one message of the batch, a clean
    # restart: the messages after the acknowledged one are never delivered again.
    config = WalkConfig(seed=3, topics=3, entries_per_ledger=4, dedup=True, batch_index_ack=True)
    steps: list[Step] = [
        ("burst_kill", 2, "batch", 5, 498048707),
        ("kill_subscribing", 2, "s1", "Failover", 2219),
        ("ack", 2, "s1", "cumulative", 453387452),
        ("restart", "clean"),
    ]
    _replay(config, steps, tmp_path)
