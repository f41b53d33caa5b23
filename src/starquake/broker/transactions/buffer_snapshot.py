"""Snapshots of a topic's transaction buffer, so that a load reads only the entries after one.

As Pulsar's ``__transaction_buffer_snapshot``, a snapshot holds the buffer's state as of one
position of the topic: the open transactions with their entries, the hidden entries (aborted
messages, markers) and the recently ended transactions. It is taken at the end of a
transaction once ``transactionBufferSnapshotMaxTransactionCount`` (1000) transactions ended
since the last one or ``transactionBufferSnapshotMinTimeInMillis`` (5000) passed, never while
an end is under way (its marker could be stored but not applied yet). It is kept as a file in
the topic's managed-ledger directory (written to a temporary file, synced, then renamed): it
goes with the topic, and a missing or unreadable snapshot only means a full replay.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from starquake.storage import Position

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "transaction-buffer-snapshot.json"
MAX_TRANSACTION_COUNT = 1000
"""``transactionBufferSnapshotMaxTransactionCount``: ended transactions between snapshots."""
MIN_TIME_SECONDS = 5.0
"""``transactionBufferSnapshotMinTimeInMillis``: at least this long between snapshots (or
the count above)."""

State = tuple[dict[tuple[int, int], list[Position]], set[Position], dict[tuple[int, int], bool]]
"""open, hidden, ended (as the buffer keeps them)."""


def encode(position: Position, state: State) -> bytes:
    """The snapshot of ``state`` as of ``position`` (later positions are left out: their
    entries are read again at the next load)."""
    open_, hidden, ended = state
    return json.dumps(
        {
            "position": list(position),
            "open": [
                [txn[0], txn[1], kept]
                for txn, positions in open_.items()
                if (kept := [list(p) for p in positions if p <= position])
            ],
            "hidden": [list(p) for p in sorted(hidden) if p <= position],
            "ended": [[txn[0], txn[1], commit] for txn, commit in ended.items()],
        },
        separators=(",", ":"),
    ).encode()


def write(directory: Path, data: bytes) -> None:
    """Blocking: store ``data`` as the directory's snapshot, durably."""
    path = directory / SNAPSHOT_FILE
    temporary = path.with_suffix(".tmp")
    with open(temporary, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temporary, path)
    descriptor = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def read(directory: Path) -> tuple[Position, State] | None:
    """Blocking: the directory's snapshot (None: none, or unreadable, logged)."""
    path = directory / SNAPSHOT_FILE
    try:
        data: dict[str, Any] = json.loads(path.read_bytes())
        open_ = {
            (int(m), int(least)): [Position(*p) for p in positions]
            for m, least, positions in data["open"]
        }
        hidden = {Position(*p) for p in data["hidden"]}
        ended = {(int(m), int(least)): bool(c) for m, least, c in data["ended"]}
        return Position(*data["position"]), (open_, hidden, ended)
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        log.error(
            "transaction buffer snapshot %s unreadable (a full replay instead): %s", path, exc
        )
        with contextlib.suppress(OSError):
            path.unlink()
        return None
