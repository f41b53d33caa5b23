"""The blocking ``Transaction``: the asyncio one's commit and abort, run on the loop thread."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starquake.client.core._transaction import Transaction as AsyncTransaction

if TYPE_CHECKING:
    from starquake.client.sync._loop import LoopThread


class Transaction:
    """An open transaction; create it with :meth:`Client.new_transaction`, send messages in
    it with ``producer.send(..., txn=txn)``, then :meth:`commit` or :meth:`abort` it."""

    def __init__(self, runner: LoopThread, impl: AsyncTransaction) -> None:
        self._runner = runner
        self._impl = impl

    def __repr__(self) -> str:
        return repr(self._impl)

    @property
    def impl(self) -> AsyncTransaction:
        """The asyncio transaction this wraps."""
        return self._impl

    @property
    def txn_id(self) -> tuple[int, int]:
        """(most significant bits, least significant bits), as Java's ``TxnID``."""
        return self._impl.txn_id

    @property
    def state(self) -> str:
        """OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED or ERROR."""
        return self._impl.state

    def commit(self) -> None:
        """Commit once every message sent in the transaction is stored: they all become
        visible at once. InvalidTxnStatusError when it is not OPEN."""
        self._runner.run(self._impl.commit())

    def abort(self) -> None:
        """Abort: no message sent in the transaction is ever delivered."""
        self._runner.run(self._impl.abort())


def core_transaction(txn: Transaction | AsyncTransaction | None) -> AsyncTransaction | None:
    """The asyncio transaction of a ``txn`` argument (either kind, or None)."""
    if txn is None or isinstance(txn, AsyncTransaction):
        return txn
    if isinstance(txn, Transaction):
        return txn.impl
    raise TypeError(f"txn must be a Transaction, not {type(txn).__name__}")
