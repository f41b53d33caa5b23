"""Cluster mode's storage through real broker processes over a real nats-server: a broker
with ``metadataStoreUrl`` keeps its topics' entries, cursors and state in JetStream, so that
when it is killed (kill -9) another broker of the cluster takes its bundles over and serves
every receipted message and every subscription from where it was acknowledged, to the official
client given both brokers' URLs. Every broker sees every stored topic (listings), a deleted
topic is gone on all of them, and quorum settings JetStream cannot honour are refused."""

from __future__ import annotations

import contextlib
import http.client
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import admin_json
from broker_process import (
    BrokerProcess,
    close_after_kill,
    multi_host_url,
    owner_of,
    process_client,
    read_all,
    running,
)
from polling import wait_for

from starquake.broker.config import BrokerConfig, ConfigError
from starquake.broker.quorum import ledger_replicas
from starquake.cluster.nodes import JetStreamNode, jetstream_nodes

LEASE = 3
# one cluster per store: the tests of this module share one JetStream node (per worker)
CLUSTER = f"c{uuid.uuid4().hex[:6]}"


@contextlib.contextmanager
def _brokers(
    base: Path, node: JetStreamNode, *defines: str, count: int = 2
) -> Iterator[list[BrokerProcess]]:
    brokers = [
        BrokerProcess(
            base / f"b{i}",
            f"metadataStoreUrl={node.url}",
            f"clusterName={CLUSTER}",
            f"starquakeOwnershipLeaseSeconds={LEASE}",
            *defines,
            log_level="INFO",
        )
        for i in range(count)
    ]
    with running(brokers):
        # each broker sees the others before a test starts (bundles go to the brokers it knows;
        # a broker an earlier test of the module killed may be listed until its lease ends)
        ids = {f"127.0.0.1:{b.web_port}" for b in brokers}
        for broker in brokers:
            wait_for(
                lambda b=broker: ids <= set(_active_brokers(b)), "every broker sees the others"
            )
        yield brokers


def _active_brokers(broker: BrokerProcess) -> list[str]:
    status, body = admin_json(broker, "GET", f"/admin/v2/brokers/{CLUSTER}")
    assert status == 200, (status, body)
    return list(body)


def _names(broker: BrokerProcess) -> list[str]:
    status, body = admin_json(broker, "GET", "/admin/v2/persistent/public/default")
    assert status == 200, (status, body)
    return list(body)


def test_a_killed_brokers_topics_are_served_by_another_with_nothing_lost(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    topic = f"persistent://public/default/moves-{uuid.uuid4().hex[:6]}"
    with _brokers(tmp_path, jetstream_node) as brokers:
        client = process_client(multi_host_url(brokers), operation_timeout_seconds=30)
        try:
            consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
            producer = client.create_producer(topic, batching_enabled=False)
            sent = [f"m-{i}".encode() for i in range(200)]
            for payload in sent:
                producer.send(payload)
            for _ in range(50):
                consumer.acknowledge(consumer.receive(10_000))
            time.sleep(2.5)  # the broker stores acknowledgments every second
            owner = owner_of(brokers, topic)
            survivor = next(b for b in brokers if b is not owner)
            owner.kill()
        finally:
            close_after_kill(client)
        assert topic in _names(survivor)

        client = process_client(survivor.url, operation_timeout_seconds=30)
        try:
            # the dead owner's bundle lease expires, then the survivor takes the topic over
            consumer = client.subscribe(topic, "sub", consumer_type=pulsar.ConsumerType.Shared)
            got = []
            for _ in range(150):
                msg = consumer.receive(30_000)
                got.append(msg.data())
                consumer.acknowledge(msg)
            assert got == sent[50:]
            with pytest.raises(pulsar.Timeout):
                consumer.receive(1000)
            producer = client.create_producer(topic, batching_enabled=False)
            more = producer.send(b"after")
            assert consumer.receive(10_000).data() == b"after"
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            everything = []
            while reader.has_message_available():
                everything.append(reader.read_next(10_000).data())
            assert everything == [*sent, b"after"]
            assert more.ledger_id() > 0
            assert owner_of([survivor], topic) is survivor
        finally:
            client.close()


def _receipt(message_id: pulsar.MessageId) -> tuple[int, int]:
    return message_id.ledger_id(), message_id.entry_id()


def test_deduplication_and_termination_move_with_their_topics(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    deduplicated = f"persistent://public/default/dedup-{uuid.uuid4().hex[:6]}"
    with _brokers(tmp_path, jetstream_node, "brokerDeduplicationEnabled=true") as brokers:
        owner = owner_of(brokers, deduplicated)
        # a topic to terminate on the same broker (a quarter of the names share its bundle)
        terminated = next(
            name
            for name in (f"persistent://public/default/ended-{uuid.uuid4().hex}" for _ in range(64))
            if owner_of(brokers, name) is owner
        )
        client = process_client(multi_host_url(brokers), operation_timeout_seconds=30)
        try:
            writer = client.create_producer(
                deduplicated, producer_name="writer", batching_enabled=False
            )
            for i in range(20):
                writer.send(f"w{i}".encode(), sequence_id=i)
            client.create_producer(terminated).send(b"last")
        finally:
            client.close()
        path = "/admin/v2/" + terminated.replace("://", "/") + "/terminate"
        status, last = admin_json(owner, "POST", path)
        assert status == 200, (status, last)
        owner.kill()
        survivor = next(b for b in brokers if b.running)
        client = process_client(survivor.url, operation_timeout_seconds=30)
        try:
            writer = client.create_producer(
                deduplicated, producer_name="writer", batching_enabled=False
            )
            assert writer.last_sequence_id() == 19
            for i in (4, 19):  # a retry of a stored message is not stored again
                assert _receipt(writer.send(f"w{i}".encode(), sequence_id=i)) == (-1, -1)
            writer.send(b"w20", sequence_id=20)
            reader = client.create_reader(deduplicated, pulsar.MessageId.earliest)
            stored = []
            while reader.has_message_available():
                stored.append(reader.read_next(10_000).data())
            assert stored == [f"w{i}".encode() for i in range(21)]
            with pytest.raises(pulsar.TopicTerminated):
                client.create_producer(terminated).send(b"more")
        finally:
            client.close()


def _delete(url: str) -> int:
    """DELETE ``url``, following redirects (as Pulsar's admin client does) to a 204; how many
    redirects it took."""
    for hops in range(8):
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
        try:
            conn.request("DELETE", parts.path + (f"?{parts.query}" if parts.query else ""))
            response = conn.getresponse()
            body = response.read()
        finally:
            conn.close()
        if response.status != 307:
            assert response.status == 204, (response.status, body)
            return hops
        url = response.getheader("Location") or ""
    raise AssertionError(f"still redirected after 8 hops: {url}")


def test_a_partitioned_topic_spread_over_brokers_is_deleted_by_each_owner(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    topic = f"persistent://public/default/parts-{uuid.uuid4().hex[:6]}"
    partitions = [f"{topic}-partition-{i}" for i in range(8)]
    with _brokers(tmp_path, jetstream_node) as brokers:
        path = "/admin/v2/" + topic.replace("://", "/") + "/partitions"
        status, body = admin_json(brokers[0], "PUT", path, 8)
        assert status == 204, (status, body)
        client = process_client(multi_host_url(brokers), operation_timeout_seconds=30)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(32):
                producer.send(f"{i}".encode(), partition_key=f"k{i}")
        finally:
            client.close()
        owners = {owner_of(brokers, p).url for p in partitions}
        assert len(owners) == 2, "eight partitions in four bundles all on one broker"
        for broker in brokers:
            wait_for(lambda b=broker: set(partitions) <= set(_names(b)), "partitions listed")
        hops = _delete(brokers[0].web_service_url + path + "?force=true")
        assert 0 < hops <= 3
        for broker in brokers:
            wait_for(lambda b=broker: not set(partitions) & set(_names(b)), "none listed")
            status, body = admin_json(broker, "GET", path)
            assert status == 404 or body == {"partitions": 0}, (status, body)


def test_every_broker_lists_the_stored_topics_and_a_deleted_one_goes_everywhere(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    topics = [f"persistent://public/default/listed-{uuid.uuid4().hex[:6]}-{i}" for i in range(6)]
    with _brokers(tmp_path, jetstream_node) as brokers:
        client = process_client(multi_host_url(brokers), operation_timeout_seconds=30)
        try:
            for topic in topics:
                client.create_producer(topic).send(b"x")
        finally:
            client.close()
        for broker in brokers:
            wait_for(lambda b=broker: set(topics) <= set(_names(b)), "every topic listed")
        owners = {owner_of(brokers, t).url for t in topics}
        assert len(owners) == 2, "six topics in four bundles all on one broker"
        gone = topics[0]
        asked = next(b for b in brokers if b is not owner_of(brokers, gone))
        # the broker asked sends the request on to the topic's owner, which deletes it
        hops = _delete(asked.web_service_url + "/admin/v2/" + gone.replace("://", "/"))
        assert hops == 1
        for broker in brokers:
            wait_for(lambda b=broker: gone not in _names(b), "the deleted topic unlisted")
        client = process_client(multi_host_url(brokers), operation_timeout_seconds=30)
        try:
            reader = client.create_reader(gone, pulsar.MessageId.earliest)
            assert not reader.has_message_available()
        finally:
            client.close()


@pytest.mark.parametrize(
    ("ensemble", "write", "ack", "refusal"),
    [
        (1, 1, 1, None),
        (3, 3, 2, None),
        (3, 3, 1, None),
        (5, 5, 3, None),
        (2, 2, 2, "managedLedgerDefaultWriteQuorum: 2"),
        (3, 3, 3, "managedLedgerDefaultAckQuorum (3) is more than a majority"),
        (1, 3, 2, "managedLedgerDefaultEnsembleSize (1) must be at least"),
    ],
)
def test_quorum_settings_map_onto_jetstream_replicas_or_are_refused(
    ensemble: int, write: int, ack: int, refusal: str | None
) -> None:
    config = BrokerConfig(
        managedLedgerDefaultEnsembleSize=ensemble,
        managedLedgerDefaultWriteQuorum=write,
        managedLedgerDefaultAckQuorum=ack,
    )
    if refusal is None:
        assert ledger_replicas(config) == write
    else:
        with pytest.raises(ConfigError, match=refusal.replace("(", r"\(").replace(")", r"\)")):
            ledger_replicas(config)


def test_sends_wait_while_the_store_is_lost_and_go_on_when_it_returns(tmp_path: Path) -> None:
    """The only storage node stops under a producer: no receipt comes for what is not stored,
    the broker keeps serving, and once the node is back every send completes (the client
    resends what failed) and everything receipted is stored, in order."""
    (node,) = jetstream_nodes(1, tmp_path / "jetstream")
    node.start()
    topic = f"persistent://public/default/lost-{uuid.uuid4().hex[:6]}"
    try:
        with _brokers(tmp_path, node, count=1) as (broker,):
            client = process_client(broker.url, operation_timeout_seconds=120)
            try:
                producer = client.create_producer(
                    topic, batching_enabled=False, send_timeout_millis=120_000
                )
                before = [producer.send(f"m{i}".encode()) for i in range(10)]
                node.stop()
                done: dict[int, pulsar.Result] = {}

                def callback(i: int) -> Callable[[pulsar.Result, pulsar.MessageId], None]:
                    return lambda result, _: done.__setitem__(i, result)

                for i in range(10, 20):
                    producer.send_async(f"m{i}".encode(), callback(i))
                time.sleep(LEASE + 3)
                assert pulsar.Result.Ok not in done.values(), done
                assert broker.running
                node.start()
                wait_for(lambda: len(done) == 10, "the sends to complete", timeout=90)
                assert set(done.values()) == {pulsar.Result.Ok}, done
            finally:
                client.close()
            stored = [payload for payload, _ in read_all(broker.url, topic)]
            assert stored[:10] == [f"m{i}".encode() for i in range(10)]
            assert all(m in stored for m in (f"m{i}".encode() for i in range(20)))
            assert len(before) == 10
    finally:
        node.stop()


def test_a_broker_of_another_cluster_is_refused_by_the_store(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    """The store keeps one cluster's topics (managed ledgers are named by topic alone): a
    broker given another clusterName exits naming both, before it serves anything."""
    with _brokers(tmp_path, jetstream_node, count=1):
        stranger = BrokerProcess(
            tmp_path / "stranger",
            f"metadataStoreUrl={jetstream_node.url}",
            "clusterName=another-cluster",
        )
        try:
            with contextlib.suppress(RuntimeError):  # it may exit before or after it listens
                stranger.start(timeout=60)
            assert stranger.proc is not None and stranger.proc.wait(60) != 0
            assert (
                f"clusterName another-cluster: this store keeps the topics of cluster {CLUSTER}"
                in stranger.log()
            )
        finally:
            stranger.cleanup()


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name} not in the metrics")


def test_the_metrics_show_the_jetstream_appends(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    """In cluster mode each topic's group commit is one JetStream record: /metrics shows
    their latency, entries and bytes (the file backend's commit histograms stay empty)."""
    topic = f"persistent://public/default/metered-{uuid.uuid4().hex[:6]}"
    with _brokers(tmp_path, jetstream_node, count=1) as (broker,):
        client = process_client(broker.url, operation_timeout_seconds=30)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(20):
                producer.send(b"m%d" % i)
        finally:
            client.close()
        with urllib.request.urlopen(broker.web_service_url + "/metrics", timeout=30) as reply:
            text = reply.read().decode()
        records = _metric(text, "starquake_jetstream_record_entries_count")
        assert 1 <= records <= 20
        assert _metric(text, "starquake_jetstream_record_entries_sum") >= 20
        assert _metric(text, "starquake_jetstream_record_bytes_sum") >= 20 * 3
        assert _metric(text, "starquake_jetstream_append_latency_seconds_count") == records
        assert _metric(text, "starquake_jetstream_append_failures_total") == 0
        assert _metric(text, "starquake_storage_group_commit_entries_count") == 0
