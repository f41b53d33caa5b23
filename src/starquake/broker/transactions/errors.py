"""The errors a transaction request is answered with (Pulsar's ServerError codes)."""

from __future__ import annotations

from starquake.broker.errors import BrokerServiceError
from starquake.protocol.errors import ServerError

TxnId = tuple[int, int]
"""A transaction id: (most significant bits = coordinator id, least significant bits =
sequence number of that coordinator)."""


def txn_text(txn: TxnId) -> str:
    """A transaction id as Pulsar prints it: ``(most,least)``."""
    return f"({txn[0]},{txn[1]})"


class TransactionNotFoundError(BrokerServiceError):
    """The coordinator has no such transaction (unknown, or already ended)."""

    code = ServerError.TransactionNotFound


class InvalidTxnStatusError(BrokerServiceError):
    """The transaction's status does not allow the request."""

    code = ServerError.InvalidTxnStatus


class CoordinatorNotFoundError(BrokerServiceError):
    """This broker serves no coordinator of that id."""

    code = ServerError.TransactionCoordinatorNotFound


class TransactionConflictError(BrokerServiceError):
    """The request conflicts with the transaction's end (e.g. a send after it ended)."""

    code = ServerError.TransactionConflict


class EndRefusedError(BrokerServiceError):
    """The broker of a participant topic refused to end a transaction there with an error that
    a resend would get again (e.g. the coordinator's broker is not a super user there). As in
    Pulsar, the end is reported failed and not retried: the transaction stays committing or
    aborting until its coordinator is recovered again (which drives it to its end)."""
