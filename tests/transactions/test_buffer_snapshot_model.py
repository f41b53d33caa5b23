"""A hypothesis model of a topic whose transaction buffer is rebuilt from snapshots: with a
snapshot at (nearly) every end, the topic is unloaded at random points among messages sent in
and out of transactions, commits and aborts, so that each load recovers from whichever
snapshot was last taken and reads the entries after it. A new subscription from the earliest
message then sees what the model says: in order, up to the first message of the oldest open
transaction, without the aborted ones; and all but the aborted ones once every transaction
ended (and the topic loaded again)."""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from txn_helpers import new_topic, received

from starquake import client as pulsar
from starquake.broker.embedded import EmbeddedBroker

EARLIEST = pulsar.InitialPosition.Earliest
OPS = st.lists(
    st.one_of(
        st.just(("plain", 0)),
        st.just(("open", 0)),
        st.just(("unload", 0)),
        st.tuples(st.sampled_from(["send", "commit", "abort"]), st.integers(0, 3)),
    ),
    max_size=14,
)


@pytest.fixture(scope="module")
def snapshot_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data = Path(tmp_path_factory.mktemp("snap")) / "data"
    with EmbeddedBroker(
        data,
        transactionCoordinatorEnabled=True,
        transactionBufferSnapshotMaxTransactionCount=1,
        transactionBufferSnapshotMinTimeInMillis=3_600_000,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def snapshot_client(snapshot_broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    client = pulsar.Client(
        snapshot_broker.service_url, enable_transaction=True, operation_timeout_seconds=10
    )
    try:
        yield client
    finally:
        client.close()


def _unload(broker: EmbeddedBroker, topic: str) -> None:
    path = f"/admin/v2/persistent/{topic.removeprefix('persistent://')}/unload"
    request = urllib.request.Request(broker.web_service_url + path, method="PUT")
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 204


def _visible(log: list[tuple[bytes, int | None]], status: dict[int, str]) -> list[bytes]:
    shown = []
    for payload, txn in log:
        if txn is not None and status[txn] == "open":
            break
        if txn is None or status[txn] == "committed":
            shown.append(payload)
    return shown


def _from_earliest(client: pulsar.Client, topic: str, expected: int) -> list[bytes]:
    consumer = client.subscribe(topic, uuid.uuid4().hex[:8], initial_position=EARLIEST)
    try:
        return received(consumer, expected)
    finally:
        consumer.close()


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_loads_from_snapshots_show_what_the_model_says(
    snapshot_broker: EmbeddedBroker, snapshot_client: pulsar.Client, ops: list[tuple[str, int]]
) -> None:
    client = snapshot_client
    topic = new_topic()
    producer = client.create_producer(topic, batching_enabled=False)
    txns: list[pulsar.Transaction] = []
    status: dict[int, str] = {}
    log: list[tuple[bytes, int | None]] = []
    for n, (op, k) in enumerate(ops):
        if op == "open":
            txns.append(client.new_transaction())
            status[len(txns) - 1] = "open"
        elif op == "plain":
            log.append((f"p{n}".encode(), None))
            producer.send(log[-1][0])
        elif op == "unload":
            _unload(snapshot_broker, topic)
        elif k < len(txns) and status[k] == "open":
            if op == "send":
                log.append((f"t{k}-{n}".encode(), k))
                producer.send(log[-1][0], txn=txns[k])
            elif op == "commit":
                txns[k].commit()
                status[k] = "committed"
            else:
                txns[k].abort()
                status[k] = "aborted"
    expected = _visible(log, status)
    assert _from_earliest(client, topic, len(expected)) == expected
    for k, txn in enumerate(txns):
        if status[k] == "open":
            txn.commit()
            status[k] = "committed"
    _unload(snapshot_broker, topic)
    expected = _visible(log, status)
    assert _from_earliest(client, topic, len(expected)) == expected
    producer.close()
