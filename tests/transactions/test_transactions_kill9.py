"""Transactions across kill -9 of a real broker process: the coordinator's log and the topics'
buffers are rebuilt from what is stored."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_http import admin_json
from broker_process import BrokerProcess
from txn_helpers import new_topic, received

from starquake import client as pulsar

EARLIEST = pulsar.InitialPosition.Earliest
SHARED = pulsar.ConsumerType.Shared


@pytest.fixture
def txn_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path / "data", "transactionCoordinatorEnabled=true")
    proc.start()
    yield proc
    proc.cleanup()


def _client(proc: BrokerProcess) -> pulsar.Client:
    return pulsar.Client(proc.url, enable_transaction=True, operation_timeout_seconds=10)


def test_kill9_keeps_committed_and_ends_open_transactions_whole(txn_process: BrokerProcess) -> None:
    topics = [new_topic(), new_topic()]
    client = _client(txn_process)
    producers = [client.create_producer(t) for t in topics]
    committed = client.new_transaction()
    for i, producer in enumerate(producers):
        producer.send(f"committed-{i}".encode(), txn=committed)
    open_ = client.new_transaction(timeout_ms=3000)
    for i, producer in enumerate(producers):
        producer.send(f"open-{i}".encode(), txn=open_)
    committed.commit()  # answered: must survive the crash
    txn_process.kill()
    client.close()

    txn_process.start()
    client = _client(txn_process)
    try:
        consumers = [client.subscribe(t, "sub", initial_position=EARLIEST) for t in topics]
        assert [received(c, 1) for c in consumers] == [[b"committed-0"], [b"committed-1"]]
        # The open transaction is aborted at its timeout: none of it, ever; what comes after
        # it is delivered once it ended.
        for i, producer in enumerate(client.create_producer(t) for t in topics):
            producer.send(f"after-{i}".encode())
        assert [received(c, 1, 10_000) for c in consumers] == [[b"after-0"], [b"after-1"]]
        later = client.new_transaction()
        assert later.txn_id[1] > max(committed.txn_id[1], open_.txn_id[1])
    finally:
        client.close()


def test_kill9_keeps_committed_acks_and_brings_open_ones_back_pending(
    txn_process: BrokerProcess,
) -> None:
    topic = new_topic()
    client = _client(txn_process)
    consumer = client.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(5):
        producer.send(f"in-{i}".encode())
    messages = [consumer.receive(5000) for _ in range(5)]
    committed = client.new_transaction()
    consumer.acknowledge(messages[0], txn=committed)
    consumer.acknowledge(messages[1], txn=committed)
    committed.commit()  # answered: its acks must survive the crash
    open_ = client.new_transaction(timeout_ms=2500)
    opened = time.monotonic()
    consumer.acknowledge(messages[2], txn=open_)  # held, durable: back after the restart
    consumer.acknowledge(messages[3], txn=open_)
    txn_process.kill()
    client.close()

    txn_process.start()
    client = _client(txn_process)
    try:
        consumer = client.subscribe(topic, "sub", SHARED)
        first = consumer.receive(10_000)
        consumer.acknowledge(first)
        if time.monotonic() - opened < 2.2:  # the open transaction has not timed out yet
            assert first.data() == b"in-4"  # in-2 and in-3 are still pending
        # aborted at its timeout: released, delivered again; the committed ones never
        rest = received(consumer, 2, 10_000)
        assert sorted([first.data(), *rest]) == [b"in-2", b"in-3", b"in-4"]
    finally:
        client.close()


def _replayed(log: str) -> list[int]:
    """The record counts of the coordinator's "ready" lines, in order."""
    found = re.findall(r"transaction coordinator 0 ready \((\d+) log records replayed", log)
    return [int(n) for n in found]


def _replayed_at_start(proc: BrokerProcess, starts: int) -> int:
    """The record count of the ``starts``-th start's "ready" line. The broker listens before
    its coordinator is loaded, so the line may come a moment after ``start`` returned."""
    deadline = time.monotonic() + 30
    while len(found := _replayed(proc.log())) < starts:
        assert time.monotonic() < deadline, proc.log()
        time.sleep(0.05)
    return found[starts - 1]


def test_kill9_replays_only_the_log_records_of_ongoing_transactions(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data", "transactionCoordinatorEnabled=true", log_level="INFO")
    proc.start()
    try:
        topic = new_topic()
        client = _client(proc)
        producer = client.create_producer(topic)
        ended = []
        for i in range(20):  # 4 records each (new, partition, committing, committed)
            txn = client.new_transaction()
            producer.send(f"c{i}".encode(), txn=txn)
            txn.commit()
            ended.append(txn)
        open_ = client.new_transaction(timeout_ms=3000)
        producer.send(b"open", txn=open_)
        last = client.new_transaction()
        producer.send(b"last", txn=last)
        last.commit()
        proc.kill()
        client.close()

        proc.start()
        replayed = _replayed_at_start(proc, 2)
        assert replayed <= 8, replayed  # from the open transaction's first record on: not 88
        client = _client(proc)
        consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
        expected = [f"c{i}".encode() for i in range(20)] + [b"last"]
        assert received(consumer, 21, 10_000) == expected  # "open" is aborted at its timeout
        later = client.new_transaction()
        assert later.txn_id[1] > last.txn_id[1]
        later.commit()
        client.close()
        # The cursor is stored just after an end is answered (and every flush interval): a
        # kill at once may come first and leave a few more records to replay. A clean stop
        # stores it: nothing ongoing, only the last record is replayed.
        proc.stop()
        proc.start()
        assert _replayed_at_start(proc, 3) <= 1
        client = _client(proc)
        assert client.new_transaction().txn_id[1] > later.txn_id[1]
        client.close()
    finally:
        proc.cleanup()


def test_kill9_replays_only_the_pending_acks_of_ongoing_transactions(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data", "transactionCoordinatorEnabled=true", log_level="INFO")
    proc.start()
    try:
        topic = new_topic()
        client = _client(proc)
        consumer = client.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(21):
            producer.send(f"in-{i}".encode())
        messages = [consumer.receive(5000) for _ in range(21)]
        for message in messages[:20]:  # 3 records each (ack, end, applied)
            txn = client.new_transaction()
            consumer.acknowledge(message, txn=txn)
            txn.commit()
        open_ = client.new_transaction(timeout_ms=2500)
        consumer.acknowledge(messages[20], txn=open_)
        proc.kill()
        client.close()
        before = len(_pending_acks_recovered(proc))

        proc.start()
        client = _client(proc)
        consumer = client.subscribe(topic, "sub", SHARED)
        # the open transaction's ack is pending again, then released at its timeout
        assert received(consumer, 1, 10_000) == [b"in-20"]
        deadline = time.monotonic() + 10
        while len(found := _pending_acks_recovered(proc)) <= before:  # this start's line
            assert time.monotonic() < deadline, proc.log()
            time.sleep(0.05)
        assert found[before] <= 8, found  # not the 61 records of the log
        client.close()
    finally:
        proc.cleanup()


def _pending_acks_recovered(proc: BrokerProcess) -> list[int]:
    """The record counts of the "pending acks ... recovered" lines, in order."""
    found = re.findall(r"pending acks of \S+ recovered \((\d+) records read", proc.log())
    return [int(n) for n in found]


def test_kill9_after_a_buffer_snapshot_reads_only_the_entries_after_it(tmp_path: Path) -> None:
    proc = BrokerProcess(tmp_path / "data", "transactionCoordinatorEnabled=true", log_level="INFO")
    proc.start()
    try:
        topic = new_topic()
        client = _client(proc)
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"p{i}".encode())
        aborted = client.new_transaction()
        producer.send(b"aborted", txn=aborted)
        aborted.abort()  # the first end after the load takes a snapshot
        committed = client.new_transaction()
        producer.send(b"committed", txn=committed)
        _wait_for_snapshot(proc, topic)
        open_ = client.new_transaction(timeout_ms=2500)
        producer.send(b"open", txn=open_)
        committed.commit()
        proc.kill()
        client.close()

        proc.start()
        client = _client(proc)
        consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
        client.create_producer(topic).send(b"after")
        expected = [f"p{i}".encode() for i in range(30)] + [b"committed", b"after"]
        assert received(consumer, 32, 10_000) == expected
        found = re.findall(r"transaction buffer of \S+ recovered \((\d+) entries read", proc.log())
        assert found and int(found[-1]) <= 4, found  # not the 34 entries of the topic
        client.close()
    finally:
        proc.cleanup()


def _wait_for_snapshot(proc: BrokerProcess, topic: str) -> None:
    path = f"/admin/v3/transactions/transactionBufferStats/{topic.removeprefix('persistent://')}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status, body = admin_json(proc, "GET", path)
        if status == 200 and body["lastSnapshotTimestamps"] > 0:
            return
        time.sleep(0.05)
    raise AssertionError("no transaction buffer snapshot taken")
