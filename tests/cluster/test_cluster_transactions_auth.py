"""Transactions in a cluster with token authentication and authorization on: the coordinator's
broker ends a transaction on the topics another broker serves over the binary protocol, with
the credentials of ``brokerClientAuthenticationPlugin``/``brokerClientAuthenticationParameters``;
the other broker accepts END_TXN_ON_PARTITION / END_TXN_ON_SUBSCRIPTION from super users only.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_support import data_url, hs256, secret_key
from broker_process import BrokerProcess, multi_host_url, running
from txn_helpers import received

from starquake import client as pulsar
from starquake.cluster.nodes import JetStreamNode

CLUSTER = f"a{uuid.uuid4().hex[:6]}"
ASSIGN_0 = "persistent://pulsar/system/transaction_coordinator_assign-partition-0"
EARLIEST = pulsar.InitialPosition.Earliest
KEY = secret_key()
ADMIN = hs256(KEY, "admin")
TOKEN_PLUGIN = "org.apache.pulsar.client.impl.auth.AuthenticationToken"


@contextlib.contextmanager
def _brokers(base: Path, node: JetStreamNode, broker_role: str) -> Iterator[list[BrokerProcess]]:
    """Two brokers whose own client presents a token of ``broker_role``."""
    brokers = [
        BrokerProcess(
            base / f"b{i}",
            f"metadataStoreUrl={node.url}",
            f"clusterName={CLUSTER}",
            "starquakeOwnershipLeaseSeconds=3",
            "transactionCoordinatorEnabled=true",
            "authenticationEnabled=true",
            "authenticationProviders=token",
            f"tokenSecretKey={data_url(KEY)}",
            "authorizationEnabled=true",
            "superUserRoles=admin,broker",
            f"brokerClientAuthenticationPlugin={TOKEN_PLUGIN}",
            f"brokerClientAuthenticationParameters=token:{hs256(KEY, broker_role)}",
            log_level="INFO",
        )
        for i in range(2)
    ]
    with running(brokers):
        yield brokers


def _owner_url(broker: BrokerProcess, topic: str) -> str:
    request = urllib.request.Request(
        f"{broker.web_service_url}/lookup/v2/topic/{topic.replace('://', '/')}",
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        return str(json.loads(resp.read())["brokerUrl"])


def _client(brokers: list[BrokerProcess]) -> pulsar.Client:
    url = multi_host_url(brokers)
    return pulsar.Client(
        url,
        authentication=pulsar.AuthenticationToken(ADMIN),
        enable_transaction=True,
        operation_timeout_seconds=30,
    )


def _split_topics(
    brokers: list[BrokerProcess], prefix: str
) -> tuple[BrokerProcess, list[str], list[str]]:
    """(the coordinator's broker, topics it serves, topics the other broker serves): fresh
    topics until both lists have some."""
    coordinator_url = _owner_url(brokers[0], ASSIGN_0)
    coordinator = next(b for b in brokers if b.url == coordinator_url)
    local: list[str] = []
    remote: list[str] = []
    for i in range(64):
        topic = f"persistent://public/default/{prefix}-{i}"
        (local if _owner_url(brokers[0], topic) == coordinator_url else remote).append(topic)
        if len(local) >= 2 and len(remote) >= 2:
            break
    assert local and remote, "every topic is on one broker"
    return coordinator, local, remote


def test_the_coordinator_ends_a_transaction_on_another_brokers_topics_as_a_super_user(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    with _brokers(tmp_path, jetstream_node, "broker") as brokers:
        client = _client(brokers)
        try:
            client.new_transaction().abort()  # places the coordinator
            _, local, remote = _split_topics(brokers, f"cta-{uuid.uuid4().hex[:6]}")
            topics = [*local, *remote]
            consumers = [client.subscribe(t, "sub", initial_position=EARLIEST) for t in topics]
            producers = [client.create_producer(t) for t in topics]
            for producer in producers:
                producer.send(b"in")

            committed = client.new_transaction()
            for consumer in consumers:
                consumer.acknowledge(consumer.receive(10_000), txn=committed)
            for i, producer in enumerate(producers):
                producer.send(f"c-{i}".encode(), txn=committed)
            committed.commit()
            assert [received(c, 1) for c in consumers] == [
                [f"c-{i}".encode()] for i in range(len(topics))
            ]

            for producer in producers:
                producer.send(b"again")
            aborted = client.new_transaction()
            for consumer in consumers:
                consumer.acknowledge(consumer.receive(10_000), txn=aborted)
            for producer in producers:
                producer.send(b"aborted", txn=aborted)
            aborted.abort()
            for producer in producers:
                producer.send(b"plain")
            for consumer in consumers:
                consumer.close()
            # the aborted acknowledgments are released, the aborted messages never delivered
            again = [client.subscribe(t, "sub", initial_position=EARLIEST) for t in topics]
            assert [received(c, 2) for c in again] == [[b"again", b"plain"] for _ in topics]
        finally:
            client.close()


def test_a_broker_client_that_is_not_a_super_user_is_refused_the_end(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    with _brokers(tmp_path, jetstream_node, "intruder") as brokers:
        client = _client(brokers)
        try:
            client.new_transaction().abort()  # places the coordinator (no partition to end)
            coordinator, _, remote = _split_topics(brokers, f"ctr-{uuid.uuid4().hex[:6]}")
            consumers = [client.subscribe(t, "sub", initial_position=EARLIEST) for t in remote]
            producers = [client.create_producer(t) for t in remote]
            txn = client.new_transaction()
            for producer in producers:
                producer.send(b"committed?", txn=txn)
            with pytest.raises(pulsar.PulsarException):
                txn.commit()
            for producer in producers:
                producer.send(b"plain")
            # the refused commit is not retried: the transaction's messages, and those sent
            # after them, stay held back
            assert [received(c, quiet_ms=1000) for c in consumers] == [[] for _ in remote]
            log = coordinator.log()
            assert "TC client (intruder) is not a super user" in log
            assert "not retried" in log
        finally:
            client.close()
