"""SENDs read together are published together (a run per producer), as if one by one: the
entries are stored in the order they were written, each SEND gets its receipt (or its error),
commands between SENDs see the SENDs before them stored, and a topic that checks each entry
(deduplication) still answers each one on its own."""

from __future__ import annotations

from pathlib import Path

from raw_connection import RawConnection, T
from txn_raw import connected

from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.topic import PersistentTopic
from starquake.protocol import client_commands
from starquake.protocol.framing import (
    encode_command,
    encode_entry,
    encode_payload_command,
    parse_entry,
)
from starquake.protocol.wire import pb
from starquake.storage import EARLIEST, Position


def _producer(cnx: RawConnection, topic: str, producer_id: int) -> None:
    cnx.send_command(
        client_commands.producer(
            topic,
            producer_id,
            100 + producer_id,
            producer_name=f"p{producer_id}",
            user_provided_name=True,
            epoch=0,
            access_mode=0,
            metadata={},
        )
    )
    reply = cnx.next()
    assert reply.type == T.PRODUCER_SUCCESS, reply


def _send(producer_id: int, sequence_id: int) -> bytes:
    metadata = pb.MessageMetadata(
        producer_name=f"p{producer_id}", sequence_id=sequence_id, publish_time=1
    )
    command = client_commands.send(producer_id, sequence_id, 1, sequence_id)
    payload = f"{producer_id}/{sequence_id}".encode()
    return encode_payload_command(command, encode_entry(metadata, payload))


def _answers(cnx: RawConnection, count: int) -> list[pb.BaseCommand]:
    return [cnx.next() for _ in range(count)]


def test_runs_of_several_producers_are_stored_in_the_order_written(
    broker: EmbeddedBroker, topic: str
) -> None:
    with connected(broker.broker_port) as cnx:
        _producer(cnx, topic, 1)
        _producer(cnx, topic, 2)
        order = [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1), (1, 3), (1, 4)]
        cnx.send(
            b"".join(_send(p, s) for p, s in order)
            + encode_command(client_commands.close_producer(2, 7))
            + _send(1, 5)
        )
        # producer 2 is closed before its entries are durable: their receipts are not sent
        answers = _answers(cnx, 7)
        assert [a.success.request_id for a in answers if a.type == T.SUCCESS] == [7]
        receipts = [a.send_receipt for a in answers if a.type == T.SEND_RECEIPT]
        assert [(r.producer_id, r.sequence_id, r.message_id.entryId) for r in receipts] == [
            (1, 0, 0),
            (1, 1, 1),
            (1, 2, 2),
            (1, 3, 5),  # after producer 2's two entries
            (1, 4, 6),
            (1, 5, 7),  # written after the CLOSE_PRODUCER: stored after the others
        ]
    stored = broker.call(_payloads(broker, topic))
    assert stored == [f"{p}/{s}".encode() for p, s in [*order, (1, 5)]]


def test_each_send_of_a_run_refused_by_its_topic_gets_its_error(
    broker: EmbeddedBroker, topic: str
) -> None:
    with connected(broker.broker_port) as cnx:
        _producer(cnx, topic, 1)
        cnx.send(_send(1, 0))
        assert cnx.next().type == T.SEND_RECEIPT
        loaded = broker.service.topics[topic]
        assert isinstance(loaded, PersistentTopic)
        # what a termination does first (it disconnects the producers once it is stored)
        broker.call(_set_terminated(loaded, Position(-1, -1)))
        cnx.send(b"".join(_send(1, s) for s in range(1, 5)))
        errors = _answers(cnx, 4)
        assert [e.type for e in errors] == [T.SEND_ERROR] * 4
        assert [e.send_error.sequence_id for e in errors] == [1, 2, 3, 4]
        assert {e.send_error.error for e in errors} == {pb.TopicTerminatedError}
        assert broker.call(_pending_send_bytes(broker)) == [0]
        broker.call(_set_terminated(loaded, None))
        cnx.send(b"".join(_send(1, s) for s in range(5, 7)))
        receipts = [a.send_receipt for a in _answers(cnx, 2)]
        assert [(r.sequence_id, r.message_id.entryId) for r in receipts] == [(5, 1), (6, 2)]


def test_a_run_to_a_deduplicating_topic_is_checked_entry_by_entry(
    tmp_path: Path, topic: str
) -> None:
    with (
        EmbeddedBroker(tmp_path / "data", brokerDeduplicationEnabled=True) as broker,
        connected(broker.broker_port) as cnx,
    ):
        _producer(cnx, topic, 1)
        cnx.send(b"".join(_send(1, s) for s in (0, 1, 1, 2, 0)))
        answers = _answers(cnx, 5)
        # the copies arrive while the first ones are not yet durable: refused, to be retried
        refused = [a.send_error for a in answers if a.type == T.SEND_ERROR]
        assert [(e.sequence_id, e.error) for e in refused] == [
            (1, pb.PersistenceError),
            (0, pb.PersistenceError),
        ]
        receipts = [a.send_receipt for a in answers if a.type == T.SEND_RECEIPT]
        assert [(r.sequence_id, r.message_id.entryId) for r in receipts] == [(0, 0), (1, 1), (2, 2)]


async def _set_terminated(topic: PersistentTopic, at: Position | None) -> None:
    topic.terminated = at


async def _payloads(broker: EmbeddedBroker, topic: str) -> list[bytes]:
    loaded = broker.service.topics[topic]
    assert isinstance(loaded, PersistentTopic)
    entries = await loaded.ledger.read_entries(EARLIEST, 100)
    return [bytes(parse_entry(bytes(e.data)).payload) for e in entries]


async def _pending_send_bytes(broker: EmbeddedBroker) -> list[int]:
    return [cnx.pending_send_bytes for cnx in broker.service.connections]
