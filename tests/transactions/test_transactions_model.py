"""A hypothesis model of what a consumer sees of one topic written with and without
transactions: entries in order, up to the first entry of the oldest open transaction, without
the aborted ones; once every transaction ended, every entry not aborted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from txn_helpers import new_topic, received

from starquake import client as pulsar
from starquake.broker.embedded import EmbeddedBroker

OPS = st.lists(
    st.one_of(
        st.just(("plain", 0)),
        st.just(("open", 0)),
        st.tuples(st.sampled_from(["send", "commit", "abort"]), st.integers(0, 3)),
    ),
    max_size=10,
)


@pytest.fixture(scope="module")
def model_client(txn_broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    client = pulsar.Client(txn_broker.service_url, enable_transaction=True)
    try:
        yield client
    finally:
        client.close()


def _visible(log: list[tuple[bytes, int | None]], status: dict[int, str]) -> list[bytes]:
    shown = []
    for payload, txn in log:
        if txn is not None and status[txn] == "open":
            break
        if txn is None or status[txn] == "committed":
            shown.append(payload)
    return shown


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS)
def test_consumers_see_what_the_model_says(
    model_client: pulsar.Client, ops: list[tuple[str, int]]
) -> None:
    topic = new_topic()
    consumer = model_client.subscribe(
        topic, "sub", initial_position=pulsar.InitialPosition.Earliest
    )
    producer = model_client.create_producer(topic)
    txns: list[pulsar.Transaction] = []
    status: dict[int, str] = {}
    log: list[tuple[bytes, int | None]] = []
    for n, (op, k) in enumerate(ops):
        if op == "open":
            txns.append(model_client.new_transaction())
            status[len(txns) - 1] = "open"
            continue
        if op == "plain":
            log.append((f"p{n}".encode(), None))
            producer.send(log[-1][0])
            continue
        if k >= len(txns) or status[k] != "open":
            continue
        if op == "send":
            log.append((f"t{k}-{n}".encode(), k))
            producer.send(log[-1][0], txn=txns[k])
        elif op == "commit":
            txns[k].commit()
            status[k] = "committed"
        else:
            txns[k].abort()
            status[k] = "aborted"
    seen = received(consumer, len(_visible(log, status)))
    assert seen == _visible(log, status)
    for k, txn in enumerate(txns):
        if status[k] == "open":
            txn.commit()
            status[k] = "committed"
    assert seen + received(consumer, len(_visible(log, status)) - len(seen)) == _visible(
        log, status
    )
    consumer.close()
    producer.close()
