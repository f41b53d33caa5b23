"""The ManagedLedger contract on JetStream, against a real nats-server: appends become visible
in order only once acknowledged and read back (from the cache and from JetStream), rollover,
recovery by a new factory (entries, ledgers and cursor states as they were), fencing between
two owners of one managed ledger (no entry lost or duplicated, the old owner's appends and
cursor writes refused), trimming whole ledgers (purged, gone from the stored list)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_factories import run

from starquake.cluster.js_factory import JetStreamLedgerFactory
from starquake.cluster.js_managed_ledger import JetStreamManagedLedger
from starquake.cluster.nodes import JetStreamNode, jetstream_nodes
from starquake.storage import (
    EARLIEST,
    LedgerFencedError,
    ManagedLedgerConfig,
    Position,
    RetentionLimits,
    StorageError,
)


def topic() -> str:
    return f"persistent://public/default/t-{uuid.uuid4().hex[:8]}"


async def read_all(ml: JetStreamManagedLedger) -> list[tuple[Position, bytes]]:
    entries = await ml.read_entries(EARLIEST, 100_000)
    return [(e.position, bytes(e.data)) for e in entries]


def test_appends_visible_once_acknowledged_in_order_and_read_back(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    async def scenario(make: Callable[..., Awaitable[JetStreamLedgerFactory]]) -> None:
        reported: list[Position] = []
        config = ManagedLedgerConfig(cache_max_bytes=64)  # most reads go to JetStream
        factory = await make(
            config=config,
            max_record_bytes=100,
            on_committed=lambda results: reported.extend(lc for _, lc in results),
        )
        ml = await factory.open(topic())
        datas = [f"entry-{i}".encode() * (1 + i % 3) for i in range(40)]
        positions = [ml.append(d) for d in datas]
        assert [p.entry_id for p in positions] == list(range(40))
        assert ml.last_confirmed < positions[0]  # nothing visible before its acknowledgment
        assert await ml.read_entries(EARLIEST, 10) == []
        await ml.drain()
        assert ml.last_confirmed == positions[-1]
        assert reported == sorted(reported) and reported[-1] == positions[-1]
        assert len(reported) > 1  # several records: at most 100 bytes each
        assert await read_all(ml) == list(zip(positions, datas, strict=True))
        some = await ml.read_entries(positions[5], 4, max_bytes=1)
        assert [(e.position, e.data) for e in some] == [(positions[5], datas[5])]
        entry = await ml.read_entry(positions[17])
        assert entry is not None and entry.data == datas[17]
        replayed = await ml.replay_entries([positions[3], (positions[0][0], 99), positions[1]])
        assert [e.position for e in replayed] == [positions[3], positions[1]]
        found = await ml.find_first(lambda e: e.position.entry_id >= 21)
        assert found == positions[21]
        assert ml.number_of_entries == 40 and ml.count_entries(EARLIEST, positions[-1]) == 40

    run(jetstream_node, tmp_path, scenario)


def test_rollover_and_recovery_by_a_new_factory(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    name = topic()
    config = ManagedLedgerConfig(max_entries_per_ledger=4, min_rollover_seconds=0)

    async def scenario(make: Callable[..., Awaitable[JetStreamLedgerFactory]]) -> None:
        first = await make(config=config)
        ml = await first.open(name)
        written: list[tuple[Position, bytes]] = []
        for i in range(15):
            data = f"m{i}".encode()
            written.append((ml.append(data), data))
            await ml.drain()  # lets the writer take a spare id for the next rollover
        assert len(ml.ledgers()) >= 4
        cursor = ml.open_cursor("sub", "earliest")
        got = await cursor.read_entries(6)
        cursor.mark_delete(got[2].position)
        cursor.delete([got[4].position, written[9][0]])
        await first.flush_cursors()
        stored_ranges = cursor.individually_deleted_ranges()
        ledger_ids = [info.ledger_id for info in ml.ledgers()]
        await first.close()

        second = await make(config=config)
        again = await second.open(name)
        assert await read_all(again) == written
        assert [info.ledger_id for info in again.ledgers()][: len(ledger_ids)] == ledger_ids
        assert again.current_ledger_id > ledger_ids[-1]
        # every rollover and the takeover started the next ledger on the first one's stream
        streams = {lid % 2 for lid in [*ledger_ids, again.current_ledger_id]}
        assert streams == {ledger_ids[0] % 2}
        restored = again.cursors["sub"]
        assert restored.mark_delete_position == got[2].position
        assert restored.individually_deleted_ranges() == stored_ranges
        assert restored.backlog() == 15 - 3 - 2
        position = again.append(b"after")
        await again.drain()
        assert (await read_all(again))[-1] == (position, b"after")

    run(jetstream_node, tmp_path, scenario)


@settings(max_examples=10, deadline=None)
@given(st.integers(min_value=1, max_value=40), st.sampled_from([4, 50_000]))
def test_a_new_owner_fences_the_old_one_without_losing_or_duplicating(
    jetstream_node: JetStreamNode,
    tmp_path_factory: pytest.TempPathFactory,
    fence_after: int,
    ledger_entries: int,
) -> None:
    name = topic()
    # tiny ledgers: the old owner rolls over (and stores its ledger list) while it is fenced
    config = ManagedLedgerConfig(max_entries_per_ledger=ledger_entries, min_rollover_seconds=0)

    async def scenario(make: Callable[..., Awaitable[JetStreamLedgerFactory]]) -> None:
        confirmed: list[Position] = []
        failures: list[BaseException] = []
        enough = asyncio.Event()

        def on_committed(results: list[tuple[JetStreamManagedLedger, Position]]) -> None:
            confirmed.extend(lc for _, lc in results)
            if results[-1][0].number_of_entries >= fence_after:
                enough.set()

        old_factory = await make(
            config=config,
            on_committed=on_committed,
            on_failed=lambda mls, exc: failures.append(exc),
        )
        old = await old_factory.open(name)
        appended: list[tuple[Position, bytes]] = []

        async def keep_appending() -> None:
            n = 0
            while True:
                for _ in range(3):
                    data = f"old-{n}".encode()
                    n += 1
                    try:
                        appended.append((old.append(data), data))
                    except LedgerFencedError:
                        return
                await asyncio.sleep(0)

        task = asyncio.create_task(keep_appending())
        await asyncio.wait_for(enough.wait(), 10)
        new = await (await make()).open(name)
        await asyncio.wait_for(task, 10)
        assert old.fenced and len(failures) == 1 and isinstance(failures[0], LedgerFencedError)
        with pytest.raises(LedgerFencedError):
            old.append(b"late")
        contents = await read_all(new)
        # the new owner has exactly what the old one confirmed, in order, once: every
        # record acknowledged before the fence, none after it
        assert contents == appended[: len(contents)]
        assert contents[-1][0] == old.last_confirmed == confirmed[-1]
        mine = new.append(b"new")
        await new.drain()
        assert (await read_all(new))[-1] == (mine, b"new")
        assert mine.ledger_id > old.current_ledger_id

    run(jetstream_node, tmp_path_factory.mktemp("fence"), scenario)


def test_the_old_owners_idle_append_and_cursor_write_are_refused(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    name = topic()

    async def scenario(make: Callable[..., Awaitable[JetStreamLedgerFactory]]) -> None:
        old_factory = await make()
        old = await old_factory.open(name)
        old.append(b"one")
        await old.drain()
        cursor = old.open_cursor("sub", "earliest")
        await old_factory.flush_cursors()
        new = await (await make()).open(name)
        cursor.mark_delete(old.last_confirmed)
        await old_factory.flush_cursors()  # the new owner re-stored the cursor: refused
        assert old.fenced
        assert new.cursors["sub"].mark_delete_position < old.last_confirmed

        older = await (await make()).open(name)  # a third owner: the second is fenced too
        new.append(b"refused")
        await new.drain()
        assert new.fenced
        assert [data for _, data in await read_all(older)] == [b"one"]

    run(jetstream_node, tmp_path, scenario)


def test_trimming_purges_whole_consumed_ledgers_and_stores_the_list(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    name = topic()
    config = ManagedLedgerConfig(max_entries_per_ledger=3, min_rollover_seconds=0)

    async def scenario(make: Callable[..., Awaitable[JetStreamLedgerFactory]]) -> None:
        factory = await make(config=config)
        ml = await factory.open(name)
        positions = []
        for i in range(10):
            positions.append(ml.append(f"t{i}".encode()))
            await ml.drain()
        cursor = ml.open_cursor("sub", "earliest")
        assert ml.trim() == 0  # the cursor's stored position holds everything
        cursor.mark_delete(positions[6])
        await factory.flush_cursors()
        before = [info.ledger_id for info in ml.ledgers()]
        assert ml.trim(RetentionLimits(0, 0)) == 2  # entries 0-5 are in the first two ledgers
        await ml.drain()  # purge, then store the list
        kept = [info.ledger_id for info in ml.ledgers()]
        assert kept == before[2:]
        assert ml.first_position() == positions[6]
        for purged in before[:2]:
            index, _ = await factory.ledgers.scan(purged)
            assert index.entries == 0 and not index.firsts  # its subject holds nothing
        await factory.close()
        again = await (await make(config=config)).open(name)
        assert [info.ledger_id for info in again.ledgers()][: len(kept)] == kept
        assert [data for _, data in await read_all(again)] == [
            f"t{i}".encode() for i in range(6, 10)
        ]

    run(jetstream_node, tmp_path, scenario)


def test_jetstream_unavailable_fails_appends_and_reopening_recovers(tmp_path: Path) -> None:
    (node,) = jetstream_nodes(1, tmp_path / "jetstream")
    node.start()
    name = topic()

    async def scenario(make: Callable[..., Awaitable[JetStreamLedgerFactory]]) -> None:
        confirmed: list[Position] = []
        failures: list[BaseException] = []
        factory = await make(
            request_timeout=1,
            on_committed=lambda results: confirmed.extend(lc for _, lc in results),
            on_failed=lambda mls, exc: failures.append(exc),
        )
        ml = await factory.open(name)
        first = ml.append(b"stored")
        await ml.drain()
        node.stop()
        lost = ml.append(b"unanswered")
        await ml.drain()
        assert ml.fenced and len(failures) == 1 and isinstance(failures[0], StorageError)
        assert confirmed == [first] and ml.last_confirmed == first  # never a false success
        with pytest.raises(LedgerFencedError):
            ml.append(b"refused")
        node.start()
        deadline = asyncio.get_running_loop().time() + 30
        while True:  # until the connection is back
            try:
                again = await factory.open(name)
                break
            except StorageError:
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.2)
        contents = await read_all(again)
        # the unanswered append may have been stored (the client resends it on reconnecting):
        # then the new owner finds it, which is at-least-once, never a loss
        assert contents in ([(first, b"stored")], [(first, b"stored"), (lost, b"unanswered")])
        position = again.append(b"after")
        await again.drain()
        assert (await read_all(again))[-1] == (position, b"after")

    try:
        run(node, tmp_path, scenario)
    finally:
        node.stop()


def test_cursor_states_are_stored_periodically_without_a_close(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    name = topic()

    async def scenario(make: Callable[..., Awaitable[JetStreamLedgerFactory]]) -> None:
        factory = await make(cursor_flush_seconds=0.05)
        ml = await factory.open(name)
        positions = [ml.append(f"p{i}".encode()) for i in range(5)]
        await ml.drain()
        cursor = ml.open_cursor("sub", "earliest")
        cursor.delete([positions[1]])
        cursor.mark_delete(positions[2])
        deadline = asyncio.get_running_loop().time() + 10
        while cursor.stored_mark_delete != positions[2]:  # the factory's timer stored it
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.02)
        taken = await (await make()).open(name)  # a takeover: the first owner never closed
        assert taken.cursors["sub"].mark_delete_position == positions[2]
        assert taken.cursors["sub"].backlog() == 2

    run(jetstream_node, tmp_path, scenario)


def test_flushes_at_once_store_a_new_cursor_once_without_fencing(
    jetstream_node: JetStreamNode, tmp_path: Path
) -> None:
    """Two flushes at once (the broker's periodic store, an unload's, the factory's timer):
    a cursor moved while the first writes its first version is stored by the second after
    it, at the version the first got, not as a second "first version" that JetStream refuses
    (which fenced the managed ledger though no other owner had it)."""
    name = topic()

    async def scenario(make: Callable[..., Awaitable[JetStreamLedgerFactory]]) -> None:
        factory = await make()
        ml = await factory.open(name)
        positions = [ml.append(f"m{i}".encode()) for i in range(4)]
        await ml.drain()
        cursor = ml.open_cursor("sub", "earliest")
        cursor.mark_delete(positions[0])

        async def move_then_flush() -> None:
            await asyncio.sleep(0)  # the first flush is writing the cursor's first version
            cursor.mark_delete(positions[2])
            await ml.flush_cursors()

        await asyncio.gather(ml.flush_cursors(), move_then_flush())
        assert not ml.fenced
        assert cursor.stored_mark_delete == positions[2]
        await factory.close()
        taken = await (await make()).open(name)
        assert taken.cursors["sub"].mark_delete_position == positions[2]

    run(jetstream_node, tmp_path, scenario)
