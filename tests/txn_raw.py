"""Transaction frames sent by hand on a raw connection (for what no real client sends)."""

from __future__ import annotations

from raw_connection import RawConnection, T

from starquake.protocol import client_commands
from starquake.protocol.framing import encode_entry, encode_payload_command
from starquake.protocol.wire import pb


def connected(port: int, token: str | None = None) -> RawConnection:
    """A raw connection past its handshake (with a token's credentials when given)."""
    cnx = RawConnection(port)
    try:
        if token is None:
            cnx.handshake()
        else:
            cnx.connect("token", token.encode())
            reply = cnx.next()
            assert reply.type == T.CONNECTED, reply
    except BaseException:
        cnx.close()
        raise
    return cnx


def raw_producer(topic: str, producer_id: int = 1, request_id: int = 1) -> T:
    """PRODUCER of ``topic`` named "raw"."""
    return client_commands.producer(
        topic,
        producer_id,
        request_id,
        producer_name="raw",
        user_provided_name=True,
        epoch=0,
        access_mode=0,
        metadata={},
    )


def txn_send(
    producer_id: int, sequence_id: int, txn: tuple[int, int], payload: bytes = b"raw"
) -> bytes:
    """SEND of one message in transaction ``txn``."""
    metadata = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id, publish_time=1)
    metadata.txnid_most_bits, metadata.txnid_least_bits = txn
    cmd = client_commands.send(producer_id, sequence_id, 1, sequence_id)
    cmd.send.txnid_most_bits, cmd.send.txnid_least_bits = txn
    return encode_payload_command(cmd, encode_entry(metadata, payload))


def end_txn_on_subscription(
    request_id: int, txn: tuple[int, int], topic: str, subscription: str, action: int
) -> T:
    """END_TXN_ON_SUBSCRIPTION (what a coordinator sends the broker of a topic)."""
    command = T(type=T.END_TXN_ON_SUBSCRIPTION)
    request = command.end_txn_on_subscription
    request.request_id, request.txn_action = request_id, action
    request.txnid_most_bits, request.txnid_least_bits = txn
    request.subscription.topic, request.subscription.subscription = topic, subscription
    return command
