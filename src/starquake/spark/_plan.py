"""Planning reads: which partitions, which positions, which ranges (reading them: ``_read``).

Positions are ``(ledger, entry, batch index)`` (see :mod:`starquake.client.bulk`). A range
``[start, end)`` of one partition becomes one Spark input partition (or several with
``minPartitions``); offsets in checkpoints are JSON objects mapping each partition's full
topic name to ``[ledger, entry, batch]``, the position of the next message to read.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import re
from collections.abc import Mapping
from typing import Any

from pyspark.sql.datasource import InputPartition

from starquake.client import MessageId
from starquake.client.asyncio import Client
from starquake.client.bulk import EARLIEST, BulkReader, Position
from starquake.client.exceptions import NotConnected, PulsarException
from starquake.client.topics import base_topic, namespace_of
from starquake.spark._offsets import is_latest_sentinel
from starquake.spark._options import ReadOptions, SourceTarget, StartSpec

log = logging.getLogger("starquake.spark")

# A range longer than this many entries (in its end ledger, where entry ids are known to be
# dense) is read by several tasks.
MAX_ENTRIES_PER_SPLIT = 50_000


class PulsarSourceError(RuntimeError):
    """A read cannot be planned: a missing topic, an unreachable broker, a bad position."""

    __module__ = "starquake.spark"  # as users import it


class RangePartition(InputPartition):
    """Spark input partition: messages ``[start, end)`` of one topic partition."""

    def __init__(self, topic: str, start: Position, end: Position) -> None:
        super().__init__((topic, start, end))
        self.topic = topic
        self.start = start
        self.end = end


def next_after(last: Position) -> Position:
    """The position after the entry holding ``last`` (the end of everything up to it)."""
    return (last[0], last[1] + 1, 0)


def encode_offsets(positions: Mapping[str, Position]) -> dict[str, list[int]]:
    return {name: list(positions[name]) for name in sorted(positions)}


def decode_offsets(offsets: Mapping[str, Any] | None) -> dict[str, Position]:
    decoded: dict[str, Position] = {}
    for name, value in (offsets or {}).items():
        ledger, entry, batch = (int(v) for v in value)
        decoded[str(name)] = (ledger, entry, batch)
    return decoded


async def resolve_partitions(client: Client, opts: ReadOptions | SourceTarget) -> list[str]:
    """Every partition (or non-partitioned topic) the options name, sorted."""
    names: list[str] = []
    if opts.pattern is not None:
        regex = re.compile(opts.pattern)
        rest = opts.pattern.partition("://")[2].split("/")
        found = await client.get_topics_of_namespace(f"{rest[0]}/{rest[1]}")
        for name in found:
            base = base_topic(name)
            if regex.fullmatch(base) or regex.fullmatch(name):
                names.append(name)
        return sorted(set(names))
    listed: dict[str, set[str]] = {}
    for topic in opts.topics:
        parts = await client.get_topic_partitions(topic)
        if parts == [topic]:
            namespace = namespace_of(topic)
            if namespace not in listed:
                listed[namespace] = set(await client.get_topics_of_namespace(namespace))
            if topic not in listed[namespace]:
                raise PulsarSourceError(f"Topic {topic} does not exist")
        names.extend(parts)
    return sorted(set(names))


class Probes:
    """One reading-nothing subscription per partition, asked for the last message position."""

    def __init__(self, client: Client, wait: float) -> None:
        self._client = client
        self._wait = wait
        self._readers: dict[str, BulkReader] = {}

    async def last_position(self, partition: str) -> Position | None:
        reader = self._readers.get(partition)
        if reader is None:
            reader = await BulkReader.create(
                self._client, partition, receiver_queue_size=0, wait_timeout=self._wait
            )
            self._readers[partition] = reader
        for attempt in range(50):
            try:
                return await reader.get_last_position()
            except NotConnected:  # reconnecting (the topic moved or was unloaded)
                if attempt == 49:
                    raise
                await asyncio.sleep(0.1)
        raise AssertionError("unreachable")

    async def last_positions(self, partitions: list[str]) -> dict[str, Position | None]:
        found = await asyncio.gather(*(self.last_position(p) for p in partitions))
        return dict(zip(partitions, found, strict=True))

    async def close(self) -> None:
        for reader in self._readers.values():
            await reader.close()
        self._readers.clear()


async def position_at_time(
    client: Client, partition: str, time_ms: int, option: str = "startingTime"
) -> Position | None:
    """Position of the first message published at or after ``time_ms``, or None (``option``
    names the option the time came from, for errors)."""
    try:
        reader = await client.create_reader(partition, MessageId.earliest, receiver_queue_size=10)
        try:
            await reader.seek(time_ms)
            for _ in range(100):
                try:
                    if not await reader.has_message_available():
                        return None
                    break
                except NotConnected:  # the seek reconnects the reader
                    await asyncio.sleep(0.05)
            msg = await reader.read_next(30_000)
        finally:
            await reader.close()
    except PulsarException as exc:
        raise PulsarSourceError(
            f"option {option!r}: finding the first message of {partition} published at or "
            f"after {time_ms} failed: {exc}"
        ) from exc
    mid = msg.message_id()
    return (mid.ledger_id(), mid.entry_id(), max(mid.batch_index(), 0))


async def resolve_position(
    client: Client,
    spec: StartSpec,
    partition: str,
    last: Position | None,
    option: str = "startingTime",
) -> Position:
    """Where ``spec`` puts ``partition``, whose last message is at ``last`` (``option``: the
    time option ``spec`` may come from, for errors)."""
    latest = next_after(last) if last is not None else EARLIEST
    kind = spec.kind
    option = spec.option or option
    time_ms = spec.time_ms
    if kind == "times":
        found_time = spec.times.get(partition, spec.times.get(base_topic(partition)))
        if found_time is None:
            kind = spec.default
        else:
            kind, time_ms = "time", found_time
    if kind == "positions":
        given = spec.positions.get(partition)
        if given is None:
            kind = spec.default
        elif is_latest_sentinel(given):
            return latest
        else:
            return given
    if kind == "earliest":
        return EARLIEST
    if kind == "latest":
        return latest
    found = None if last is None else await position_at_time(client, partition, time_ms, option)
    if found is not None:
        return found
    if spec.strategy == "error":
        raise PulsarSourceError(
            f"option {option!r}: no message of {partition} was published at or after {time_ms}; "
            "with the option startingOffsetsByTimestampStrategy=latest such a partition starts "
            "at its end"
        )
    return latest


def split_range(topic: str, start: Position, end: Position, pieces: int) -> list[RangePartition]:
    """``[start, end)`` as up to ``pieces`` ranges, cut at entries of the end's ledger (entry
    ids are dense inside a ledger, so those cuts are real positions)."""
    if pieces <= 1 or end[1] <= 0:
        return [RangePartition(topic, start, end)]
    first_entry = start[1] + 1 if start[0] == end[0] else 0
    span = _end_ledger_entries(start, end)
    if span < 2:
        return [RangePartition(topic, start, end)]
    pieces = min(pieces, span)
    cuts = [(end[0], first_entry + (span * i) // pieces, 0) for i in range(1, pieces)]
    bounds = [start, *[c for c in cuts if start < c < end], end]
    return [RangePartition(topic, a, b) for a, b in itertools.pairwise(bounds)]


def plan_ranges(
    starts: Mapping[str, Position], ends: Mapping[str, Position], min_partitions: int
) -> list[RangePartition]:
    """The non-empty ranges, split so there are about ``min_partitions`` of them, and so that
    no piece spans more than :data:`MAX_ENTRIES_PER_SPLIT` entries of its end ledger."""
    live = [p for p in sorted(ends) if starts.get(p, EARLIEST) < ends[p]]
    per = -(-min_partitions // len(live)) if live and min_partitions > len(live) else 1
    ranges: list[RangePartition] = []
    for p in live:
        start, end = starts.get(p, EARLIEST), ends[p]
        span = _end_ledger_entries(start, end)
        pieces = max(per, -(-span // MAX_ENTRIES_PER_SPLIT))
        ranges.extend(split_range(p, start, end, pieces))
    return ranges


def _end_ledger_entries(start: Position, end: Position) -> int:
    """How many entries of ``[start, end)`` lie in the end's ledger (where cuts are known)."""
    first_entry = start[1] + 1 if start[0] == end[0] else 0
    last_entry = end[1] - 1 if end[2] <= 0 else end[1]
    return max(last_entry - first_entry + 1, 0)
