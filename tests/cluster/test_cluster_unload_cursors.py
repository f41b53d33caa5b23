"""A namespace unload in a cluster gives the bundles up only once the cursors of the topics it
closed are stored: the next owner finds the acknowledgments made just before (the periodic
cursor store is set far off here, so only the unload can have stored them). Two broker
processes over a real nats-server."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from admin_http import admin_json
from broker_process import BrokerProcess, multi_host_url, running
from txn_helpers import received

from starquake import client as pulsar
from starquake.cluster.nodes import JetStreamNode

CLUSTER = f"c{uuid.uuid4().hex[:6]}"


def _backlog(broker: BrokerProcess, topic: str) -> int | None:
    path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/stats"
    status, body = admin_json(broker, "GET", path)
    return int(body["subscriptions"]["sub"]["msgBacklog"]) if status == 200 else None


def test_acks_made_just_before_a_namespace_unload_are_where_the_next_owner_looks(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    brokers = [
        BrokerProcess(
            tmp_path / f"b{i}",
            f"metadataStoreUrl={jetstream_node.url}",
            f"clusterName={CLUSTER}",
            "starquakeOwnershipLeaseSeconds=3",
            "managedLedgerCursorPositionFlushSeconds=600",
        )
        for i in range(2)
    ]
    with running(brokers):
        url = multi_host_url(brokers)
        client = pulsar.Client(url, operation_timeout_seconds=30)
        try:
            topic = f"persistent://public/default/unl-{uuid.uuid4().hex[:6]}"
            consumer = client.subscribe(topic, "sub", pulsar.ConsumerType.Shared)
            producer = client.create_producer(topic, batching_enabled=False)
            for i in range(10):
                producer.send(f"m{i}".encode())
            for _ in range(10):
                consumer.acknowledge(consumer.receive(10_000))
            status, body = admin_json(
                brokers[0], "GET", f"/lookup/v2/topic/{topic.replace('://', '/')}"
            )
            assert status == 200, (status, body)
            owner = next(b for b in brokers if b.url == body["brokerUrl"])
            deadline = time.monotonic() + 10
            while _backlog(owner, topic) != 0:  # the acks reached the owner
                assert time.monotonic() < deadline, _backlog(owner, topic)
                time.sleep(0.05)
            consumer.close()
            status, body = admin_json(owner, "PUT", "/admin/v2/namespaces/public/default/unload")
            assert status == 204, (status, body)

            again = client.subscribe(topic, "sub", pulsar.ConsumerType.Shared)
            assert received(again, quiet_ms=1000) == []  # nothing acknowledged comes again
        finally:
            client.close()
