"""Transactions while a JetStream node is killed: three nodes, every stream and the metadata
bucket with three copies, two broker processes. One node is killed with kill -9 in the middle
of a run of transactions (each two messages, most committed, some aborted): what goes on while
its streams elect new leaders may fail, but every commit the client was answered is delivered,
whole; no message of a transaction whose abort was answered is; a transaction whose end failed
is delivered whole or not at all; and the brokers go on committing transactions after it."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import nats
from broker_process import BrokerProcess, close_after_kill, multi_host_url, running
from txn_helpers import received

from starquake import client as pulsar
from starquake.cluster.nodes import JetStreamNode

EARLIEST = pulsar.InitialPosition.Earliest
BEFORE_KILL = 6
AFTER_KILL = 6
"""Transactions committed before the kill, and the least committed after it."""


@contextlib.contextmanager
def _brokers(base: Path, nodes: list[JetStreamNode]) -> Iterator[list[BrokerProcess]]:
    store = "nats://" + ",".join(f"127.0.0.1:{n.client_port}" for n in nodes)
    cluster = f"c{uuid.uuid4().hex[:6]}"
    brokers = [
        BrokerProcess(
            base / f"b{i}",
            f"metadataStoreUrl={store}",
            f"clusterName={cluster}",
            # longer than an election: the owners keep their bundles through it
            "starquakeOwnershipLeaseSeconds=20",
            "managedLedgerDefaultEnsembleSize=3",
            "managedLedgerDefaultWriteQuorum=3",
            "managedLedgerDefaultAckQuorum=2",
            "transactionCoordinatorEnabled=true",
            log_level="INFO",
        )
        for i in range(2)
    ]
    with running(brokers):
        yield brokers


def _busiest_leader(nodes: list[JetStreamNode]) -> JetStreamNode:
    """The node that leads the most streams (ledger streams and metadata bucket)."""

    async def leaders() -> Counter[str]:
        nc = await nats.connect(servers=[n.url for n in nodes], connect_timeout=2)
        try:
            infos = await nc.jetstream(timeout=5).streams_info()
            return Counter(i.cluster.leader for i in infos if i.cluster and i.cluster.leader)
        finally:
            await nc.close()

    counts = asyncio.run(leaders())
    return max(nodes, key=lambda n: counts[n.name])


def test_answered_commits_survive_the_kill_of_a_jetstream_node(
    tmp_path: Path, jetstream_trio: list[JetStreamNode]
) -> None:
    with _brokers(tmp_path, jetstream_trio) as brokers:
        url = multi_host_url(brokers)
        client = pulsar.Client(url, enable_transaction=True, operation_timeout_seconds=30)
        try:
            topic = f"persistent://public/default/tnode-{uuid.uuid4().hex[:6]}"
            consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
            producer = client.create_producer(topic, batching_enabled=False)
            committed: list[bytes] = []  # answered
            aborted: list[bytes] = []  # answered
            unknown: list[tuple[bytes, bytes]] = []  # failed somewhere
            after_kill = 0
            deadline = time.monotonic() + 40
            for i in range(1000):
                if i == BEFORE_KILL:
                    _busiest_leader(jetstream_trio).kill()
                if after_kill >= AFTER_KILL or time.monotonic() > deadline:
                    break
                payloads = (f"t{i}-a".encode(), f"t{i}-b".encode())
                commit = i % 4 != 3
                txn: pulsar.Transaction | None = None
                try:
                    txn = client.new_transaction(60_000)
                    for payload in payloads:
                        producer.send(payload, txn=txn)
                    if commit:
                        txn.commit()
                        committed += payloads
                        after_kill += i >= BEFORE_KILL
                    else:
                        txn.abort()
                        aborted += payloads
                except pulsar.PulsarException:
                    unknown.append(payloads)
                    if txn is not None:
                        with contextlib.suppress(pulsar.PulsarException):
                            txn.abort()
                    time.sleep(0.2)
            assert after_kill >= AFTER_KILL, (after_kill, unknown)

            got = Counter(received(consumer, len(committed), 60_000, quiet_ms=1000))
            assert [p for p in committed if not got[p]] == []  # no answered commit lost
            assert [p for p in aborted if got[p]] == []
            for a, b in unknown:  # whole or not at all
                assert bool(got[a]) == bool(got[b]), (a, b, got)
            known = {*committed, *aborted, *(p for pair in unknown for p in pair)}
            assert set(got) <= known, set(got) - known
        finally:
            close_after_kill(client)
