"""The stored metadata of a managed ledger in JetStream: its ledger list and its cursors' paths.

One value per managed ledger, at ``/managed-ledgers/<encoded name>`` in the versioned
metadata store, compact JSON::

    {"ledgers": [{"id": 12, "n": 500, "b": 52000, "t": 1700000000.5,
                  "s": 1, "f": 0, "i": [0, 40, 100, 3, ...]}, ...],
     "purge": [[7, 0], [9, 1]]}

``n`` entries, ``b`` bytes (each entry with its 4-byte length), ``t`` creation time, ``s``
sealed, ``f`` sealed by a fence (its subject keeps the fence when trimmed), ``i`` the record
index of a sealed ledger as pairs (first entry id, stream sequence), each the difference from
the previous pair. The open ledger (the last, ``s`` 0) has no index: whoever opens the managed
ledger next fences it and rebuilds its index by scanning. ``purge`` lists trimmed ledgers whose
records may still be stored (trimming purges first, then writes the list without them), each
with its ``f``. A
durable cursor's state is the value at ``/managed-ledgers/<encoded name>/<encoded cursor>``,
as the file backend stores it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from starquake.cluster.js_ledgers import LedgerIndex
from starquake.storage import StorageError

__all__ = ["LEDGERS_ROOT", "ManagedLedgerInfo", "StoredLedger", "cursor_path", "ledger_path"]


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


@dataclass
class ManagedLedgerInfo:
    """The ledger list of a managed ledger and the trimmed ledgers still to purge."""

    ledgers: list[StoredLedger] = field(default_factory=list)
    purge: list[tuple[int, bool]] = field(default_factory=list)

    def encode(self) -> bytes:
        docs = [_encode_ledger(ledger) for ledger in self.ledgers]
        doc: dict[str, Any] = {"ledgers": docs}
        if self.purge:
            doc["purge"] = [[lid, int(fenced)] for lid, fenced in self.purge]
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, raw: bytes) -> ManagedLedgerInfo:
        try:
            doc = json.loads(raw)
            ledgers = [_decode_ledger(item) for item in doc["ledgers"]]
            purge = [(int(lid), bool(fenced)) for lid, fenced in doc.get("purge", [])]
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise StorageError(f"damaged managed-ledger metadata: {exc}") from exc
        return cls(ledgers, purge)


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
