"""Appends that wait until they are durable, for the transaction log and the topics' markers.

A topic's group commit (or its self-committing ledger) reports the new last confirmed position
to the topic, which hands it to :meth:`DurableAppends.on_committed`; each waiter whose
position is at or before it is then released. When the ledger cannot persist any more, every
waiter fails.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from starquake.broker.errors import PersistenceError
from starquake.storage import ManagedLedger, Position, StorageError


class Kicker(Protocol):
    """The group commit: told that something waits to be committed."""

    def kick(self) -> None:
        """Start a commit soon."""


class DurableAppends:
    """Appends to one managed ledger awaited until durable."""

    def __init__(self, ledger: ManagedLedger, committer: Kicker) -> None:
        self._ledger = ledger
        self._committer = committer
        self._waiters: list[tuple[Position, asyncio.Future[None]]] = []

    def append(self, data: bytes) -> tuple[Position, asyncio.Future[None]]:
        """Append ``data`` now; returns its position and a future done once it is durable."""
        try:
            position = self._ledger.append(data)
        except StorageError as exc:
            raise PersistenceError(f"Cannot store: {exc}") from exc
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._ledger.last_confirmed >= position:
            done.set_result(None)
        else:
            self._waiters.append((position, done))
            self._committer.kick()
        return position, done

    async def append_durable(self, data: bytes) -> Position:
        """Append ``data`` and return its position once it is durable."""
        position, done = self.append(data)
        await done
        return position

    def on_committed(self, last: Position) -> None:
        """Entries up to ``last`` are durable: release their waiters."""
        if not self._waiters:
            return
        waiting = []
        for position, done in self._waiters:
            if position <= last:
                if not done.done():
                    done.set_result(None)
            else:
                waiting.append((position, done))
        self._waiters = waiting

    def on_commit_failed(self, exc: BaseException) -> None:
        """The ledger cannot persist: every waiter fails."""
        waiters, self._waiters = self._waiters, []
        for _, done in waiters:
            if not done.done():
                done.set_exception(PersistenceError(f"Cannot store: {exc}"))
