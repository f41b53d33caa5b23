"""The stored metadata of a managed ledger in JetStream: its ledger list and its cursors' paths.

One value per managed ledger, at ``/managed-ledgers/<encoded name>`` in the versioned
metadata store, compact JSON::

    {"ledgers": [{"id": 12, "n": 500, "b": 52000, "t": 1700000000.5,
                  "s": 1, "f": 0, "i": [0, 40, 100, 3, ...]}, ...],
     "purge": [[7, 0], [9, 1]],
     "c": {"id": 31, "h": [12, 499], "n": 40, "b": 4000, "r": [0, 77, 12, 3, ...]}}

``n`` entries, ``b`` bytes (each entry with its 4-byte length), ``t`` creation time, ``s``
sealed, ``f`` sealed by a fence (its subject keeps the fence when trimmed), ``i`` the record
index of a sealed ledger as pairs (first entry id, stream sequence), each the difference from
the previous pair. The open ledger (the last, ``s`` 0) has no index: whoever opens the managed
ledger next fences it and rebuilds its index by scanning. ``purge`` lists trimmed ledgers whose
records may still be stored (trimming purges first, then writes the list without them), each
with its ``f``. ``c`` is the committed compacted ledger (a ledger of the same streams): its
id, horizon, entries, bytes and last entry's original position (``l``), and per record its
first entry id, stream sequence and first original position (ledger id, entry id), so that
any owner reads it without a scan. A
durable cursor's state is the value at ``/managed-ledgers/<encoded name>/<encoded cursor>``,
as the file backend stores it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from starquake.cluster.js_ledgers import LedgerIndex
from starquake.storage import Position, StorageError

__all__ = [
    "LEDGERS_ROOT",
    "CompactedInfo",
    "ManagedLedgerInfo",
    "StoredLedger",
    "cursor_path",
    "ledger_path",
]


LEDGERS_ROOT = "/managed-ledgers"
"""Every managed ledger's ledger list is one level below this path, its cursors two."""


def ledger_path(name: str) -> str:
    """The metadata path of managed ledger ``name``'s ledger list."""
    return LEDGERS_ROOT + "/" + quote(name, safe="")


def cursor_path(name: str, cursor: str) -> str:
    """The metadata path of the durable cursor ``cursor`` of managed ledger ``name``."""
    return f"{ledger_path(name)}/{quote(cursor, safe='')}"


@dataclass
class StoredLedger:
    """One ledger of the list."""

    ledger_id: int
    entries: int
    size: int
    created_at: float
    sealed: bool
    fenced: bool = False
    index: LedgerIndex | None = None


@dataclass(frozen=True)
class CompactedInfo:
    """A committed compacted ledger: what it covers and where its records are. ``records``:
    per record, its first entry id, its stream sequence and its first entry's original
    position."""

    ledger_id: int
    horizon: Position
    entries: int
    size: int
    last: Position | None = None
    records: tuple[tuple[int, int, Position], ...] = ()

    def encode(self) -> dict[str, Any]:
        flat: list[int] = []
        for first, sequence, position in self.records:
            flat += (first, sequence, position.ledger_id, position.entry_id)
        doc: dict[str, Any] = {
            "id": self.ledger_id,
            "h": list(self.horizon),
            "n": self.entries,
            "b": self.size,
            "r": flat,
        }
        if self.last is not None:
            doc["l"] = list(self.last)
        return doc

    @classmethod
    def decode(cls, doc: dict[str, Any]) -> CompactedInfo:
        flat = [int(v) for v in doc["r"]]
        records = tuple(
            (flat[k], flat[k + 1], Position(flat[k + 2], flat[k + 3]))
            for k in range(0, len(flat) - 3, 4)
        )
        horizon = Position(int(doc["h"][0]), int(doc["h"][1]))
        last = Position(int(doc["l"][0]), int(doc["l"][1])) if "l" in doc else None
        return cls(int(doc["id"]), horizon, int(doc["n"]), int(doc["b"]), last, records)


@dataclass
class ManagedLedgerInfo:
    """The ledger list of a managed ledger, the trimmed ledgers still to purge and the
    committed compacted ledger."""

    ledgers: list[StoredLedger] = field(default_factory=list)
    purge: list[tuple[int, bool]] = field(default_factory=list)
    compacted: CompactedInfo | None = None

    def encode(self) -> bytes:
        docs = [_encode_ledger(ledger) for ledger in self.ledgers]
        doc: dict[str, Any] = {"ledgers": docs}
        if self.purge:
            doc["purge"] = [[lid, int(fenced)] for lid, fenced in self.purge]
        if self.compacted is not None:
            doc["c"] = self.compacted.encode()
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ManagedLedgerInfo:
        try:
            doc = json.loads(raw)
            ledgers = [_decode_ledger(item) for item in doc["ledgers"]]
            purge = [(int(lid), bool(fenced)) for lid, fenced in doc.get("purge", [])]
            compacted = CompactedInfo.decode(doc["c"]) if "c" in doc else None
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise StorageError(f"damaged managed-ledger metadata: {exc}") from exc
        return cls(ledgers, purge, compacted)


def _encode_ledger(ledger: StoredLedger) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "id": ledger.ledger_id,
        "n": ledger.entries,
        "b": ledger.size,
        "t": ledger.created_at,
        "s": int(ledger.sealed),
        "f": int(ledger.fenced),
    }
    index = ledger.index
    if ledger.sealed and index is not None:
        flat: list[int] = []
        first = sequence = 0
        for f, s in zip(index.firsts, index.sequences, strict=True):
            flat += (f - first, s - sequence)
            first, sequence = f, s
        doc["i"] = flat
    return doc


def _decode_ledger(doc: dict[str, Any]) -> StoredLedger:
    ledger = StoredLedger(
        int(doc["id"]),
        int(doc["n"]),
        int(doc["b"]),
        float(doc["t"]),
        bool(doc["s"]),
        bool(doc.get("f", 0)),
    )
    if "i" in doc:
        index = LedgerIndex()
        flat = doc["i"]
        first = sequence = 0
        for k in range(0, len(flat), 2):
            first += int(flat[k])
            sequence += int(flat[k + 1])
            index.firsts.append(first)
            index.sequences.append(sequence)
        index.entries = ledger.entries
        index.size = ledger.size
        index.last_sequence = sequence
        ledger.index = index
    return ledger
