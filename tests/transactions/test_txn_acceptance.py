"""One transaction across three topics and two subscriptions, through our client against a
broker process: nothing of it visible or acknowledged before the commit, all of it after;
after an abort none of it, and the acknowledged messages come again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker_process import BrokerProcess
from txn_helpers import new_topic, received

from starquake import client as pulsar

EARLIEST = pulsar.InitialPosition.Earliest
SHARED = pulsar.ConsumerType.Shared


@pytest.fixture(scope="module")
def txn_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(
        Path(tmp_path_factory.mktemp("txn-acceptance")) / "data",
        "transactionCoordinatorEnabled=true",
    )
    proc.start()
    yield proc
    proc.cleanup()


def _scenario(proc: BrokerProcess, commit: bool) -> None:
    client = pulsar.Client(proc.url, enable_transaction=True, operation_timeout_seconds=10)
    try:
        outs = [new_topic() for _ in range(3)]
        ins = [new_topic() for _ in range(2)]
        readers = [client.subscribe(t, "check", initial_position=EARLIEST) for t in outs]
        consumers = [client.subscribe(t, "work", SHARED, initial_position=EARLIEST) for t in ins]
        for i, topic in enumerate(ins):
            client.create_producer(topic, batching_enabled=False).send(f"in-{i}".encode())
        taken = [c.receive(5000) for c in consumers]
        txn = client.new_transaction()
        for i, topic in enumerate(outs):
            client.create_producer(topic).send(f"out-{i}".encode(), txn=txn)
        for consumer, msg in zip(consumers, taken, strict=True):
            consumer.acknowledge(msg, txn=txn)
        # before the end: no output visible; the inputs are neither acknowledged nor given
        # to another consumer of the subscription
        assert [received(r) for r in readers] == [[], [], []]
        others = [client.subscribe(t, "work", SHARED) for t in ins]
        assert [received(o) for o in others] == [[], []]
        if commit:
            txn.commit()
            assert [received(r, 1) for r in readers] == [[b"out-0"], [b"out-1"], [b"out-2"]]
            for consumer in consumers:
                consumer.close()
            assert [received(o) for o in others] == [[], []]  # acknowledged for good
        else:
            txn.abort()
            assert [received(r) for r in readers] == [[], [], []]
            for consumer in consumers:
                consumer.close()  # its unacknowledged messages go to the other consumer
            assert [received(o, 1) for o in others] == [[b"in-0"], [b"in-1"]]
    finally:
        client.close()


def test_a_committed_transaction_shows_all_of_it_at_once(txn_process: BrokerProcess) -> None:
    _scenario(txn_process, commit=True)


def test_an_aborted_transaction_shows_none_of_it(txn_process: BrokerProcess) -> None:
    _scenario(txn_process, commit=False)
