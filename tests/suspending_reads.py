"""Reads of a real file-backed managed ledger made to wait, as a remote backend's do.

:class:`SuspendingReads` replaces, on one :class:`~starquake.storage.FileManagedLedger`
instance, the contract's read coroutines (``read_entries``, ``read_entry``, ``replay_entries``,
``find_first``) by ones that wait (``asyncio.sleep`` of 0 or a small random delay) before the
real read and again after it, or until a gate opens: the data is fetched at one moment and
handed over later, and whatever the broker does in between (acks, seeks, consumers leaving)
happens while the read is in flight. Everything else is the real ledger. Cursors of the
ledger read through the same instance and find nothing at hand (``try_read_entries`` answers
None), so their reads wait too. The compacted ledgers a broker's storage writes or opens get
waiting reads as well (:meth:`SuspendingReads.install_on_compacted`), as a JetStream one's do.
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
        self.compacted_reads = 0
        """Reads of compacted ledgers (each waits too)."""

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

    def install_on_compacted(self, storage: LedgerStorage) -> None:
        """Every compacted ledger ``storage`` opens or writes from now on reads waiting."""
        store = storage.compacted_ledgers
        open_committed, create = store.open_committed, store.create

        async def opened(*args: Any, **kwargs: Any) -> Any:
            reader = await open_committed(*args, **kwargs)
            return self._compacted(reader) if reader is not None else None

        async def created(*args: Any, **kwargs: Any) -> Any:
            builder = await create(*args, **kwargs)
            finish = builder.finish

            async def finished(*more: Any, **options: Any) -> Any:
                return self._compacted(await finish(*more, **options))

            setattr(builder, "finish", finished)  # noqa: B010
            return builder

        setattr(store, "open_committed", opened)  # noqa: B010
        setattr(store, "create", created)  # noqa: B010

    def _compacted(self, reader: Any) -> Any:
        waiting = self._wrap(reader.read_from)

        async def read_from(*args: Any, **kwargs: Any) -> Any:
            self.compacted_reads += 1
            return await waiting(*args, **kwargs)

        setattr(reader, "read_from", read_from)  # noqa: B010
        reopen = reader.reopen

        async def reopened() -> Any:
            return self._compacted(await reopen())

        setattr(reader, "reopen", reopened)  # noqa: B010
        return reader
