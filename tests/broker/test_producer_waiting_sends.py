"""A WaitForExclusive producer is known to its connection before its topic admits it: a SEND
of it before then is a protocol violation (the connection is closed, as for an unknown
producer); once admitted, its SENDs are stored."""

from __future__ import annotations

from raw_connection import RawConnection, T
from txn_raw import connected

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import client_commands
from starquake.protocol.framing import encode_entry, encode_payload_command
from starquake.protocol.wire import pb

EXCLUSIVE = 1
WAIT_FOR_EXCLUSIVE = 2


def _producer(cnx: RawConnection, topic: str, name: str, mode: int) -> pb.CommandProducerSuccess:
    cnx.send_command(
        client_commands.producer(
            topic,
            1,
            1,
            producer_name=name,
            user_provided_name=True,
            epoch=0,
            access_mode=mode,
            metadata={},
        )
    )
    reply = cnx.next()
    assert reply.type == T.PRODUCER_SUCCESS, reply
    success: pb.CommandProducerSuccess = reply.producer_success
    return success


def _send(cnx: RawConnection, name: str, sequence_id: int) -> None:
    metadata = pb.MessageMetadata(producer_name=name, sequence_id=sequence_id, publish_time=1)
    command = client_commands.send(1, sequence_id, 1, sequence_id)
    cnx.send(encode_payload_command(command, encode_entry(metadata, b"payload")))


def test_a_waiting_producer_cannot_send_until_its_topic_admits_it(
    broker: EmbeddedBroker, topic: str
) -> None:
    with connected(broker.broker_port) as holder:
        assert _producer(holder, topic, "holder", EXCLUSIVE).producer_ready
        with connected(broker.broker_port) as early:
            assert not _producer(early, topic, "early", WAIT_FOR_EXCLUSIVE).producer_ready
            _send(early, "early", 0)
            assert early.closed(), "a SEND of a producer still waiting must close its connection"
        _send(holder, "holder", 0)  # the holder goes on
        assert holder.next().type == T.SEND_RECEIPT
        with connected(broker.broker_port) as waiter:
            assert not _producer(waiter, topic, "waiter", WAIT_FOR_EXCLUSIVE).producer_ready
            holder.send_command(client_commands.close_producer(1, 2))
            assert holder.next().type == T.SUCCESS
            ready = waiter.next()  # admitted now: the second PRODUCER_SUCCESS, ready
            assert ready.type == T.PRODUCER_SUCCESS and ready.producer_success.producer_ready
            _send(waiter, "waiter", 0)
            receipt = waiter.next()
            assert receipt.type == T.SEND_RECEIPT, receipt
            assert receipt.send_receipt.message_id.entryId == 1
