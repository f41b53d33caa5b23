"""Reads of a real file-backed managed ledger made to wait, as a remote backend's do.

:class:`SuspendingReads` replaces, on one :class:`~starquake.storage.FileManagedLedger`
instance, the contract's read coroutines (``read_entries``, ``read_entry``, ``replay_entries``,
``find_first``) by ones that wait (``asyncio.sleep`` of 0 or a small random delay) before the
real read and again after it, or until a gate opens: the data is fetched at one moment and
handed over later, and whatever the broker does in between (acks, seeks, consumers leaving)
happens while the read is in flight. Everything else is the real ledger. Cursors of the
ledger read through the same instance and find nothing at hand (``try_read_entries`` answers
None), so their reads wait too.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from typing import Any

from starquake.broker.ledger_storage import FileLedgerStorage, LedgerStorage
from starquake.storage import ManagedLedger, ManagedLedgerFactory

READS = ("read_entries", "read_entry", "replay_entries", "find_first")


class SuspendingReads:
    """Make the reads of ledgers wait; counts the reads that did."""

    def __init__(self, seed: int = 0, max_delay: float = 0.002) -> None:
        self.random = random.Random(seed)
        self.max_delay = max_delay
        self.gate: asyncio.Event | None = None
        """When set, reads wait for this event after fetching (instead of a random delay)."""
        self.suspended = 0

    async def _wait(self) -> None:
        self.suspended += 1
        if self.gate is not None:
            await self.gate.wait()
            return
        roll = self.random.random()
        await asyncio.sleep(0 if roll < 0.5 else roll * self.max_delay)

    def _wrap(
        self, real: Callable[..., Coroutine[Any, Any, Any]]
    ) -> Callable[..., Coroutine[Any, Any, Any]]:
        async def read(*args: Any, **kwargs: Any) -> Any:
            if self.gate is None:
                await self._wait()
            result = await real(*args, **kwargs)
            await self._wait()
            return result

        return read

    def install(self, ledger: ManagedLedger) -> ManagedLedger:
        """Make ``ledger``'s reads wait (once per instance); returns it."""
        if getattr(ledger, "_suspending_reads", None) is self:
            return ledger
        for name in READS:
            setattr(ledger, name, self._wrap(getattr(ledger, name)))
        setattr(ledger, "try_read_entries", lambda *args, **kwargs: None)  # noqa: B010
        setattr(ledger, "_suspending_reads", self)  # noqa: B010
        return ledger

    def install_on_broker(self, storage: LedgerStorage) -> None:
        """Every ledger a broker's file storage opens from now on gets waiting reads."""
        assert isinstance(storage, FileLedgerStorage)
        self.install_on_factory(storage.factory)

    def install_on_factory(self, factory: ManagedLedgerFactory) -> None:
        """Every ledger ``factory`` opens from now on gets waiting reads."""
        open_ledger, open_prepared = factory.open, factory.open_prepared

        def opened(*args: Any, **kwargs: Any) -> Any:
            return self.install(open_ledger(*args, **kwargs))

        def prepared(*args: Any, **kwargs: Any) -> Any:
            return self.install(open_prepared(*args, **kwargs))

        setattr(factory, "open", opened)  # noqa: B010
        setattr(factory, "open_prepared", prepared)  # noqa: B010
