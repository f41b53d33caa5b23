"""Transaction requests a well-behaved client never sends, on raw connections: unknown
coordinators and transactions, transactions already ended, extreme ids, incomplete frames.
Each gets Pulsar's error and the broker serves on (the same connection where the error is an
answer, a new one where the frame closes its connection)."""

from __future__ import annotations

import pytest
from raw_connection import RawConnection, T
from txn_helpers import new_topic
from txn_raw import connected, end_txn_on_subscription, raw_producer, txn_send

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import client_commands, txn_commands
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import encode_raw_command
from starquake.protocol.wire import pb

MAX_U64 = 2**64 - 1
COMMIT, ABORT = txn_commands.COMMIT, txn_commands.ABORT


def _serves(cnx: RawConnection, request_id: int = 99) -> None:
    """The connection still opens and commits a transaction."""
    cnx.send_command(txn_commands.new_txn(request_id, 0, 60_000))
    opened = cnx.next().new_txn_response
    assert not opened.HasField("error"), opened
    cnx.send_command(txn_commands.end_txn(request_id + 1, 0, opened.txnid_least_bits, COMMIT))
    assert not cnx.next().end_txn_response.HasField("error")


def _answers(cnx: RawConnection, count: int) -> dict[int, tuple[int, str]]:
    """(error, message) of the next ``count`` transaction responses, by request id."""
    found = {}
    for _ in range(count):
        reply = cnx.next()
        response = getattr(reply, _RESPONSE_FIELD[reply.type])
        found[response.request_id] = (response.error, response.message)
    return found


_RESPONSE_FIELD = {
    T.NEW_TXN_RESPONSE: "new_txn_response",
    T.ADD_PARTITION_TO_TXN_RESPONSE: "add_partition_to_txn_response",
    T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE: "add_subscription_to_txn_response",
    T.END_TXN_RESPONSE: "end_txn_response",
    T.TC_CLIENT_CONNECT_RESPONSE: "tc_client_connect_response",
}


def test_requests_naming_a_coordinator_this_broker_does_not_have(
    txn_broker: EmbeddedBroker,
) -> None:
    topic = new_topic()
    with connected(txn_broker.broker_port) as cnx:
        for most in (7, MAX_U64):
            cnx.send_command(txn_commands.tc_client_connect_request(1, most))
            cnx.send_command(txn_commands.new_txn(2, most, 1000))
            cnx.send_command(txn_commands.add_partition_to_txn(3, most, 0, [topic]))
            cnx.send_command(txn_commands.add_subscription_to_txn(4, most, 0, [(topic, "s")]))
            cnx.send_command(txn_commands.end_txn(5, most, 0, COMMIT))
            cnx.send_command(txn_commands.end_txn(6, most, MAX_U64, ABORT))
            answers = _answers(cnx, 6)
            assert {n: code for n, (code, _) in answers.items()} == {
                n: ServerError.TransactionCoordinatorNotFound for n in range(1, 7)
            }
            assert answers[5][1] == f"Transaction coordinator {most} not found"
        _serves(cnx)


def test_requests_of_unknown_and_ended_transactions(txn_broker: EmbeddedBroker) -> None:
    topic = new_topic()
    with connected(txn_broker.broker_port) as cnx:
        for least in (123_456_789, MAX_U64):
            cnx.send_command(txn_commands.add_partition_to_txn(1, 0, least, [topic]))
            cnx.send_command(txn_commands.add_subscription_to_txn(2, 0, least, [(topic, "s")]))
            cnx.send_command(txn_commands.end_txn(3, 0, least, ABORT))
            answers = _answers(cnx, 3)
            assert answers == {
                n: (ServerError.TransactionNotFound, f"Transaction (0,{least}) not found")
                for n in (1, 2, 3)
            }
        # ended: forgotten by the coordinator, as Pulsar's (TransactionNotFound)
        for first, then in ((COMMIT, COMMIT), (COMMIT, ABORT), (ABORT, ABORT), (ABORT, COMMIT)):
            cnx.send_command(txn_commands.new_txn(10, 0, 60_000))
            least = cnx.next().new_txn_response.txnid_least_bits
            cnx.send_command(txn_commands.end_txn(11, 0, least, first))
            assert not cnx.next().end_txn_response.HasField("error")
            cnx.send_command(txn_commands.end_txn(12, 0, least, then))
            cnx.send_command(txn_commands.add_partition_to_txn(13, 0, least, [topic]))
            cnx.send_command(txn_commands.add_subscription_to_txn(14, 0, least, [(topic, "s")]))
            codes = {n: code for n, (code, _) in _answers(cnx, 3).items()}
            assert codes == {n: ServerError.TransactionNotFound for n in (12, 13, 14)}
        _serves(cnx)


def test_send_and_ack_in_ended_unknown_or_foreign_transactions(txn_broker: EmbeddedBroker) -> None:
    topic = new_topic()
    with connected(txn_broker.broker_port) as cnx:
        cnx.send_command(raw_producer(topic))
        assert cnx.next().type == T.PRODUCER_SUCCESS
        cnx.send_command(txn_commands.new_txn(2, 0, 60_000))
        least = cnx.next().new_txn_response.txnid_least_bits
        cnx.send(txn_send(1, 1, (0, least)))
        assert cnx.next().type == T.SEND_RECEIPT
        cnx.send_command(txn_commands.end_txn(3, 0, least, COMMIT))
        assert not cnx.next().end_txn_response.HasField("error")
        refusals = {
            (0, least): f"Transaction (0,{least}) already ended on {topic}",
            (0, least + 1000): f"Transaction (0,{least + 1000}) not found",
            (7, 1): "Transaction coordinator 7 not found",
            (MAX_U64, MAX_U64): f"Transaction coordinator {MAX_U64} not found",
        }
        for sequence, (txn, message) in enumerate(refusals.items(), start=2):
            cnx.send(txn_send(1, sequence, txn))
            refused = cnx.next().send_error
            assert (refused.sequence_id, refused.error, refused.message) == (
                sequence,
                ServerError.NotAllowedError,  # not a transaction code: Java clients would retry
                message,
            )
        cnx.send_command(
            client_commands.subscribe(
                topic,
                "s",
                pb.CommandSubscribe.Shared,
                7,
                4,
                consumer_name="raw",
                durable=True,
                initial_position=1,
                read_compacted=False,
                metadata={},
            )
        )
        assert cnx.next().HasField("success")
        acks = {
            (0, least): (ServerError.TransactionNotFound, f"Transaction (0,{least}) not found"),
            (0, MAX_U64): (ServerError.TransactionNotFound, f"Transaction (0,{MAX_U64}) not found"),
            (7, 1): (
                ServerError.TransactionCoordinatorNotFound,
                "Transaction coordinator 7 not found",
            ),
        }
        for request_id, (txn, refusal) in enumerate(acks.items(), start=5):
            ack = client_commands.ack(7, pb.CommandAck.Individual, [])
            ack.ack.message_id.add(ledgerId=0, entryId=0)
            ack.ack.txnid_most_bits, ack.ack.txnid_least_bits = txn
            ack.ack.request_id = request_id
            cnx.send_command(ack)
            reply = cnx.next().ack_response
            assert (reply.request_id, reply.error, reply.message) == (request_id, *refusal)
        _serves(cnx)


def test_transaction_requests_with_transactions_off(broker: EmbeddedBroker) -> None:
    topic = new_topic()
    with connected(broker.broker_port) as cnx:
        cnx.send_command(txn_commands.add_partition_to_txn(1, 0, 0, [topic]))
        cnx.send_command(txn_commands.add_subscription_to_txn(2, 0, 0, [(topic, "s")]))
        cnx.send_command(txn_commands.end_txn(3, 0, 0, ABORT))
        cnx.send_command(txn_commands.end_txn_on_partition(4, 0, 0, topic, COMMIT))
        cnx.send_command(end_txn_on_subscription(5, (0, 0), topic, "s", ABORT))
        replies = [cnx.next() for _ in range(5)]
        assert [(r.type, r.error.request_id, r.error.error, r.error.message) for r in replies] == [
            (T.ERROR, n, ServerError.NotAllowedError, "Transactions are not enabled.")
            for n in range(1, 6)
        ]
        cnx.send_command(raw_producer(topic))
        assert cnx.next().type == T.PRODUCER_SUCCESS  # the connection serves on


_WITHOUT_REQUEST_ID = [
    (T.TC_CLIENT_CONNECT_REQUEST, "tcClientConnectRequest"),
    (T.NEW_TXN, "newTxn"),
    (T.ADD_PARTITION_TO_TXN, "addPartitionToTxn"),
    (T.ADD_SUBSCRIPTION_TO_TXN, "addSubscriptionToTxn"),
    (T.END_TXN, "endTxn"),
    (T.END_TXN_ON_PARTITION, "endTxnOnPartition"),
    (T.END_TXN_ON_SUBSCRIPTION, "endTxnOnSubscription"),
]


@pytest.mark.parametrize(("kind", "field"), _WITHOUT_REQUEST_ID)
def test_a_transaction_command_without_its_required_fields_closes_the_connection(
    txn_broker: EmbeddedBroker, kind: int, field: str
) -> None:
    command = T(type=kind)
    part = getattr(command, _snake(field))
    part.SetInParent()  # present, but without its required request id
    with connected(txn_broker.broker_port) as cnx:
        cnx.send(encode_raw_command(command.SerializePartialToString()))
        assert cnx.closed()
    with connected(txn_broker.broker_port) as cnx:
        _serves(cnx)


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)
