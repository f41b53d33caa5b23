"""Admission control: cutting a micro-batch at exactly ``maxRecordsPerTrigger`` rows, or at
whole entries for ``maxBytesPerTrigger``, and counting rows for ``minOffsetsPerTrigger``.

Positions do not count messages (a batched entry holds many, ledger ids are not dense), so the
driver counts the rows of the entries ahead of the next batch's start (:class:`EntryCount`).
It asks the broker's ``entryCounts`` admin endpoint, which answers from the stored entries'
metadata without sending any payload; against a broker without it (or when the admin API
refuses the call) it falls back to a scanning subscription per partition that reads the
entries themselves. A cut may fall inside a batched entry: ``(ledger, entry, k)`` means
"the rows of that entry from index k on belong to the next batch". Counts are kept between
triggers, so each entry is counted once while the query runs; a restarted query recounts from
its checkpointed start.

The budget is shared across partitions in proportion to what each has available (as Spark's
Kafka source splits ``maxOffsetsPerTrigger``), the remainder going to the first partitions.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from starquake.client.asyncio import Client
from starquake.client.bulk import BulkReader, EntryCount, Position
from starquake.spark._read import QUEUE_BYTES
from starquake.spark._runtime import admin_http

log = logging.getLogger("starquake.spark")


@dataclass(slots=True)
class _Scan:
    start: Position
    reader: BulkReader | None
    counts: collections.deque[EntryCount] = field(default_factory=collections.deque)


class EntryCountsApi:
    """The broker's ``GET {topic}/entryCounts`` admin endpoint: rows per stored entry."""

    def __init__(self, admin_url: str, client_args: Mapping[str, Any], timeout: float) -> None:
        self._url = admin_url.rstrip("/")
        self._client_args = client_args
        self._http: tuple[ssl.SSLContext | None, dict[str, str]] | None = None
        self._timeout = timeout

    def fetch(self, partition: str, start: tuple[int, int], max_messages: int) -> list[EntryCount]:
        """The entries from ``start`` on until they hold ``max_messages`` rows (or all there
        are, at most the broker's per-request bound). Raises OSError (HTTPError with the
        status) when the broker does not answer."""
        domain, _, rest = partition.partition("://")
        # the start may be a position before the first entry (earliest is -1:-1): the
        # endpoint takes entry ids from 0, and the entries at or after -1 are those after 0:0
        ledger, entry = max(start[0], 0), max(start[1], 0)
        query = urllib.parse.urlencode(
            {"ledgerId": ledger, "entryId": entry, "maxMessages": max(max_messages, 1)}
        )
        path = urllib.parse.quote(rest, safe="/")
        url = f"{self._url}/admin/v2/{domain}/{path}/entryCounts?{query}"
        if self._http is None:  # a TLS file that cannot be used raises ValueError
            self._http = admin_http(self._url, self._client_args)
        context, headers = self._http
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=self._timeout, context=context) as resp:
            found = json.loads(resp.read())["entries"]
        return [EntryCount(int(ledger), int(entry), int(rows)) for ledger, entry, rows in found]


def _rows_in(count: EntryCount, start: Position, end: Position) -> int:
    """Rows of ``count``'s entry inside ``[start, end)``."""
    key = (count.ledger_id, count.entry_id)
    lo = start[2] if key == start[:2] else 0
    hi = count.rows
    if key == end[:2]:
        hi = min(hi, end[2])
    elif key > end[:2]:
        hi = 0
    return max(hi - lo, 0)


class Admission:
    """Per-partition counts of the rows ahead of each partition's next start."""

    def __init__(self, client: Client, wait: float, api: EntryCountsApi | None = None) -> None:
        self._client = client
        self._wait = wait
        self._api = api
        self._scans: dict[str, _Scan] = {}

    async def _scan(self, partition: str, start: Position) -> _Scan:
        scan = self._scans.get(partition)
        if scan is not None and scan.start == start:
            return scan
        if scan is not None and scan.reader is not None:
            await scan.reader.close()
        scan = self._scans[partition] = _Scan(start, None)
        return scan

    async def _count(
        self, partition: str, scan: _Scan, budget: int, last: tuple[int, int]
    ) -> list[EntryCount]:
        """Counts of the entries after those ``scan`` holds, until ``budget`` rows or
        the entry ``last`` (which exists)."""
        counted = (scan.counts[-1].ledger_id, scan.counts[-1].entry_id) if scan.counts else None
        if self._api is not None and scan.reader is None:
            at = (counted[0], counted[1] + 1) if counted else scan.start[:2]
            try:
                return await self._fetch(partition, at, budget, last)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                log.warning(
                    "the broker's entryCounts admin endpoint cannot be used (%s): "
                    "counting rows for maxRecordsPerTrigger by reading the entries",
                    exc,
                )
                self._api = None
        if scan.reader is None:
            at3 = (counted[0], counted[1] + 1, 0) if counted else scan.start
            scan.reader = await BulkReader.create(
                self._client,
                partition,
                at3,
                receiver_queue_size=10_000,
                wait_timeout=self._wait,
                max_queue_bytes=QUEUE_BYTES,
            )
        return await scan.reader.count_entries(budget, last)

    async def _fetch(
        self, partition: str, at: tuple[int, int], budget: int, last: tuple[int, int]
    ) -> list[EntryCount]:
        assert self._api is not None
        out: list[EntryCount] = []
        rows = 0
        while rows < budget and at <= last:
            found = await asyncio.to_thread(self._api.fetch, partition, at, budget - rows)
            found = [c for c in found if (c.ledger_id, c.entry_id) <= last]
            if not found:
                break
            out.extend(found)
            rows += sum(c.rows for c in found)
            at = (found[-1].ledger_id, found[-1].entry_id + 1)
        return out

    async def _available(
        self, partition: str, start: Position, end: Position, last: Position, budget: int
    ) -> int:
        """Rows in ``[start, end)``, counted until ``budget`` of them are known."""
        scan = await self._scan(partition, start)
        have = sum(_rows_in(c, start, end) for c in scan.counts)
        counted_to = (scan.counts[-1].ledger_id, scan.counts[-1].entry_id) if scan.counts else None
        if have < budget and (counted_to is None or counted_to < last[:2]):
            more = await self._count(partition, scan, budget - have, (last[0], last[1]))
            scan.counts.extend(more)
            have += sum(_rows_in(c, start, end) for c in more)
        return min(have, budget)

    async def admit(
        self,
        starts: Mapping[str, Position],
        ends: Mapping[str, Position],
        lasts: Mapping[str, Position | None],
        budget: int,
        advance: bool = True,
    ) -> dict[str, Position]:
        """Ends that admit at most ``budget`` rows in all (every row if fewer are there);
        ``advance=False`` when :meth:`admit_bytes` cuts them further (it moves on)."""
        cut = dict(ends)
        live = [p for p in sorted(ends) if starts[p] < ends[p] and lasts.get(p) is not None]
        available: dict[str, int] = {}
        for p in live:
            last = lasts[p]
            assert last is not None
            available[p] = await self._available(p, starts[p], ends[p], last, budget)
        total = sum(available.values())
        if total <= budget:
            take = available
        else:
            take = {p: budget * n // total for p, n in available.items()}
            spare = budget - sum(take.values())
            for p in live:
                extra = min(spare, available[p] - take[p])
                take[p] += extra
                spare -= extra
        for p in live:
            if take[p] < available[p] or available[p] == budget:
                cut[p] = self._cut(p, starts[p], ends[p], take[p])
            if advance:
                self._advance(p, cut[p])
        return cut

    async def count(
        self,
        starts: Mapping[str, Position],
        ends: Mapping[str, Position],
        lasts: Mapping[str, Position | None],
        budget: int,
    ) -> int:
        """Rows in the ranges ``[starts, ends)``, counted until ``budget`` of them are known."""
        total = 0
        for p in sorted(ends):
            last = lasts.get(p)
            if total >= budget or last is None or not starts[p] < ends[p]:
                continue
            total += await self._available(p, starts[p], ends[p], last, budget - total)
        return total

    async def _sized(
        self, partition: str, start: Position, end: Position, last: Position, budget: int
    ) -> list[EntryCount]:
        """The entries with rows in ``[start, end)``, counted until they hold ``budget`` bytes
        (their sizes are known only from reading them: no entryCounts endpoint here)."""
        scan = await self._scan(partition, start)
        while True:
            inside = [c for c in scan.counts if _rows_in(c, start, end) > 0]
            counted = (scan.counts[-1].ledger_id, scan.counts[-1].entry_id) if scan.counts else None
            if sum(c.size for c in inside) >= budget or (
                counted is not None and (counted >= last[:2] or counted >= end[:2])
            ):
                return inside
            more = await self._count(partition, scan, 1000, (last[0], last[1]))
            if not more:
                return inside
            scan.counts.extend(more)

    async def admit_bytes(
        self,
        starts: Mapping[str, Position],
        ends: Mapping[str, Position],
        lasts: Mapping[str, Position | None],
        budget: int,
    ) -> dict[str, Position]:
        """Ends that admit whole entries of at most ``budget`` stored bytes in all, shared in
        proportion to what each partition has (at least one entry, so that a batch makes
        progress when one entry is larger than the budget)."""
        cut = dict(ends)
        entries: dict[str, list[EntryCount]] = {}
        for p in sorted(ends):
            last = lasts.get(p)
            if last is not None and starts[p] < ends[p]:
                entries[p] = await self._sized(p, starts[p], ends[p], last, budget)
        sizes = {p: sum(c.size for c in found) for p, found in entries.items()}
        total = sum(sizes.values())
        taken = {p: len(found) for p, found in entries.items()}
        for p, found in entries.items() if total > budget else ():
            share, used, k = budget * sizes[p] // total, 0, 0
            while k < len(found) and used + found[k].size <= share:
                used += found[k].size
                k += 1
            taken[p] = k
        if total > budget and not any(taken.values()):
            taken[next(p for p, found in entries.items() if found)] = 1
        for p, found in entries.items():
            k = taken[p]
            if k < len(found):
                after = found[k]
                lo = starts[p][2] if (after.ledger_id, after.entry_id) == starts[p][:2] else 0
                cut[p] = min(ends[p], (after.ledger_id, after.entry_id, lo))
            self._advance(p, cut[p])
        return cut

    def _cut(self, partition: str, start: Position, end: Position, rows: int) -> Position:
        """The position after the first ``rows`` rows from ``start``."""
        counts = list(self._scans[partition].counts)
        remaining = rows
        for i, count in enumerate(counts):
            here = _rows_in(count, start, end)
            if here == 0:
                continue
            lo = start[2] if (count.ledger_id, count.entry_id) == start[:2] else 0
            if remaining < here:
                if remaining == 0:
                    return (count.ledger_id, count.entry_id, lo)
                return (count.ledger_id, count.entry_id, lo + remaining)
            remaining -= here
            if remaining == 0:
                for following in counts[i + 1 :]:
                    return min(end, (following.ledger_id, following.entry_id, 0))
                return min(end, (count.ledger_id, count.entry_id + 1, 0))
        return end

    def _advance(self, partition: str, new_start: Position) -> None:
        """The next batch starts at ``new_start``: forget the counts before it."""
        scan = self._scans.get(partition)
        if scan is None:
            return
        while scan.counts and (scan.counts[0].ledger_id, scan.counts[0].entry_id) < new_start[:2]:
            scan.counts.popleft()
        scan.start = new_start

    async def close(self) -> None:
        for scan in self._scans.values():
            if scan.reader is not None:
                await scan.reader.close()
        self._scans.clear()
