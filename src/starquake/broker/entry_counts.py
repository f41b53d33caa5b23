"""How many rows each stored entry holds, without sending any payload.

A reader that plans by rows (the Spark source's ``maxRecordsPerTrigger``) needs the message
count of every entry ahead of it: a batched entry holds ``num_messages_in_batch`` messages,
and the positions (ledger, entry) say nothing about it. The broker reads the entries'
metadata from its managed ledger and answers only ``[ledgerId, entryId, rows]`` triples.
This is a Starquake extension of the admin API: Pulsar has no such endpoint.
"""

from __future__ import annotations

import asyncio

from starquake.broker.topic import PersistentTopic
from starquake.protocol.errors import ProtocolError
from starquake.protocol.framing import entry_metadata, entry_rows

__all__ = ["MAX_ENTRIES", "entry_counts"]

MAX_ENTRIES = 10_000  # per request
_READ_ENTRIES = 256  # per read of the managed ledger (the loop runs others in between)
_READ_BYTES = 8 * 1024 * 1024


async def entry_counts(
    topic: PersistentTopic, start: tuple[int, int], max_messages: int, max_entries: int
) -> list[list[int]]:
    """``[ledgerId, entryId, rows]`` of the entries from ``start`` on, until they hold
    ``max_messages`` rows, ``max_entries`` entries were counted or the last one is reached.

    A chunk counts 1 row on its first chunk and 0 on the others; an entry whose metadata
    does not parse counts 1 (as dispatch counts it)."""
    out: list[list[int]] = []
    rows = 0
    at = start
    limit = min(max_entries, MAX_ENTRIES)
    while rows < max_messages and len(out) < limit:
        entries = await topic.ledger.read_entries(
            at, min(_READ_ENTRIES, limit - len(out)), _READ_BYTES
        )
        if not entries:
            break
        for entry in entries:
            try:
                count = entry_rows(entry_metadata(entry.data))
            except ProtocolError:
                count = 1
            position = entry.position
            out.append([position.ledger_id, position.entry_id, count])
            rows += count
            if rows >= max_messages:
                break
        last = entries[-1].position
        at = (last.ledger_id, last.entry_id + 1)
        await asyncio.sleep(0)  # one chunk at a time: the loop serves others in between
    return out
