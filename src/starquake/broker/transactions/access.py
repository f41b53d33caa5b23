"""Who may act on a transaction, as Pulsar's broker decides it.

A transaction's owner is the authenticated role of the connection that sent NEW_TXN (None
with authentication off). ADD_PARTITION_TO_TXN, ADD_SUBSCRIPTION_TO_TXN and END_TXN are
allowed to its owner, to anyone when it has no owner, and to a super user when both
authentication and authorization are on; anyone else is refused with TransactionNotFound.
END_TXN_ON_PARTITION and END_TXN_ON_SUBSCRIPTION (a coordinator's requests to the broker of a
topic) are allowed to super users only, when both are on (to anyone otherwise).

SEND and ACK in a transaction are not checked against its owner (Pulsar does not either): the
producer's and the consumer's own authorization covers them.
"""

from __future__ import annotations

from collections.abc import Callable

from starquake.broker.transactions.errors import TransactionNotFoundError, TxnId, txn_text


class TxnAccess:
    """The ownership checks of one broker."""

    def __init__(self, checks_on: bool, is_super_user: Callable[[str | None], bool]) -> None:
        """``checks_on``: authentication and authorization both enabled."""
        self._checks_on = checks_on
        self._is_super_user = is_super_user

    def super_user(self, role: str | None) -> bool:
        """Whether ``role`` passes a super-user check (everyone does with the checks off)."""
        return not self._checks_on or self._is_super_user(role)

    def check_owner(self, owner: str | None, role: str | None, txn: TxnId) -> None:
        """Raise TransactionNotFound unless ``role`` may act on ``txn`` of ``owner``."""
        if owner is None or owner == role:
            return
        if self._checks_on and self._is_super_user(role):
            return
        raise TransactionNotFoundError(
            f"Client ({_principal(role)}) is neither the owner of the transaction "
            f"{txn_text(txn)} nor a super user"
        )

    def check_coordinator(self, role: str | None, txn: TxnId) -> None:
        """Raise TransactionNotFound unless ``role`` may send a coordinator's requests."""
        if not self.super_user(role):
            raise TransactionNotFoundError(
                f"TC client ({_principal(role)}) is not a super user, and is not allowed to "
                f"operate on transaction {txn_text(txn)}"
            )


def _principal(role: str | None) -> str:
    return "null" if role is None else role
