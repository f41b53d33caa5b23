"""A topic's compacted view: the open compacted ledger and the horizon it covers.

Entries are served under their original positions. The view is immutable; a new compaction
installs a new view and closes the old one (on the event loop, where readers use it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from starquake.broker.entry_info import NONE_KEY, EntryInfo, LastMessage, info_of, last_message_at
from starquake.protocol.errors import ProtocolError
from starquake.protocol.framing import entry_metadata
from starquake.storage import Entry, Position
from starquake.storage.compacted_store import CompactedLedgerReader

__all__ = ["CompactedEntry", "CompactedView", "compacted_entry_info"]

log = logging.getLogger(__name__)

_MIN_READ = 64  # entries read at once while passing over acknowledged ones


class CompactedEntry(Entry):
    """An entry served from a compacted view: its batch may hold fewer messages than the
    entry stored at the same position in the managed ledger."""

    __slots__ = ()


def compacted_entry_info(entry: Entry) -> EntryInfo:
    """Dispatch facts of a compacted entry, parsed from its own bytes (the topic's cache has
    those of the stored entry at the same position)."""
    try:
        return info_of(entry_metadata(entry.data))
    except ProtocolError:
        return EntryInfo(1, NONE_KEY, 0, 0, False)


class CompactedView:
    """The compacted ledger of a topic, readable from the event loop."""

    def __init__(self, ledger: CompactedLedgerReader) -> None:
        self.ledger = ledger
        self._damage_logged = False

    @property
    def horizon(self) -> Position:
        """The last position of the topic's log the view covers."""
        return self.ledger.horizon

    @property
    def ledger_id(self) -> int:
        """The id of the compacted ledger."""
        return self.ledger.ledger_id

    @property
    def entries(self) -> int:
        """How many entries the compacted ledger holds."""
        return self.ledger.entries

    @property
    def size(self) -> int:
        """The compacted ledger's size in bytes."""
        return self.ledger.size

    async def read_from(
        self,
        position: Position,
        max_entries: int,
        skip: Callable[[Position], bool] | None = None,
        max_scan: int = 10_000,
    ) -> tuple[list[Entry], Position | None]:
        """Up to ``max_entries`` entries at or after ``position`` (those ``skip`` accepts are
        passed over, looking at ``max_scan`` entries at most), and where to continue: at or
        after the position returned, None at the end."""
        ledger = self.ledger
        last = ledger.last
        budget = max(max_scan, max_entries)
        out: list[Entry] = []
        at: Position | None = position
        while at is not None and budget > 0 and len(out) < max_entries:
            count = min(max(max_entries - len(out), _MIN_READ), budget)
            records = await ledger.read_from(at, count)
            if not records:
                return out, None
            for record in records:
                if len(out) >= max_entries or budget <= 0:
                    return out, record.position
                budget -= 1
                at = None if last is None or record.position >= last else _after(record.position)
                if record.data is None:
                    self._damaged(record.position)
                elif skip is None or not skip(record.position):
                    out.append(CompactedEntry(record.position, record.data))
        return out, at

    def _damaged(self, position: Position) -> None:
        if not self._damage_logged:
            self._damage_logged = True
            log.error(
                "compacted ledger %s: the entry of %s is damaged (checksum mismatch); damaged "
                "entries are skipped",
                self.ledger,
                position,
            )

    async def last_message(self) -> LastMessage | None:
        """The last entry of the view and its last batch index (-1: not batched), or None."""
        last = self.ledger.last
        if last is None:
            return None
        records = await self.ledger.read_from(last, 1)
        if not records:
            return None
        return last_message_at(records[0].position, records[0].data)

    def close(self) -> None:
        """Close the compacted ledger."""
        self.ledger.close()

    def __repr__(self) -> str:
        return f"CompactedView({self.ledger!r})"


def _after(position: Position) -> Position:
    """The first position that can follow ``position``."""
    return Position(position.ledger_id, position.entry_id + 1)
