"""Durability across a clean stop and across kill -9 of a real broker process."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from broker_process import BrokerProcess, close_after_kill, process_client, read_all
from polling import eventually
from stored_cursors import wait_acknowledgments_stored

TOPIC = "persistent://public/default/durable"


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data")
    yield proc
    proc.cleanup()


def _client(url: str) -> pulsar.Client:
    return process_client(url)


def _read_all(url: str) -> list[tuple[bytes, tuple[int, int]]]:
    return read_all(url, TOPIC)


def _send_until_killed(
    url: str, acked: list[tuple[bytes, tuple[int, int]]], stop: threading.Event
) -> None:
    client = _client(url)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False, send_timeout_millis=3000)
        i = 0
        while not stop.is_set():
            payload = f"msg-{i}".encode()
            try:
                mid = producer.send(payload)
            except pulsar.PulsarException:
                return
            acked.append((payload, (mid.ledger_id(), mid.entry_id())))
            i += 1
    finally:
        with contextlib.suppress(pulsar.PulsarException):
            client.close()


@pytest.mark.parametrize("round_", range(2))
def test_kill9_under_sync_sends_loses_nothing(broker_process: BrokerProcess, round_: int) -> None:
    broker_process.start()
    acked: list[tuple[bytes, tuple[int, int]]] = []
    stop = threading.Event()
    sender = threading.Thread(target=_send_until_killed, args=(broker_process.url, acked, stop))
    sender.start()
    eventually(lambda: len(acked) >= 200 + 150 * round_)
    broker_process.kill()
    stop.set()
    sender.join(30)
    assert len(acked) >= 200
    broker_process.start()
    stored = _read_all(broker_process.url)
    stored_ids = {mid: data for data, mid in stored}
    for payload, mid in acked:
        assert stored_ids.get(mid) == payload, f"acknowledged {payload!r} at {mid} was lost"
    ordered = [data for data, _ in stored]
    positions = [ordered.index(payload) for payload, _ in acked]
    assert positions == sorted(positions)


def test_clean_stop_keeps_messages_and_subscription(broker_process: BrokerProcess) -> None:
    broker_process.start()
    client = _client(broker_process.url)
    consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(20)]
    for _ in range(8):
        consumer.acknowledge(consumer.receive(timeout_millis=5000))
    consumer.close()  # sends the client's grouped acks before closing
    client.close()
    broker_process.stop()

    broker_process.start()
    stored = _read_all(broker_process.url)
    assert [(d, m) for d, m in stored] == [
        (f"m{i}".encode(), (mid.ledger_id(), mid.entry_id())) for i, mid in enumerate(ids)
    ]
    client = _client(broker_process.url)
    consumer = client.subscribe(TOPIC, "sub")
    assert consumer.receive(timeout_millis=5000).data() == b"m8"
    producer = client.create_producer(TOPIC, batching_enabled=False)
    new_id = producer.send(b"after-restart")
    assert new_id.ledger_id() > ids[-1].ledger_id()
    assert new_id.entry_id() == 0
    client.close()


def test_subscription_resumes_after_kill9(broker_process: BrokerProcess) -> None:
    broker_process.start()
    client = _client(broker_process.url)
    consumer = client.subscribe(TOPIC, "sub", initial_position=pulsar.InitialPosition.Earliest)
    producer = client.create_producer(TOPIC, batching_enabled=False)
    for i in range(30):
        producer.send(f"m{i}".encode())
    acked = []
    for _ in range(10):
        msg = consumer.receive(timeout_millis=5000)
        consumer.acknowledge(msg)
        acked.append((msg.message_id().ledger_id(), msg.message_id().entry_id()))
    wait_acknowledgments_stored(broker_process.data_dir, "sub", acked)
    broker_process.kill()
    close_after_kill(client)

    broker_process.start()
    client = _client(broker_process.url)
    consumer = client.subscribe(TOPIC, "sub")
    assert consumer.receive(timeout_millis=5000).data() == b"m10"
    client.close()


def test_dedup_survives_kill9(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", "brokerDeduplicationEnabled=true")
    broker.start()
    try:
        client = _client(broker.url)
        producer = client.create_producer(TOPIC, producer_name="writer", batching_enabled=False)
        for i in range(50):
            producer.send(f"m{i}".encode(), sequence_id=i)
        broker.kill()
        close_after_kill(client)
        broker.start()
        client = _client(broker.url)
        producer = client.create_producer(TOPIC, producer_name="writer", batching_enabled=False)
        assert producer.last_sequence_id() == 49
        for i in range(45, 55):  # a retry of the last five, then five new ones
            producer.send(f"m{i}".encode(), sequence_id=i)
        client.close()
        stored = [data for data, _ in _read_all(broker.url)]
        assert stored == [f"m{i}".encode() for i in range(55)]
    finally:
        if broker.proc is not None and broker.proc.poll() is None:
            broker.proc.kill()
            broker.proc.wait()
