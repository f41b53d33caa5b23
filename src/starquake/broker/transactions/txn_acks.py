"""ACKs carrying a transaction id (CommandAck ``txnid_most_bits`` / ``txnid_least_bits``).

They are held on the subscription's pending-ack handle (:mod:`.pending_ack`) and answered once
durable, with an ACK_RESPONSE that names the transaction when the client asked for a receipt
(``request_id``), with the error code when it failed: TransactionConflict for a conflict,
NotAllowedError for a cumulative ack on a Shared or Key_Shared subscription or when
transactions are off, TransactionNotFound / InvalidTxnStatus for a transaction that is not
open.
"""

from __future__ import annotations

import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

from starquake.broker.errors import BrokerServiceError, NotAllowedError
from starquake.broker.subscription import Subscription, to_signed
from starquake.broker.transactions.errors import TxnId
from starquake.broker.transactions.pending_state import TxnAck
from starquake.protocol import txn_commands
from starquake.protocol.enums import AckType, SubType
from starquake.protocol.wire import pb
from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.transactions.service import TransactionService

log = logging.getLogger(__name__)


class AckConnection(Protocol):
    """What the handler uses of the connection."""

    def write(self, frame: bytes) -> None:
        """Queue a frame to the client."""

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a background task."""

    @property
    def remote_address(self) -> str:
        """The client's address."""


def carries_txn(ack: pb.CommandAck) -> bool:
    """Whether an ACK is made in a transaction (both id halves present, as Pulsar checks)."""
    return ack.HasField("txnid_most_bits") and ack.HasField("txnid_least_bits")


def on_txn_ack(
    cnx: AckConnection, service: TransactionService, consumer: Consumer, ack: pb.CommandAck
) -> None:
    """Hold the ACK's messages as pending in its transaction; answer when asked to."""
    txn = (int(ack.txnid_most_bits), int(ack.txnid_least_bits))
    wants_response = ack.HasField("request_id")

    async def run() -> None:
        try:
            await _hold(service, consumer, ack, txn)
        except BrokerServiceError as exc:
            if wants_response:
                cnx.write(_response(ack, txn, exc.code, exc.message))
            else:
                log.info("ack in transaction from %s refused: %s", cnx.remote_address, exc)
            return
        except Exception as exc:  # never leave a receipt unanswered
            log.exception("ack in transaction failed")
            if wants_response:
                error = BrokerServiceError(f"Ack in transaction failed: {exc!r}")
                cnx.write(_response(ack, txn, error.code, error.message))
            return
        if wants_response:
            cnx.write(_response(ack, txn))

    cnx.spawn(run())


def _response(ack: pb.CommandAck, txn: TxnId, code: Any = None, message: str = "") -> bytes:
    return txn_commands.ack_response(ack.consumer_id, ack.request_id, txn, code, message)


async def _hold(
    service: TransactionService, consumer: Consumer, ack: pb.CommandAck, txn: TxnId
) -> None:
    subscription = consumer.subscription
    if not service.enabled or not isinstance(subscription, Subscription):
        raise NotAllowedError("Server don't support transaction ack!")
    if int(ack.ack_type) == AckType.Cumulative:
        if subscription.sub_type in (SubType.Shared, SubType.Key_Shared):
            raise NotAllowedError(
                "Cumulative acknowledgment is not allowed on Shared or Key_Shared subscriptions"
            )
        if len(ack.message_id) != 1:
            raise NotAllowedError("Invalid cumulative ack received with multiple message ids.")
        mid = ack.message_id[0]
        position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
        if len(mid.ack_set):  # up to a message inside a batch: the entries before it
            position = Position(position.ledger_id, position.entry_id - 1)
        handle = await service.pending_ack_of(subscription)
        await handle.ack_cumulative(txn, position)
        return
    acks = [_txn_ack(subscription, mid) for mid in ack.message_id]
    handle = await service.pending_ack_of(subscription)
    await handle.ack_individual(txn, acks)


def _txn_ack(subscription: Subscription, mid: pb.MessageIdData) -> TxnAck:
    """One message id of an individual ACK: the whole entry, or the batch indexes its ack set
    no longer lists (bits set: not acknowledged)."""
    position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
    words = list(mid.ack_set)
    if not words or not any(words):
        return TxnAck(position)
    size = mid.batch_size if mid.HasField("batch_size") else 0
    if size <= 0:
        size = subscription.topic.batch_size_of(position) or len(words) * 64
    indexes = frozenset(
        i for i in range(size) if i // 64 >= len(words) or not (words[i // 64] >> (i % 64)) & 1
    )
    if len(indexes) >= size:
        return TxnAck(position)
    return TxnAck(position, indexes, size)
