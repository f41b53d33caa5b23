"""Compacted ledgers in JetStream, against a real nats-server: what a compaction writes is read
back, from any position and in any steps, by another factory that takes the managed ledger
over (a new owner, with no scan); a replaced, aborted or uncommitted compacted ledger's records
are purged; deleting the managed ledger deletes its compacted ledger."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_factories import Make, run

from starquake.cluster.js_compacted import JetStreamCompactedReader
from starquake.cluster.js_factory import JetStreamLedgerFactory
from starquake.cluster.js_ml_metadata import ManagedLedgerInfo, ledger_path
from starquake.cluster.nodes import JetStreamNode
from starquake.storage import LedgerFencedError, Position, StorageError


def topic() -> str:
    return f"persistent://public/default/c-{uuid.uuid4().hex[:8]}"


async def records_left(factory: JetStreamLedgerFactory, ledger_id: int) -> int:
    index, _ = await factory.ledgers.scan(ledger_id)
    return len(index.sequences)


async def wait_purged(factory: JetStreamLedgerFactory, ledger_id: int) -> None:
    deadline = time.monotonic() + 10
    while True:
        try:  # a scan that began before a purge waits for the messages purged: try again
            if not await records_left(factory, ledger_id):
                return
        except StorageError:
            pass
        assert time.monotonic() < deadline, f"ledger {ledger_id} was not purged"
        await asyncio.sleep(0.05)


async def stored_info(factory: JetStreamLedgerFactory, name: str) -> ManagedLedgerInfo:
    raw = await factory.metadata.get(ledger_path(name))
    assert raw is not None
    return ManagedLedgerInfo.decode(raw)


async def read_in_steps(
    reader: JetStreamCompactedReader, start: Position, step: int
) -> list[tuple[Position, bytes]]:
    got: list[tuple[Position, bytes]] = []
    at = start
    for _ in range(10_000):
        records = await reader.read_from(at, step)
        assert len(records) <= step
        got += [(r.position, bytes(r.data or b"")) for r in records]
        if len(records) < step:
            return got
        last = records[-1].position
        at = Position(last.ledger_id, last.entry_id + 1)
    raise AssertionError("no end")


@settings(max_examples=12, deadline=None)
@given(
    entries=st.lists(st.binary(max_size=120), max_size=80),
    gaps=st.lists(st.integers(1, 30), min_size=80, max_size=80),
    chunk=st.integers(1, 30),
    step=st.integers(1, 25),
    start=st.integers(0, 85),
)
def test_a_compacted_ledger_is_read_back_whole_by_the_next_owner(
    jetstream_node: JetStreamNode,
    tmp_path_factory: Any,
    entries: list[bytes],
    gaps: list[int],
    chunk: int,
    step: int,
    start: int,
) -> None:
    positions: list[Position] = []
    at = 0
    for gap in gaps[: len(entries)]:
        at += gap
        positions.append(Position(3 + at // 100, at % 100))
    written = list(zip(positions, entries, strict=True))
    horizon = Position(9, 9)
    name = topic()

    async def scenario(make: Make) -> None:
        first = await make(max_record_bytes=300)  # a few entries a record
        ml = await first.open(name)
        store = first.compacted_ledgers
        builder = await store.create(ml)
        for i in range(0, len(written), chunk):
            await builder.append(written[i : i + chunk])
        reader = await builder.finish(horizon)
        await store.commit(ml, reader)
        ml.close()
        await ml.drain()

        second = await make()  # the next owner
        taken = await second.open(name)
        opened = await second.compacted_ledgers.open_committed(taken)
        assert isinstance(opened, JetStreamCompactedReader)
        assert opened.ledger_id == reader.ledger_id
        assert (opened.horizon, opened.entries) == (horizon, len(written))
        assert opened.size == sum(len(data) for data in entries)
        assert opened.last == (positions[-1] if positions else None)
        origin = positions[start] if start < len(positions) else Position(99, 0)
        expected = [(p, d) for p, d in written if p >= origin]
        assert await read_in_steps(opened, origin, step) == expected
        assert await read_in_steps(opened, Position(-1, -1), 1000) == written

    run(jetstream_node, tmp_path_factory.mktemp("c"), scenario)


def test_a_replaced_compacted_ledger_is_purged_and_deleting_the_topic_deletes_the_last(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    name = topic()

    async def scenario(make: Make) -> None:
        factory = await make(max_record_bytes=200)
        ml = await factory.open(name)
        store = factory.compacted_ledgers
        readers = []
        for round_ in range(2):
            builder = await store.create(ml)
            await builder.append(
                [(Position(1, i), f"v{round_}-{i}".encode() * 9) for i in range(20)]
            )
            readers.append(await builder.finish(Position(1, 19)))
        first, second = readers
        await store.commit(ml, first)
        await store.commit(ml, second)
        info = await stored_info(factory, name)
        assert info.compacted is not None and info.compacted.ledger_id == second.ledger_id
        assert first.ledger_id in [lid for lid, _ in info.purge]  # listed, not purged yet
        assert await records_left(factory, first.ledger_id) > 1
        await store.delete(ml, first)  # the new view is served: the old one goes
        await wait_purged(factory, first.ledger_id)
        await ml.drain()  # the list without it is stored after the purge
        info = await stored_info(factory, name)
        assert info.purge == [] and info.compacted is not None

        aborted = await store.create(ml)
        await aborted.append([(Position(1, 0), b"x" * 50)] * 1 + [(Position(1, 1), b"y" * 150)])
        await aborted.abort()
        await wait_purged(factory, aborted.ledger_id)

        assert await records_left(factory, second.ledger_id) > 1
        await factory.delete(name)
        assert await records_left(factory, second.ledger_id) == 0
        assert await factory.metadata.get(ledger_path(name)) is None

    run(jetstream_node, tmp_path, scenario)


def test_a_compaction_that_did_not_commit_is_purged_by_the_next_owner(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    name = topic()

    async def scenario(make: Make) -> None:
        first = await make()
        ml = await first.open(name)
        committed = await first.compacted_ledgers.create(ml)
        await committed.append([(Position(1, 0), b"kept")])
        view = await committed.finish(Position(1, 0))
        await first.compacted_ledgers.commit(ml, view)
        builder = await first.compacted_ledgers.create(ml)
        await builder.append([(Position(1, 0), b"a"), (Position(1, 5), b"b")])
        # the owner dies here (no commit, no abort) ...
        # ... or its topic is unloaded: its closed instance neither commits nor writes its
        # ledger list (its owner may be another broker already) when the compaction gives up
        stopped = await first.compacted_ledgers.create(ml)
        await stopped.append([(Position(1, 0), b"c")])
        ml.close()
        with pytest.raises(StorageError):
            await first.compacted_ledgers.commit(ml, await stopped.finish(Position(1, 0)))
        await stopped.abort()
        await ml.drain()
        assert not ml.fenced and await records_left(first, stopped.ledger_id) == 1
        # another broker takes the topic: both are purged, the committed one stays
        second = await make()
        taken = await second.open(name)
        await wait_purged(second, builder.ledger_id)
        await wait_purged(second, stopped.ledger_id)
        opened = await second.compacted_ledgers.open_committed(taken)
        assert opened is not None and opened.ledger_id == view.ledger_id
        got = await opened.read_from(Position(0, 0), 10)
        assert [(r.position, bytes(r.data or b"")) for r in got] == [(Position(1, 0), b"kept")]
        assert await records_left(second, view.ledger_id) == 1

    run(jetstream_node, tmp_path, scenario)


def test_a_replaced_owner_cannot_write_a_compacted_ledger_the_next_owner_purged(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    name = topic()

    async def scenario(make: Make) -> None:
        first = await make()
        ml = await first.open(name)
        builder = await first.compacted_ledgers.create(ml)  # listed, nothing written yet
        second = await make()
        await second.open(name)  # fences, then purges the listed ledger
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(StorageError):  # a scan during the purge
                index, fenced = await second.ledgers.scan(builder.ledger_id)
                if fenced:
                    break
            assert time.monotonic() < deadline, "the listed ledger was not fenced"
            await asyncio.sleep(0.05)
        assert index.sequences == []
        with pytest.raises(LedgerFencedError):
            await builder.append([(Position(1, 0), b"late")])
            await builder.finish(Position(1, 0))
        index, fenced = await second.ledgers.scan(builder.ledger_id)
        assert fenced and index.sequences == []  # nothing of it landed

    run(jetstream_node, tmp_path, scenario)
