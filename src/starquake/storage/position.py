"""Value types of the storage engine: positions, entries, ledger info and errors."""

from __future__ import annotations

from typing import Literal, NamedTuple

__all__ = [
    "EARLIEST",
    "LATEST",
    "Entry",
    "InitialPosition",
    "LedgerBusyError",
    "LedgerFencedError",
    "LedgerInfo",
    "Position",
    "StorageError",
]


class Position(NamedTuple):
    """Address of an entry: ordered by ``(ledger_id, entry_id)``.

    ``(L, -1)`` means "just before the first entry of ledger L".
    """

    ledger_id: int
    entry_id: int

    def __str__(self) -> str:
        return f"{self.ledger_id}:{self.entry_id}"


EARLIEST: Position = Position(-1, -1)
"""Sorts before every real entry."""

LATEST: Position = Position(2**63 - 1, 2**63 - 1)
"""Sorts after every real entry (Pulsar's ``MessageId.latest``)."""

InitialPosition = Literal["latest", "earliest"]


class Entry(NamedTuple):
    """One stored entry: its position and its opaque bytes."""

    position: Position
    data: bytes | memoryview


class LedgerInfo(NamedTuple):
    """Statistics of one ledger of a managed ledger."""

    ledger_id: int
    entries: int
    size_bytes: int
    created_at: float


class RetentionLimits(NamedTuple):
    """How much consumed data a managed ledger keeps (Pulsar's retention policy).

    A consumed ledger is deleted when it was closed at least ``seconds`` ago, or when the
    ledgers kept would otherwise exceed ``size_bytes``. A negative limit is no limit: with
    both negative, consumed ledgers are kept forever; with both 0, they go at once.
    """

    seconds: float
    size_bytes: int


class StorageError(Exception):
    """Any failure of the storage engine (I/O, corruption, misuse)."""


class LedgerFencedError(StorageError):
    """The managed ledger lost a commit; it refuses appends until it is reopened."""


class LedgerBusyError(StorageError):
    """The managed ledger still has writes in flight from a previous instance; retry later."""


class InvalidPositionError(StorageError):
    """A position that names no stored entry (e.g. an acknowledgment of an unwritten entry)."""
