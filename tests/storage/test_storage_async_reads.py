"""Awaitable reads: the file backend's never suspend; a cursor read that waits (as a remote
backend's do) stays consistent with what happens to the cursor meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sq_storage_helpers import MakeFactory, append_all, commit
from suspending_reads import SuspendingReads

from starquake.common.eager import start_eagerly
from starquake.storage import (
    EARLIEST,
    Entry,
    ManagedCursor,
    ManagedLedger,
    Position,
    StorageError,
    read_now,
)

NAME = "persistent://public/default/async-reads"


def _ledger(make_factory: MakeFactory, n: int = 24) -> tuple[ManagedLedger, list[Position]]:
    factory = make_factory(max_entries_per_ledger=5, min_rollover_seconds=0)
    ml = factory.open(NAME)
    positions = append_all(ml, [f"m{i}".encode() for i in range(n)])
    commit(factory)
    return ml, positions


def test_file_backend_reads_complete_at_their_first_step(make_factory: MakeFactory) -> None:
    ml, positions = _ledger(make_factory)
    cursor = ml.new_non_durable_cursor(EARLIEST)
    assert [e.position for e in read_now(ml.read_entries(EARLIEST, 100))] == positions
    assert read_now(ml.read_entry(positions[7])) == Entry(positions[7], b"m7")
    wanted = [positions[9], Position(positions[9].ledger_id, 99), positions[2]]
    assert [e.position for e in read_now(ml.replay_entries(wanted))] == [positions[9], positions[2]]
    assert read_now(ml.find_first(lambda e: int(e.data[1:]) >= 11)) == positions[11]
    assert [e.position for e in read_now(cursor.read_entries(5))] == positions[:5]


def test_read_now_refuses_a_read_that_would_wait(make_factory: MakeFactory) -> None:
    ml, positions = _ledger(make_factory)
    SuspendingReads(max_delay=0).install(ml)  # sleep(0): suspends without an event loop
    with pytest.raises(StorageError, match="must await"):
        read_now(ml.read_entry(positions[0]))


def test_start_eagerly_runs_in_the_callers_frame_until_a_suspension() -> None:
    steps: list[str] = []

    async def quick() -> None:
        steps.append("quick")

    async def slow() -> None:
        steps.append("slow started")
        await asyncio.sleep(0)
        await asyncio.sleep(0.001)
        steps.append("slow done")

    async def main() -> None:
        assert start_eagerly(quick()) is None
        assert steps == ["quick"]
        task = start_eagerly(slow())
        assert task is not None and steps == ["quick", "slow started"]
        await task
        assert steps[-1] == "slow done"
        gate = asyncio.Event()

        async def waits() -> None:
            await gate.wait()

        waiting = start_eagerly(waits())
        assert waiting is not None
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting

    asyncio.run(main())


def _gated(ml: ManagedLedger) -> SuspendingReads:
    """Reads fetch at once and hand their entries over when the gate opens."""
    reads = SuspendingReads()
    reads.install(ml)
    reads.gate = asyncio.Event()
    reads.gate.set()  # open but for the reads a test holds back
    return reads


@pytest.mark.parametrize("move", ["rewind", "seek", "reset", "close"])
def test_a_read_overtaken_by_a_move_returns_nothing(make_factory: MakeFactory, move: str) -> None:
    ml, positions = _ledger(make_factory)

    async def main() -> None:
        reads = _gated(ml)
        cursor = ml.new_non_durable_cursor(EARLIEST)
        assert len(await cursor.read_entries(3)) == 3
        target = {"rewind": positions[0], "seek": positions[10], "reset": positions[6]}

        def moved() -> None:
            if move == "close":
                cursor.close()
            elif move == "rewind":
                cursor.rewind()
            else:
                getattr(cursor, move)(target[move])

        assert await _read_while_n(cursor, reads, 100, moved) == []
        if move != "close":
            assert cursor.read_position == target[move]  # where the move put it
            rest = await cursor.read_entries(100)
            assert [e.position for e in rest] == positions[positions.index(target[move]) :]

    asyncio.run(main())


def test_a_second_read_while_one_waits_is_refused(make_factory: MakeFactory) -> None:
    ml, _ = _ledger(make_factory)

    async def main() -> None:
        reads = _gated(ml)
        cursor = ml.new_non_durable_cursor(EARLIEST)
        assert reads.gate is not None
        reads.gate.clear()
        first = asyncio.ensure_future(cursor.read_entries(5))
        await asyncio.sleep(0)
        with pytest.raises(StorageError, match="already reading"):
            await cursor.read_entries(5)
        reads.gate.set()
        assert len(await first) == 5

    asyncio.run(main())


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("ack"), st.lists(st.integers(0, 23), max_size=6)),
        st.tuples(st.just("mark_delete"), st.integers(0, 23)),
        st.tuples(st.just("seek"), st.integers(0, 23)),
        st.tuples(st.just("rewind"), st.just(0)),
    ),
    max_size=4,
)


def _apply(cursor: ManagedCursor, positions: list[Position], op: tuple[str, Any]) -> None:
    kind, arg = op
    if kind == "ack":
        cursor.delete([positions[i] for i in arg])
    elif kind == "mark_delete":
        cursor.mark_delete(positions[arg])
    elif kind == "seek":
        cursor.seek(positions[arg])
    else:
        cursor.rewind()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(before=st.integers(0, 20), want=st.integers(1, 30), meanwhile=_ops)
def test_whatever_happens_during_a_read_no_entry_is_lost_or_doubled(
    make_factory: MakeFactory, before: int, want: int, meanwhile: list[tuple[str, Any]]
) -> None:
    """A twin cursor gets the same changes without a read in flight: after the waiting read,
    draining the cursor gives what the twin's drain gives (when the read position was not
    moved, the read's own entries first), and no entry handed over was acknowledged."""
    ml, positions, reads = _shared_ledger(make_factory)

    async def main() -> None:
        reads.gate = asyncio.Event()
        cursor = ml.new_non_durable_cursor(EARLIEST)
        twin = ml.new_non_durable_cursor(EARLIEST)
        for c in (cursor, twin):
            c.seek(positions[before])

        def changes() -> None:
            for op in meanwhile:
                _apply(cursor, positions, op)

        got = await _read_while_n(cursor, reads, want, changes)
        for op in meanwhile:
            _apply(twin, positions, op)
        moved = any(op[0] in ("seek", "rewind") for op in meanwhile)
        assert not any(cursor.is_acked(e.position) for e in got)
        reads.gate = None
        rest = [e.position for e in await cursor.read_entries(1000)]
        expected = [e.position for e in await twin.read_entries(1000)]
        if moved:
            assert got == [] and rest == expected
        else:
            assert [e.position for e in got] + rest == expected

    asyncio.run(main())


async def _read_while_n(
    cursor: ManagedCursor, reads: SuspendingReads, want: int, meanwhile: Any
) -> list[Entry]:
    assert reads.gate is not None
    reads.gate.clear()
    task = asyncio.ensure_future(cursor.read_entries(want))
    await asyncio.sleep(0)
    meanwhile()
    reads.gate.set()
    return await task


_SHARED: list[tuple[ManagedLedger, list[Position], SuspendingReads]] = []


def _shared_ledger(
    make_factory: MakeFactory,
) -> tuple[ManagedLedger, list[Position], SuspendingReads]:
    """One ledger for all the examples of a property run (hypothesis calls the test many
    times with the same fixture), its reads made to wait once."""
    if not _SHARED or _SHARED[0][0].closed:
        _SHARED.clear()
        ml, positions = _ledger(make_factory)
        reads = SuspendingReads()
        reads.install(ml)
        _SHARED.append((ml, positions, reads))
    return _SHARED[0]
