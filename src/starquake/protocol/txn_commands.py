"""Builders of the transaction commands, both directions.

A client finds the transaction coordinator ``N`` (a partition of
``persistent://pulsar/system/transaction_coordinator_assign``), connects to it with
TC_CLIENT_CONNECT_REQUEST, then opens transactions (NEW_TXN), registers the partitions it
produces to (ADD_PARTITION_TO_TXN) and subscriptions it acknowledges on
(ADD_SUBSCRIPTION_TO_TXN), and ends them (END_TXN with COMMIT or ABORT). The coordinator ends
the transaction on each partition (END_TXN_ON_PARTITION) and subscription
(END_TXN_ON_SUBSCRIPTION). A transaction id is two uint64: the coordinator's id (most
significant bits) and a sequence number of that coordinator (least significant bits).

Client requests are returned as ``BaseCommand`` (framed by the caller); the broker's answers
as ready frames.
"""

from __future__ import annotations

from collections.abc import Iterable

from starquake.protocol.errors import ServerError
from starquake.protocol.framing import encode_command
from starquake.protocol.wire import pb

T = pb.BaseCommand

COMMIT = pb.COMMIT
"""TxnAction COMMIT."""
ABORT = pb.ABORT
"""TxnAction ABORT."""


# --- client requests --------------------------------------------------------------------------


def tc_client_connect_request(request_id: int, tc_id: int) -> T:
    """TC_CLIENT_CONNECT_REQUEST to coordinator ``tc_id``."""
    cmd = T(type=T.TC_CLIENT_CONNECT_REQUEST)
    cmd.tc_client_connect_request.request_id = request_id
    cmd.tc_client_connect_request.tc_id = tc_id
    return cmd


def new_txn(request_id: int, tc_id: int, ttl_seconds: int) -> T:
    """NEW_TXN: open a transaction on coordinator ``tc_id`` that times out after
    ``ttl_seconds``."""
    cmd = T(type=T.NEW_TXN)
    cmd.new_txn.request_id = request_id
    cmd.new_txn.tc_id = tc_id
    cmd.new_txn.txn_ttl_seconds = ttl_seconds
    return cmd


def add_partition_to_txn(request_id: int, most: int, least: int, partitions: Iterable[str]) -> T:
    """ADD_PARTITION_TO_TXN: the transaction will produce to ``partitions``."""
    cmd = T(type=T.ADD_PARTITION_TO_TXN)
    add = cmd.add_partition_to_txn
    add.request_id = request_id
    add.txnid_most_bits = most
    add.txnid_least_bits = least
    add.partitions.extend(partitions)
    return cmd


def add_subscription_to_txn(
    request_id: int, most: int, least: int, subscriptions: Iterable[tuple[str, str]]
) -> T:
    """ADD_SUBSCRIPTION_TO_TXN: the transaction will acknowledge on ``(topic, subscription)``."""
    cmd = T(type=T.ADD_SUBSCRIPTION_TO_TXN)
    add = cmd.add_subscription_to_txn
    add.request_id = request_id
    add.txnid_most_bits = most
    add.txnid_least_bits = least
    for topic, subscription in subscriptions:
        add.subscription.add(topic=topic, subscription=subscription)
    return cmd


def end_txn(request_id: int, most: int, least: int, action: int) -> T:
    """END_TXN: commit (``COMMIT``) or abort (``ABORT``) the transaction."""
    cmd = T(type=T.END_TXN)
    end = cmd.end_txn
    end.request_id = request_id
    end.txnid_most_bits = most
    end.txnid_least_bits = least
    end.txn_action = action  # type: ignore[assignment]
    return cmd


def end_txn_on_partition(request_id: int, most: int, least: int, topic: str, action: int) -> T:
    """END_TXN_ON_PARTITION: the coordinator tells a partition the transaction's outcome."""
    cmd = T(type=T.END_TXN_ON_PARTITION)
    end = cmd.end_txn_on_partition
    end.request_id = request_id
    end.txnid_most_bits = most
    end.txnid_least_bits = least
    end.topic = topic
    end.txn_action = action  # type: ignore[assignment]
    return cmd


def end_txn_on_subscription(
    request_id: int, most: int, least: int, topic: str, subscription: str, action: int
) -> T:
    """END_TXN_ON_SUBSCRIPTION: the coordinator tells a subscription the outcome."""
    cmd = T(type=T.END_TXN_ON_SUBSCRIPTION)
    end = cmd.end_txn_on_subscription
    end.request_id = request_id
    end.txnid_most_bits = most
    end.txnid_least_bits = least
    end.subscription.topic = topic
    end.subscription.subscription = subscription
    end.txn_action = action  # type: ignore[assignment]
    return cmd


# --- broker answers ---------------------------------------------------------------------------


def tc_client_connect_response(
    request_id: int, code: ServerError | None = None, message: str = ""
) -> bytes:
    """TC_CLIENT_CONNECT_RESPONSE (with ``code``: the coordinator cannot be used)."""
    cmd = T(type=T.TC_CLIENT_CONNECT_RESPONSE)
    reply = cmd.tc_client_connect_response
    reply.request_id = request_id
    if code is not None:
        reply.error = int(code)  # type: ignore[assignment]
        reply.message = message
    return encode_command(cmd)


# The responses that name a transaction share their fields: request_id, the two id halves,
# error and message; each is the field of BaseCommand named like its type.
_RESPONSES: dict[int, str] = {
    T.NEW_TXN_RESPONSE: "new_txn_response",
    T.ADD_PARTITION_TO_TXN_RESPONSE: "add_partition_to_txn_response",
    T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE: "add_subscription_to_txn_response",
    T.END_TXN_RESPONSE: "end_txn_response",
    T.END_TXN_ON_PARTITION_RESPONSE: "end_txn_on_partition_response",
    T.END_TXN_ON_SUBSCRIPTION_RESPONSE: "end_txn_on_subscription_response",
}


def txn_response(
    kind: int,
    request_id: int,
    most: int,
    least: int,
    code: ServerError | None = None,
    message: str = "",
) -> bytes:
    """The response of type ``kind`` (e.g. ``NEW_TXN_RESPONSE``) for transaction
    ``(most, least)``; with ``code`` it reports that error."""
    cmd = T(type=kind)  # type: ignore[arg-type]
    reply = getattr(cmd, _RESPONSES[kind])
    reply.request_id = request_id
    reply.txnid_most_bits = most
    reply.txnid_least_bits = least
    if code is not None:
        reply.error = int(code)
        reply.message = message
    return encode_command(cmd)


RESPONSE_OF = {
    T.NEW_TXN: T.NEW_TXN_RESPONSE,
    T.ADD_PARTITION_TO_TXN: T.ADD_PARTITION_TO_TXN_RESPONSE,
    T.ADD_SUBSCRIPTION_TO_TXN: T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
    T.END_TXN: T.END_TXN_RESPONSE,
    T.END_TXN_ON_PARTITION: T.END_TXN_ON_PARTITION_RESPONSE,
    T.END_TXN_ON_SUBSCRIPTION: T.END_TXN_ON_SUBSCRIPTION_RESPONSE,
}
"""The response type of each transaction request."""


def ack_response(
    consumer_id: int,
    request_id: int,
    txn: tuple[int, int],
    code: ServerError | None = None,
    message: str = "",
) -> bytes:
    """ACK_RESPONSE to an ACK made in transaction ``txn`` (with ``code``: it failed)."""
    cmd = T(type=T.ACK_RESPONSE)
    reply = cmd.ack_response
    reply.consumer_id = consumer_id
    reply.request_id = request_id
    reply.txnid_most_bits = txn[0]
    reply.txnid_least_bits = txn[1]
    if code is not None:
        reply.error = int(code)  # type: ignore[assignment]
        reply.message = message
    return encode_command(cmd)
