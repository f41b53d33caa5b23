"""Transaction buffers and pending acks of a topic that moves (its owner killed with kill -9,
stopped cleanly, or its namespace unloaded), two broker processes over a real nats-server.

The buffer's snapshot is kept in the metadata store on JetStream: the new owner recovers from
it and reads only the entries stored after it (the broker's log line says how many, and from
which snapshot position), with the max read position where it was (the first entry of the
transaction still open). Aborted messages are never delivered, committed ones once. Acks made
in a transaction on the topic's subscription stay pending on the new owner: another
transaction's ack of the same message conflicts, a commit makes them hold, an abort delivers
the messages again."""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from admin_http import admin_json
from broker_process import BrokerProcess, close_after_kill, multi_host_url, owner_of, running
from txn_helpers import received

from starquake import client as pulsar
from starquake.cluster.nodes import JetStreamNode

CLUSTER = f"c{uuid.uuid4().hex[:6]}"
ASSIGN_0 = "persistent://pulsar/system/transaction_coordinator_assign-partition-0"
EARLIEST = pulsar.InitialPosition.Earliest
SHARED = pulsar.ConsumerType.Shared
STATS = "/admin/v3/transactions/transactionBufferStats/"
SNAPSHOT_EVERY = 5


@contextlib.contextmanager
def _brokers(base: Path, node: JetStreamNode) -> Iterator[list[BrokerProcess]]:
    brokers = [
        BrokerProcess(
            base / f"b{i}",
            f"metadataStoreUrl={node.url}",
            f"clusterName={CLUSTER}",
            "starquakeOwnershipLeaseSeconds=3",
            "transactionCoordinatorEnabled=true",
            # a snapshot at the first end after a load, then every 5 ends (never by time)
            f"transactionBufferSnapshotMaxTransactionCount={SNAPSHOT_EVERY}",
            "transactionBufferSnapshotMinTimeInMillis=3600000",
            log_level="INFO",
        )
        for i in range(2)
    ]
    with running(brokers):
        yield brokers


def _topic_off_the_coordinator(client: pulsar.Client, brokers: list[BrokerProcess]) -> str:
    """A new topic (created) whose owner is not the broker of coordinator 0, so that the
    coordinator stays up while the topic's owner goes."""
    client.new_transaction().abort()  # places the coordinator
    coordinator = owner_of(brokers, ASSIGN_0)
    tag = uuid.uuid4().hex[:6]
    for i in range(32):
        topic = f"persistent://public/default/tsnap-{tag}-{i}"
        client.create_producer(topic).close()
        if owner_of(brokers, topic) is not coordinator:
            return topic
    raise AssertionError("every topic went to the coordinator's broker")


def _stats(broker: BrokerProcess, topic: str) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while True:  # the topic may still be moving here
        status, body = admin_json(broker, "GET", STATS + topic.removeprefix("persistent://"))
        if status == 200 or time.monotonic() > deadline:
            assert status == 200, (status, body)
            return dict(body)
        time.sleep(0.2)


def _snapshot_after(broker: BrokerProcess, topic: str, after: int) -> int:
    """The time of the buffer's last snapshot, once it is later than ``after``."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        taken = int(str(_stats(broker, topic)["lastSnapshotTimestamps"]))
        if taken > after:
            return taken
        time.sleep(0.05)
    raise AssertionError("no new transaction buffer snapshot")


FAULTS = ["kill", "stop", "unload"]


def _move(brokers: list[BrokerProcess], owner: BrokerProcess, fault: str) -> list[BrokerProcess]:
    """Take ``topic`` from ``owner``: kill -9, a clean stop, or an unload of its namespace
    (its bundles are given up; the next lookup chooses an owner again, maybe the same). The
    brokers still running."""
    if fault == "kill":
        owner.kill()
    elif fault == "stop":
        owner.stop()
    else:
        status, body = admin_json(owner, "PUT", "/admin/v2/namespaces/public/default/unload")
        assert status == 204, (status, body)
    return [b for b in brokers if b.running]


@pytest.mark.parametrize("fault", FAULTS)
def test_the_new_owner_recovers_the_buffer_from_its_snapshot(
    tmp_path: Path, jetstream_node: JetStreamNode, fault: str
) -> None:
    with _brokers(tmp_path, jetstream_node) as brokers:
        client = pulsar.Client(
            multi_host_url(brokers), enable_transaction=True, operation_timeout_seconds=30
        )
        try:
            topic = _topic_off_the_coordinator(client, brokers)
            owner = owner_of(brokers, topic)
            producer = client.create_producer(topic, batching_enabled=False)
            visible: list[bytes] = []  # what a consumer gets before the open one ends
            later: list[bytes] = []  # and after

            def round_(i: int, commit: bool, into: list[bytes]) -> None:
                txn = client.new_transaction()
                payloads = [f"t{i}-a".encode(), f"t{i}-b".encode()]
                for payload in payloads:
                    producer.send(payload, txn=txn)
                if commit:
                    txn.commit()
                    into += payloads
                else:
                    txn.abort()

            for i in range(12):
                round_(i, i % 3 != 1, visible)
                producer.send(f"p{i}".encode())
                visible.append(f"p{i}".encode())
            left_open = client.new_transaction(120_000)
            held = producer.send(b"open", txn=left_open)
            producer.send(b"held")
            later.append(b"held")
            last = _snapshot_after(owner, topic, 0)
            for i in range(12, 12 + SNAPSHOT_EVERY):  # one of these ends takes a snapshot
                round_(i, i % 3 != 1, later)
            _snapshot_after(owner, topic, last)
            round_(17, False, later)  # after the snapshot: read again by the next owner
            round_(18, True, later)
            expected_max_read = f"{held.ledger_id()}:{held.entry_id()}"
            assert _stats(owner, topic)["maxReadPosition"] == expected_max_read
            alive = _move(brokers, owner, fault)

            reader = pulsar.Client(multi_host_url(alive), operation_timeout_seconds=30)
            try:
                consumer = reader.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
                assert received(consumer, len(visible), 30_000, quiet_ms=500) == visible
                new_owner = owner_of(alive, topic)
                stats = _stats(new_owner, topic)
                assert stats["maxReadPosition"] == expected_max_read
                assert stats["ongoingTxnSize"] == 1
                found = re.findall(
                    rf"transaction buffer of {topic} recovered \((\d+) entries read, "
                    r"1 transactions open, from the snapshot at (\d+:\d+)\)",
                    new_owner.log(),
                )
                # not the 71 entries of the topic: those of the rounds after the snapshot
                # (2 messages and a marker each; 13-18 at most); the transaction left open
                # comes from the snapshot
                assert found and int(found[-1][0]) <= 6 * 3, found
                ledger_id, entry_id = (int(n) for n in found[-1][1].split(":"))
                assert (ledger_id, entry_id) > (held.ledger_id(), held.entry_id()), found
                left_open.abort()  # its coordinator is on a broker still running
                assert received(consumer, len(later), 30_000, quiet_ms=500) == later
                assert _stats(new_owner, topic)["ongoingTxnSize"] == 0
            finally:
                reader.close()
        finally:
            close_after_kill(client)


@pytest.mark.parametrize("fault", FAULTS)
def test_pending_acks_move_with_their_topic(
    tmp_path: Path, jetstream_node: JetStreamNode, fault: str
) -> None:
    with _brokers(tmp_path, jetstream_node) as brokers:
        client = pulsar.Client(
            multi_host_url(brokers), enable_transaction=True, operation_timeout_seconds=30
        )
        try:
            topic = _topic_off_the_coordinator(client, brokers)
            owner = owner_of(brokers, topic)
            consumer = client.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(6):
                producer.send(f"m{i}".encode())
            messages = sorted((consumer.receive(10_000) for _ in range(6)), key=lambda m: m.data())
            committed, aborted = client.new_transaction(), client.new_transaction()
            for message in messages[:2]:
                consumer.acknowledge(message, txn=committed)
            for message in messages[2:4]:
                consumer.acknowledge(message, txn=aborted)
            ids = [m.message_id() for m in messages]
            consumer.close()  # the rest goes back to the subscription
            alive = _move(brokers, owner, fault)

            other = pulsar.Client(
                multi_host_url(alive), enable_transaction=True, operation_timeout_seconds=30
            )
            try:
                again = other.subscribe(topic, "sub", SHARED, initial_position=EARLIEST)
                # m4 and m5 were not acknowledged; m0-m3 are held by their transactions
                assert sorted(received(again, 2, 30_000, quiet_ms=500)) == [b"m4", b"m5"]
                assert "pending acks of " + topic in owner_of(alive, topic).log()
                rival = other.new_transaction()
                with pytest.raises(pulsar.TransactionConflict, match="in pending ack status"):
                    again.acknowledge(ids[0], txn=rival)
                rival.abort()
                committed.commit()
                aborted.abort()
                assert sorted(received(again, 2, 30_000, quiet_ms=500)) == [b"m2", b"m3"]
                again.close()
                assert received(other.subscribe(topic, "sub", SHARED), quiet_ms=500) == []
            finally:
                other.close()
        finally:
            close_after_kill(client)


def test_a_topic_deleted_and_made_again_never_meets_its_old_snapshot(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    with _brokers(tmp_path, jetstream_node) as brokers:
        client = pulsar.Client(
            multi_host_url(brokers), enable_transaction=True, operation_timeout_seconds=30
        )
        try:
            topic = f"persistent://public/default/tsnap-{uuid.uuid4().hex[:6]}"
            producer = client.create_producer(topic, batching_enabled=False)
            left_open = client.new_transaction(120_000)
            producer.send(b"open", txn=left_open)
            txn = client.new_transaction()
            producer.send(b"committed", txn=txn)
            txn.commit()  # the first end takes a snapshot, with the transaction still open
            owner = owner_of(brokers, topic)
            _snapshot_after(owner, topic, 0)
            producer.close()
            path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}"
            status, body = admin_json(owner, "DELETE", path + "?force=true")
            assert status == 204, (status, body)

            consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)  # made again
            client.create_producer(topic).send(b"fresh")
            assert received(consumer, 1, 10_000) == [b"fresh"]
            consumer.close()
            # loaded again with entries: an old snapshot would be taken up now (and its open
            # transaction would hold everything back)
            status, body = admin_json(owner_of(brokers, topic), "PUT", path + "/unload")
            assert status == 204, (status, body)
            consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
            client.create_producer(topic).send(b"again")
            assert received(consumer, 1, 10_000) == [b"again"]
            assert _stats(owner_of(brokers, topic), topic)["ongoingTxnSize"] == 0
            left_open.abort()
        finally:
            client.close()
