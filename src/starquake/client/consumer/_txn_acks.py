"""Acknowledgments in a transaction, as the Java client makes them.

Before its first ack on a subscription a transaction registers it with its coordinator
(ADD_SUBSCRIPTION_TO_TXN, once per topic and subscription); each ack is then sent at once (not
grouped) with the transaction id and a request id, and the broker's ACK_RESPONSE is waited for:
its error is raised (TransactionConflict, NotAllowedError, ...). The message stays pending on
the broker until the transaction commits (acknowledged) or aborts (delivered again). A commit
waits for the acks made before it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from starquake.client.base._message import MessageId
from starquake.client.consumer._deliveries import SHARED_TYPES
from starquake.client.exceptions import CumulativeAcknowledgementNotAllowedError, from_server_error
from starquake.protocol import client_commands
from starquake.protocol.enums import AckType
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.client.base._enums import ConsumerType
    from starquake.client.core._handler import ClientCore
    from starquake.client.core._transaction import Transaction
    from starquake.client.wire._connection import ClientConnection


def _ack_set_without(index: int, size: int) -> list[int]:
    """Unacknowledged-bits words of a batch of ``size`` where only ``index`` is acked."""
    words = [0] * ((size + 63) // 64)
    for i in range(size):
        if i != index:
            words[i // 64] |= 1 << (i % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def _individual_ids(msg_id: MessageId) -> list[pb.MessageIdData]:
    """The ids an individual ack in a transaction names: a batch message by its index."""
    index, size = msg_id.batch_index(), msg_id.batch_size
    if index >= 0 and size > 1:
        data = msg_id.to_proto(with_batch=False)
        data.ack_set.extend(_ack_set_without(index, size))
        data.batch_size = size
        return [data]
    return [c.to_proto(with_batch=False) for c in msg_id.chunk_message_ids]


def _cumulative_id(msg_id: MessageId) -> pb.MessageIdData:
    """Up to a message inside an incomplete batch: up to the entry before it (as the
    ordinary cumulative ack)."""
    index, size = msg_id.batch_index(), msg_id.batch_size
    if 0 <= index < size - 1:
        return MessageId.from_parts(
            msg_id.ledger_id(), msg_id.entry_id() - 1, msg_id.partition()
        ).to_proto(with_batch=False)
    return msg_id.to_proto(with_batch=False)


def check_cumulative_allowed(cumulative: bool, consumer_type: ConsumerType) -> None:
    """Refuse a cumulative ack on a Shared or Key_Shared subscription (as the plain one)."""
    if cumulative and consumer_type in SHARED_TYPES:
        raise CumulativeAcknowledgementNotAllowedError(
            "cumulative acknowledgement is not allowed on Shared/KeyShared subscriptions"
        )


async def send_txn_ack(
    core: ClientCore,
    connection: Callable[[], Awaitable[ClientConnection]],
    consumer_id: int,
    subscription: tuple[str, str],
    msg_id: MessageId,
    txn: Transaction,
    cumulative: bool,
) -> None:
    """Acknowledge ``msg_id`` (everything up to it with ``cumulative``) in ``txn`` on the
    consumer ``consumer_id`` of ``subscription`` (topic, name); returns once the broker holds
    the ack, raises its error otherwise. The transaction's commit waits for it."""

    async def send() -> None:
        await txn.register_acked_subscription(*subscription)
        cnx = await connection()
        rid = core.next_request_id()
        ids = [_cumulative_id(msg_id)] if cumulative else _individual_ids(msg_id)
        kind = AckType.Cumulative if cumulative else AckType.Individual
        cmd = client_commands.ack(consumer_id, kind, ids)
        cmd.ack.txnid_most_bits, cmd.ack.txnid_least_bits = txn.txn_id
        cmd.ack.request_id = rid
        reply = await cnx.request(cmd, rid, core.operation_timeout)
        body = reply.ack_response
        if body.HasField("error"):
            raise from_server_error(int(body.error), body.message)

    txn.check_open()
    work = asyncio.ensure_future(send())
    txn.track(work)
    await asyncio.shield(work)
