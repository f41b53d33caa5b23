"""The blocking ``Transaction``: the asyncio one's commit and abort, run on the loop thread."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from starquake.client.core._transaction import Transaction as AsyncTransaction

if TYPE_CHECKING:
    from starquake.client.sync._loop import LoopThread


class Transaction:
    """An open transaction; create it with :meth:`Client.new_transaction`, send messages in
    it with ``producer.send(..., txn=txn)``, then :meth:`commit` or :meth:`abort` it."""

    def __init__(
        self,
        runner: LoopThread,
        impl: AsyncTransaction,
        handed_over: Callable[[], Coroutine[Any, Any, None]],
    ) -> None:
        """``handed_over``: returns once the sends the producers queued are in the core."""
        self._runner = runner
        self._impl = impl
        self._handed_over = handed_over

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
        """Commit once every message sent in the transaction is stored (``send_async`` ones
        included): they all become visible at once. InvalidTxnStatusError when it is not
        OPEN."""
        self._runner.run(self._end(commit=True))

    def abort(self) -> None:
        """Abort: no message sent in the transaction is ever delivered."""
        self._runner.run(self._end(commit=False))

    async def _end(self, commit: bool) -> None:
        await self._handed_over()
        await (self._impl.commit() if commit else self._impl.abort())


def core_transaction(txn: Transaction | AsyncTransaction | None) -> AsyncTransaction | None:
    """The asyncio transaction of a ``txn`` argument (either kind, or None)."""
    if txn is None or isinstance(txn, AsyncTransaction):
        return txn
    if isinstance(txn, Transaction):
        return txn.impl
    raise TypeError(f"txn must be a Transaction, not {type(txn).__name__}")
