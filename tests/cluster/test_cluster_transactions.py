"""Transactions in cluster mode: two broker processes over a real nats-server. The coordinator
runs on the owner of its partition of the assign topic; a transaction's messages on topics
served by either broker and its acknowledgments on a subscription of either are ended there
by END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION sent by the coordinator's broker."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from admin_http import admin_json
from broker_process import BrokerProcess, close_after_kill, multi_host_url, running
from txn_helpers import received

from starquake import client as pulsar
from starquake.cluster.nodes import JetStreamNode, jetstream_nodes

LEASE = 3
CLUSTER = f"c{uuid.uuid4().hex[:6]}"
ASSIGN_0 = "persistent://pulsar/system/transaction_coordinator_assign-partition-0"
EARLIEST = pulsar.InitialPosition.Earliest


@contextlib.contextmanager
def _brokers(
    base: Path, node: JetStreamNode, count: int = 2, cluster: str = CLUSTER, lease: float = LEASE
) -> Iterator[list[BrokerProcess]]:
    brokers = [
        BrokerProcess(
            base / f"b{i}",
            f"metadataStoreUrl={node.url}",
            f"clusterName={cluster}",
            f"starquakeOwnershipLeaseSeconds={lease}",
            "transactionCoordinatorEnabled=true",
            log_level="INFO",
        )
        for i in range(count)
    ]
    with running(brokers):
        yield brokers


def _owner_url(broker: BrokerProcess, topic: str) -> str:
    status, body = admin_json(broker, "GET", f"/lookup/v2/topic/{topic.replace('://', '/')}")
    assert status == 200, (status, body)
    return str(body["brokerUrl"])


def test_a_transaction_over_topics_of_two_brokers_commits_and_aborts_whole(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    with _brokers(tmp_path, jetstream_node) as brokers:
        url = multi_host_url(brokers)
        client = pulsar.Client(url, enable_transaction=True, operation_timeout_seconds=30)
        try:
            tag = uuid.uuid4().hex[:6]
            topics = [f"persistent://public/default/ctx-{tag}-{i}" for i in range(8)]
            consumers = [client.subscribe(t, "sub", initial_position=EARLIEST) for t in topics]
            producers = [client.create_producer(t) for t in topics]
            source = f"persistent://public/default/ctx-{tag}-source"
            feeder = client.create_producer(source)
            for i in range(2):
                feeder.send(f"in-{i}".encode())
            source_consumer = client.subscribe(source, "work", initial_position=EARLIEST)

            committed = client.new_transaction()
            owners = {_owner_url(brokers[0], t) for t in [*topics, source]}
            coordinator = _owner_url(brokers[0], ASSIGN_0)
            assert owners - {coordinator}, "every topic is on the coordinator's broker"
            first = source_consumer.receive(10_000)
            source_consumer.acknowledge(first, txn=committed)
            for i, producer in enumerate(producers):
                producer.send(f"c-{i}".encode(), txn=committed)
            assert [received(c, quiet_ms=300) for c in consumers] == [[] for _ in topics]
            committed.commit()
            assert [received(c, 1) for c in consumers] == [[f"c-{i}".encode()] for i in range(8)]

            aborted = client.new_transaction()
            second = source_consumer.receive(10_000)
            source_consumer.acknowledge(second, txn=aborted)
            for producer in producers:
                producer.send(b"aborted", txn=aborted)
            aborted.abort()
            for producer in producers:
                producer.send(b"plain")
            assert [received(c, 1) for c in consumers] == [[b"plain"] for _ in topics]
            # the aborted acknowledgment is released: the message comes again, the committed
            # one does not
            source_consumer.close()
            again = client.subscribe(source, "work", initial_position=EARLIEST)
            assert received(again, 1) == [b"in-1"]
        finally:
            client.close()


def _new_transaction(client: pulsar.Client, timeout_ms: int) -> pulsar.Transaction:
    """A new transaction, asking again while the coordinator moves (our client gives up a
    request at the first refusal; the coordinator is looked up again at the next)."""
    for _ in range(60):
        try:
            return client.new_transaction(timeout_ms)
        except pulsar.PulsarException:
            time.sleep(0.5)
    return client.new_transaction(timeout_ms)


def test_the_coordinator_moves_when_its_broker_is_killed_and_no_commit_is_lost(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    with _brokers(tmp_path, jetstream_node) as brokers:
        url = multi_host_url(brokers)
        tag = uuid.uuid4().hex[:6]
        topics = [f"persistent://public/default/ctk-{tag}-{i}" for i in range(6)]
        client = pulsar.Client(url, enable_transaction=True, operation_timeout_seconds=30)
        try:
            for topic in topics:
                client.subscribe(topic, "sub", initial_position=EARLIEST).close()
            producers = [client.create_producer(t) for t in topics]
            committed = client.new_transaction()
            for i, producer in enumerate(producers):
                producer.send(f"c-{i}".encode(), txn=committed)
            committed.commit()  # answered: never lost
            left_open = client.new_transaction(4000)
            for producer in producers:
                producer.send(b"open", txn=left_open)
            coordinator = _owner_url(brokers[0], ASSIGN_0)
            victim = next(b for b in brokers if b.url == coordinator)
            survivor = next(b for b in brokers if b is not victim)
            victim.kill()
        finally:
            close_after_kill(client)

        client = pulsar.Client(survivor.url, enable_transaction=True, operation_timeout_seconds=30)
        try:
            # the next transaction's lookup moves the coordinator here: it recovers its log,
            # and aborts the transaction left open when its timeout passes
            after = _new_transaction(client, 60_000)
            assert _owner_url(survivor, ASSIGN_0) == survivor.url
            consumers = [client.subscribe(t, "sub", initial_position=EARLIEST) for t in topics]
            for topic in topics:
                client.create_producer(topic).send(b"plain")
            assert [received(c, 2, timeout_ms=30_000) for c in consumers] == [
                [f"c-{i}".encode(), b"plain"] for i in range(6)
            ]
            after.abort()
        finally:
            client.close()


def test_a_commit_reaches_the_topics_of_a_participant_killed_before_it(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    with _brokers(tmp_path, jetstream_node) as brokers:
        url = multi_host_url(brokers)
        tag = uuid.uuid4().hex[:6]
        topics = [f"persistent://public/default/ctp-{tag}-{i}" for i in range(8)]
        client = pulsar.Client(url, enable_transaction=True, operation_timeout_seconds=30)
        for topic in topics:
            client.subscribe(topic, "sub", initial_position=EARLIEST).close()
        producers = [client.create_producer(t) for t in topics]
        txn = client.new_transaction()
        for i, producer in enumerate(producers):
            producer.send(f"c-{i}".encode(), txn=txn)
        coordinator = _owner_url(brokers[0], ASSIGN_0)
        survivor = next(b for b in brokers if b.url == coordinator)
        victim = next(b for b in brokers if b is not survivor)
        assert victim.url in {_owner_url(survivor, t) for t in topics}
        victim.kill()
        # the coordinator's broker sends the ends again until the killed broker's topics
        # are served again (here: their bundles are taken over by the survivor)
        txn.commit()
        close_after_kill(client)

        client = pulsar.Client(survivor.url, operation_timeout_seconds=30)
        try:
            consumers = [client.subscribe(t, "sub", initial_position=EARLIEST) for t in topics]
            assert [received(c, 1, timeout_ms=30_000) for c in consumers] == [
                [f"c-{i}".encode()] for i in range(8)
            ]
        finally:
            client.close()


def test_unloading_the_system_namespace_moves_the_coordinator_with_its_transactions(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    with _brokers(tmp_path, jetstream_node) as brokers:
        url = multi_host_url(brokers)
        topic = f"persistent://public/default/ctu-{uuid.uuid4().hex[:6]}"
        client = pulsar.Client(url, enable_transaction=True, operation_timeout_seconds=30)
        try:
            consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
            producer = client.create_producer(topic)
            left_open = client.new_transaction(3000)
            producer.send(b"open", txn=left_open)
            coordinator = _owner_url(brokers[0], ASSIGN_0)
            owner = next(b for b in brokers if b.url == coordinator)
            status, _ = admin_json(owner, "PUT", "/admin/v2/namespaces/pulsar/system/unload")
            assert status == 204
            assert "transaction coordinator 0 stopped" in owner.log()
            # the next transaction recovers the coordinator (on whichever broker owns its
            # partition now), which aborts the transaction left open at its timeout
            txn = _new_transaction(client, 60_000)
            producer.send(b"committed", txn=txn)
            txn.commit()
            producer.send(b"plain")
            assert received(consumer, 2, timeout_ms=30_000) == [b"committed", b"plain"]
        finally:
            client.close()


def _topic_served_by(broker: BrokerProcess, prefix: str) -> str:
    """A new topic whose bundle ``broker`` owns (looked up until one is)."""
    tag = uuid.uuid4().hex[:6]
    for i in range(32):
        topic = f"persistent://public/default/{prefix}-{tag}-{i}"
        if _owner_url(broker, topic) == broker.url:
            return topic
    raise AssertionError(f"no topic of 32 is served by {broker.url}")


def _kill_the_coordinators_broker(
    brokers: list[BrokerProcess],
) -> tuple[BrokerProcess, BrokerProcess]:
    coordinator = _owner_url(brokers[0], ASSIGN_0)
    victim = next(b for b in brokers if b.url == coordinator)
    return victim, next(b for b in brokers if b is not victim)


def _send_and_read_on(
    broker: BrokerProcess, topic: str, plain: bytes, subscriptions: list[str]
) -> list[list[bytes]]:
    """Through a client of ``broker`` alone: send ``plain`` to ``topic``, then the first two
    messages each of ``subscriptions`` gets (from the earliest)."""
    client = pulsar.Client(broker.url, operation_timeout_seconds=30)
    try:
        client.create_producer(topic).send(plain)
        return [
            received(client.subscribe(topic, name, initial_position=EARLIEST), 2, timeout_ms=30_000)
            for name in subscriptions
        ]
    finally:
        client.close()


def test_a_dead_coordinator_is_adopted_without_a_client_and_its_open_transaction_times_out(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    with _brokers(tmp_path, jetstream_node) as brokers:
        url = multi_host_url(brokers)
        client = pulsar.Client(url, enable_transaction=True, operation_timeout_seconds=30)
        try:
            left_open = client.new_transaction(3000)
            victim, survivor = _kill_the_coordinators_broker(brokers)
            topic = _topic_served_by(survivor, "cta")
            client.subscribe(topic, "sub", initial_position=EARLIEST).close()
            producer = client.create_producer(topic)
            producer.send(b"before")
            work = client.subscribe(topic, "work", initial_position=EARLIEST)
            work.acknowledge(work.receive(10_000), txn=left_open)
            producer.send(b"open", txn=left_open)
            victim.kill()
        finally:
            close_after_kill(client)

        # no transactional client comes back: the survivor takes the coordinator's partition
        # by itself, recovers it and aborts the transaction at its timeout, which lets the
        # readers past it and releases its acknowledgment
        assert _send_and_read_on(survivor, topic, b"after", ["sub", "work"]) == [
            [b"before", b"after"],
            [b"before", b"after"],
        ]
        log = survivor.log()
        assert "transaction coordinator 0 had no live broker" in log
        assert "timed out: aborting it" in log


def test_a_commit_answered_before_the_coordinators_broker_died_stays_committed_on_adoption(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    with _brokers(tmp_path, jetstream_node) as brokers:
        url = multi_host_url(brokers)
        client = pulsar.Client(url, enable_transaction=True, operation_timeout_seconds=30)
        try:
            committed = client.new_transaction(60_000)
            victim, survivor = _kill_the_coordinators_broker(brokers)
            topic = _topic_served_by(survivor, "ctc")
            client.subscribe(topic, "sub", initial_position=EARLIEST).close()
            producer = client.create_producer(topic)
            producer.send(b"committed", txn=committed)
            committed.commit()  # answered: never lost
            left_open = client.new_transaction(3000)
            producer.send(b"open", txn=left_open)
            victim.kill()
        finally:
            close_after_kill(client)

        assert _send_and_read_on(survivor, topic, b"plain", ["sub"]) == [[b"committed", b"plain"]]
        assert "transaction coordinator 0 ready" in survivor.log()


def test_taking_the_assign_partitions_bundle_starts_its_coordinator_without_a_client(
    tmp_path: Path,
) -> None:
    # a cluster of its own (one store per cluster) whose lease period is longer than the
    # test: no adoption round runs, the bundle is taken by the lookup alone
    (node,) = jetstream_nodes(1, tmp_path / "jetstream")
    node.start()
    try:
        cluster = f"c{uuid.uuid4().hex[:6]}"
        with _brokers(tmp_path, node, 1, cluster, lease=120) as (broker,):
            assert _owner_url(broker, ASSIGN_0) == broker.url
            deadline = time.monotonic() + 30
            while "transaction coordinator 0 ready" not in broker.log():
                assert time.monotonic() < deadline, "the coordinator was not started"
                time.sleep(0.1)
            assert "had no live broker" not in broker.log()
    finally:
        node.stop()
