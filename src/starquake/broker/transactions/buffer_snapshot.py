"""Snapshots of a topic's transaction buffer, so that a load reads only the entries after one.

As Pulsar's ``__transaction_buffer_snapshot``, a snapshot holds the buffer's state as of one
position of the topic: the open transactions with their entries, the hidden entries (aborted
messages, markers) and the recently ended transactions. It is taken at the end of a
transaction once ``transactionBufferSnapshotMaxTransactionCount`` (1000) transactions ended
since the last one or ``transactionBufferSnapshotMinTimeInMillis`` (5000) passed (the broker
settings of those names), never while an end is under way (its marker could be stored but not
applied yet). It is encoded and decoded off the event loop.

Where it is kept follows the topic's storage: on files, as a file in the topic's managed-ledger
directory (written to a temporary file, synced, then renamed); in cluster mode, in the
versioned metadata store on JetStream (the managed ledger's ``txn_snapshots``), where
whichever broker owns the topic next finds it. Either way it is deleted with the topic, and a
missing or unreadable snapshot only means a full replay.

Its form is compact JSON: positions of one ledger are given as the differences between
successive entry ids, transaction ids as the difference from the previous one's, so that the
thousands of markers and ended transactions a busy topic remembers stay small.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Iterable
from itertools import groupby
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from starquake.storage import ManagedLedger, Position, StorageError
from starquake.storage.segment import fsync_dir, write_file

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "transaction-buffer-snapshot.json"
MAX_TRANSACTION_COUNT = 1000
"""``transactionBufferSnapshotMaxTransactionCount``'s default: ended transactions between
snapshots."""
MIN_TIME_SECONDS = 5.0
"""``transactionBufferSnapshotMinTimeInMillis``'s default: at least this long between
snapshots (or the count above)."""

TxnKey = tuple[int, int]
State = tuple[dict[TxnKey, list[Position]], set[Position], dict[TxnKey, bool]]
"""open, hidden, ended (as the buffer keeps them)."""


class SnapshotStore(Protocol):
    """Where one topic's snapshot is kept."""

    @property
    def where(self) -> str:
        """Where it is kept, for logs."""

    async def read(self) -> bytes | None:
        """The stored snapshot (None: none); OSError or StorageError when unreachable."""

    async def write(self, data: bytes) -> None:
        """Store ``data`` durably in place of the last one; OSError or StorageError."""


@runtime_checkable
class KeepsSnapshots(Protocol):
    """A managed ledger that keeps its topic's snapshot itself (in cluster mode)."""

    @property
    def txn_snapshots(self) -> SnapshotStore:
        """Its snapshot's store."""


class FileSnapshotStore:
    """The snapshot as a file of the managed ledger's directory."""

    def __init__(self, directory: Path) -> None:
        self._directory = directory

    @property
    def where(self) -> str:
        """The file's path, for logs."""
        return str(self._directory / SNAPSHOT_FILE)

    async def read(self) -> bytes | None:
        """The stored snapshot (None: none)."""
        try:
            return await asyncio.to_thread((self._directory / SNAPSHOT_FILE).read_bytes)
        except FileNotFoundError:
            return None

    async def write(self, data: bytes) -> None:
        """Store ``data`` (a temporary file, synced, then renamed over the last one)."""
        await asyncio.to_thread(_write_file, self._directory, data)

    def discard(self) -> None:
        """Blocking: remove an unreadable snapshot."""
        with contextlib.suppress(OSError):
            (self._directory / SNAPSHOT_FILE).unlink()


def store_of(ledger: ManagedLedger) -> SnapshotStore:
    """Where ``ledger``'s topic keeps its snapshot."""
    if isinstance(ledger, KeepsSnapshots):
        return ledger.txn_snapshots
    return FileSnapshotStore(ledger.directory)


def _write_file(directory: Path, data: bytes) -> None:
    path = directory / SNAPSHOT_FILE
    temporary = path.with_suffix(".tmp")
    write_file(temporary, data)
    os.replace(temporary, path)
    fsync_dir(directory)


# --- the form ---------------------------------------------------------------------------------


def _positions(positions: Iterable[Position]) -> list[Any]:
    """Sorted ``positions`` as ``[ledger id, [entry id, difference, difference, ...]], ...``."""
    out: list[Any] = []
    for ledger_id, group in groupby(sorted(positions), key=lambda p: p.ledger_id):
        previous = 0
        steps = []
        for position in group:
            steps.append(position.entry_id - previous)
            previous = position.entry_id
        out.append([ledger_id, steps])
    return out


def _positions_of(doc: list[Any]) -> list[Position]:
    out = []
    for ledger_id, steps in doc:
        entry_id = 0
        for step in steps:
            entry_id += int(step)
            out.append(Position(int(ledger_id), entry_id))
    return out


def encode(position: Position, state: State) -> bytes:
    """The snapshot of ``state`` as of ``position`` (later positions are left out: their
    entries are read again at the next load)."""
    open_, hidden, ended = state
    ended_flat: list[int] = []
    previous = (0, 0)
    for txn, commit in ended.items():  # in the order they ended: the oldest is forgotten first
        ended_flat += (txn[0] - previous[0], txn[1] - previous[1], int(commit))
        previous = txn
    return json.dumps(
        {
            "p": list(position),
            "o": [
                [txn[0], txn[1], _positions(kept)]
                for txn, positions in open_.items()
                if (kept := [p for p in positions if p <= position])
            ],
            "h": _positions(p for p in hidden if p <= position),
            "e": ended_flat,
        },
        separators=(",", ":"),
    ).encode()


def decode(data: bytes) -> tuple[Position, State]:
    """The position and state of a snapshot; ValueError, KeyError or TypeError if damaged."""
    doc: dict[str, Any] = json.loads(data)
    open_ = {(int(m), int(least)): _positions_of(kept) for m, least, kept in doc["o"]}
    hidden = set(_positions_of(doc["h"]))
    flat = [int(v) for v in doc["e"]]
    if len(flat) % 3:
        raise ValueError("ended transactions cut short")
    ended: dict[TxnKey, bool] = {}
    most = least = 0
    for k in range(0, len(flat), 3):
        most, least = most + flat[k], least + flat[k + 1]
        ended[(most, least)] = bool(flat[k + 2])
    return Position(*(int(v) for v in doc["p"])), (open_, hidden, ended)


async def read(store: SnapshotStore) -> tuple[Position, State] | None:
    """The stored snapshot (None: none, unreachable or unreadable, logged)."""
    try:
        data = await store.read()
    except (OSError, StorageError) as exc:  # a full replay is always right
        log.warning("transaction buffer snapshot %s not read (a full replay): %s", store.where, exc)
        return None
    if data is None:
        return None
    try:
        return await asyncio.to_thread(decode, data)  # tens of ms for a large one
    except (ValueError, KeyError, TypeError) as exc:
        log.error("transaction buffer snapshot %s unreadable (a full replay): %s", store.where, exc)
        if isinstance(store, FileSnapshotStore):
            await asyncio.to_thread(store.discard)
        return None
