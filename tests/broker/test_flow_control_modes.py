"""How a dispatcher counts a consumer's permits against batched entries
(``preciseDispatcherFlowControl``), as Pulsar's dispatchers do.

Off (Pulsar's default), an Exclusive or Failover dispatcher reads as many entries as the
consumer has permits (at most ``dispatcherMaxReadBatchSize``) and sends every entry it read:
the permits go below zero by the messages beyond them, and nothing more is sent until FLOWs
bring them above zero. On, it reads the entries the permits take at the messages per entry seen
so far and stops at the entry that uses the last permit. Shared consumers get what their permits
take either way: at least one entry per round, then entries while permits are left.

The backlog is 12 batches of 10 messages each; a consumer speaks the protocol by hand, so each
FLOW's effect is seen entry by entry.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from polling import wait_for
from raw_connection import RawConnection, T
from suspending_reads import SuspendingReads
from txn_raw import connected

from starquake.broker.embedded import EmbeddedBroker
from starquake.client import Client
from starquake.protocol import client_commands
from starquake.protocol.enums import SubType

BATCHES = 12
PER_BATCH = 10


def _produce_batches(broker: EmbeddedBroker, topic: str) -> None:
    client = Client(broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(
            topic,
            batching_enabled=True,
            batching_max_messages=PER_BATCH,
            batching_max_publish_delay_ms=60_000,
        )
        for batch in range(BATCHES):
            for i in range(PER_BATCH):
                producer.send_async(f"{batch}-{i}".encode(), None)
            producer.flush()
        producer.close()
    finally:
        client.close()


def _entries_after_flow(cnx: RawConnection, permits: int) -> int:
    """Grant ``permits``; the number of entries (MESSAGE frames) the broker sends for them.

    Reads of file ledgers do not wait: the dispatch pass a FLOW starts runs to its end in one
    turn of the broker's loop, so everything it sends comes before the connection settles."""
    cnx.send_command(client_commands.flow(1, permits))
    return sum(frame.type == T.MESSAGE for frame in cnx.settled())


# (subscription type, precise) -> entries sent for FLOW 5, then FLOW 41, then FLOW 5
CASES = {
    # off: a permit stands for an entry: 5 entries (50 messages, permits -45); 41 more
    # leave them at -4: nothing; 5 more make 1: one entry
    (SubType.Exclusive, False): [5, 0, 1],
    (SubType.Failover, False): [5, 0, 1],
    # on: nothing read yet, one entry (permits -5); 41 more make 36: four entries at 10
    # messages each (the fourth uses the last permits: -4); 5 more make 1: one entry
    (SubType.Exclusive, True): [1, 4, 1],
    (SubType.Failover, True): [1, 4, 1],
    (SubType.Shared, False): [1, 4, 1],
    (SubType.Shared, True): [1, 4, 1],
}


@pytest.mark.parametrize(
    ("sub_type", "precise"),
    list(CASES),
    ids=[f"{t.name}-{'precise' if p else 'default'}" for t, p in CASES],
)
def test_entries_sent_per_flow(
    tmp_path: Path, topic: str, sub_type: SubType, precise: bool
) -> None:
    # (no wait after Failover's change of active consumer: this test counts entries per FLOW)
    with EmbeddedBroker(
        tmp_path / "data",
        preciseDispatcherFlowControl=precise,
        activeConsumerFailoverDelayTimeMillis=0,
    ) as broker:
        _produce_batches(broker, topic)
        with connected(broker.broker_port) as cnx:
            cnx.subscribe(topic, "sub", sub_type, 1)
            sent = [_entries_after_flow(cnx, permits) for permits in (5, 41, 5)]
    assert sent == CASES[(sub_type, precise)]


def test_the_default_is_pulsars() -> None:
    from starquake.broker.config import BrokerConfig

    assert BrokerConfig().preciseDispatcherFlowControl is False


@pytest.fixture
def gated_broker(tmp_path: Path) -> Iterator[tuple[EmbeddedBroker, SuspendingReads]]:
    reads = SuspendingReads()
    with EmbeddedBroker(tmp_path / "data") as broker:
        reads.install_on_broker(broker.service.storage)
        yield broker, reads


def test_a_read_finished_after_the_connection_filled_up_sends_nothing_until_it_drains(
    gated_broker: tuple[EmbeddedBroker, SuspendingReads], topic: str
) -> None:
    # While a read waits, the consumer's connection fills up (the transport pauses writing
    # and the broker holds the consumer's permits): what the read brings is put back, and
    # sent once the connection drains.
    broker, reads = gated_broker
    _produce_batches(broker, topic)

    async def close_gate() -> None:
        reads.gate = asyncio.Event()

    broker.call(close_gate())
    with connected(broker.broker_port) as cnx:
        cnx.subscribe(topic, "sub", SubType.Exclusive, 1)
        waiting = reads.suspended
        cnx.send_command(client_commands.flow(1, 5))

        wait_for(lambda: reads.suspended > waiting, "the dispatcher's read to wait")
        (connection,) = broker.service.connections
        consumer = connection.consumers[1]
        dispatcher = consumer.subscription.dispatcher
        assert dispatcher is not None

        async def fill_up_then_open() -> None:
            connection.pause_writing()
            assert reads.gate is not None
            reads.gate.set()

        broker.call(fill_up_then_open())
        wait_for(lambda: dispatcher._in_flight is None, "the read to return and the pass to end")
        assert consumer.msg_out_counter == 0

        async def drain() -> None:
            connection.resume_writing()

        broker.call(drain())
        assert _entries_after_flow(cnx, 0) == 5  # the five entries the permits allow, no more
