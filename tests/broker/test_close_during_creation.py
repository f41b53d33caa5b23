"""A CLOSE_CONSUMER / CLOSE_PRODUCER that arrives while the SUBSCRIBE / PRODUCER it names is
still under way (its topic loading) gives that creation up, as in Pulsar: the close is
confirmed, and the consumer or producer is not created afterwards. Before, the broker
confirmed the close of an id it did not know yet and then created the consumer all the same:
an exclusive subscription (or an exclusive producer's topic) stayed taken for as long as the
client's connection lived, and every later subscription got ConsumerBusy.

The topic's loading is held (``get_topic`` of the broker's service waits for a gate) so the
close surely arrives while the creation waits; when the gate opens, the creation resumes and
the test waits until it has run to its end before checking what it left."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from raw_connection import RawConnection, T
from txn_raw import connected

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import client_commands
from starquake.protocol.enums import InitialPosition, SubType
from starquake.protocol.framing import encode_command
from starquake.protocol.wire import pb

EXCLUSIVE_ACCESS = 1


class HeldLoads:
    """The broker's topic loading, held until :meth:`release`; :attr:`resumed` is set once a
    held load has returned and the request waiting for it ran its next step."""

    def __init__(self, broker: EmbeddedBroker) -> None:
        self.gate = threading.Event()
        self.resumed = threading.Event()
        self.held = 0
        service = broker.service
        real = service.get_topic

        async def held(*args: Any, **kwargs: Any) -> Any:
            self.held += 1
            await asyncio.to_thread(self.gate.wait)
            loaded = await real(*args, **kwargs)
            # runs once the request that awaited this load has taken its next (synchronous) step
            asyncio.get_running_loop().call_soon(self.resumed.set)
            return loaded

        service.get_topic = held  # type: ignore[method-assign]

    def release(self) -> None:
        self.gate.set()
        assert self.resumed.wait(10), "the held load never resumed"


@pytest.fixture
def held(broker: EmbeddedBroker) -> Iterator[HeldLoads]:
    loads = HeldLoads(broker)
    try:
        yield loads
    finally:
        loads.gate.set()


def _subscribe(topic: str, consumer_id: int, request_id: int) -> pb.BaseCommand:
    # a reader's subscription (not durable): the whole creation runs at the end of the load
    return client_commands.subscribe(
        topic,
        "sub",
        SubType.Exclusive,
        consumer_id,
        request_id,
        consumer_name=f"c{consumer_id}",
        durable=False,
        initial_position=InitialPosition.Latest,
        read_compacted=False,
        metadata={},
    )


def _producer(topic: str, producer_id: int, request_id: int, name: str) -> pb.BaseCommand:
    return client_commands.producer(
        topic,
        producer_id,
        request_id,
        producer_name=name,
        user_provided_name=True,
        epoch=0,
        access_mode=EXCLUSIVE_ACCESS,
        metadata={},
    )


def _answers(cnx: RawConnection) -> list[pb.BaseCommand]:
    """What the broker sent until a PING's PONG (everything before it, in order)."""
    cnx.send_command(T(type=T.PING))
    frames = []
    while (frame := cnx.next()).type != T.PONG:
        frames.append(frame)
    return frames


def _close_while_created(
    cnx: RawConnection, create: pb.BaseCommand, close: pb.BaseCommand, held: HeldLoads
) -> None:
    """Send ``create`` (request id 1) and ``close`` (request id 2) together while the topic's
    load is held: the close is confirmed; once the load resumes, the creation is not answered
    (its client stopped waiting)."""
    cnx.send(encode_command(create) + encode_command(close))
    closed = cnx.next()
    assert closed.type == T.SUCCESS and closed.success.request_id == 2, closed
    assert held.held == 1
    held.release()
    assert _answers(cnx) == []


def test_a_consumer_closed_while_it_subscribes_is_not_created(
    broker: EmbeddedBroker, topic: str, held: HeldLoads
) -> None:
    with connected(broker.broker_port) as early:
        _close_while_created(
            early, _subscribe(topic, 1, 1), client_commands.close_consumer(1, 2), held
        )
        assert broker.call(_consumer_counts(broker)) == [0]  # nothing holds the subscription
        with connected(broker.broker_port) as later:
            later.send_command(_subscribe(topic, 7, 1))
            answer = later.next()
            assert answer.type == T.SUCCESS, answer


def test_a_producer_closed_while_it_is_created_is_not_created(
    broker: EmbeddedBroker, topic: str, held: HeldLoads
) -> None:
    with connected(broker.broker_port) as early:
        _close_while_created(
            early, _producer(topic, 1, 1, "early"), client_commands.close_producer(1, 2), held
        )
        with connected(broker.broker_port) as later:
            later.send_command(_producer(topic, 1, 1, "later"))
            answer = later.next()
            assert answer.type == T.PRODUCER_SUCCESS, answer


def test_a_second_request_for_an_id_under_creation_is_told_to_retry(
    broker: EmbeddedBroker, topic: str, held: HeldLoads
) -> None:
    with connected(broker.broker_port) as cnx:
        cnx.send(encode_command(_subscribe(topic, 1, 1)) + encode_command(_subscribe(topic, 1, 2)))
        refused = cnx.next()
        assert refused.type == T.ERROR, refused
        assert refused.error.request_id == 2
        assert refused.error.error == pb.ServiceNotReady
        held.release()
        done = cnx.next()
        assert done.type == T.SUCCESS and done.success.request_id == 1, done
        assert broker.call(_consumer_counts(broker)) == [1]


def test_failed_creations_are_forgotten(broker: EmbeddedBroker, held: HeldLoads) -> None:
    held.gate.set()
    missing = "persistent://no-such-tenant/ns/t"
    with connected(broker.broker_port) as cnx:
        for request_id in range(1, 51):
            cnx.send_command(_subscribe(missing, request_id, request_id))
            assert cnx.next().type == T.ERROR
            cnx.send_command(_producer(missing, request_id, 1000 + request_id, f"p{request_id}"))
            assert cnx.next().type == T.ERROR
        assert broker.call(_under_way(broker)) == [(0, 0)]


async def _consumer_counts(broker: EmbeddedBroker) -> list[int]:
    return [len(cnx.consumers) for cnx in broker.service.connections]


async def _under_way(broker: EmbeddedBroker) -> list[tuple[int, int]]:
    return [
        (len(cnx.creating.producers), len(cnx.creating.consumers))
        for cnx in broker.service.connections
    ]
