"""Ledgers in JetStream against real nats-server nodes: records round-trip, entry ids stay
dense, a fence stops the replaced writer at any moment of its appends without losing what
it stored, ids are unique across writers, trimming removes a ledger, R3 survives a node."""

from __future__ import annotations

import asyncio
import contextlib
import random
import signal
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from starquake.cluster.jetstream import request_timeout, requests_capped, storage_errors
from starquake.cluster.js_ledgers import JetStreamLedgers, decode_record, encode_record
from starquake.cluster.kv_metadata import JetStreamMetadataStore
from starquake.cluster.nodes import JetStreamNode, jetstream_nodes
from starquake.storage import LedgerFencedError, StorageError

# A new three-node JetStream cluster elects its leaders first: seconds idle, minutes on a
# heavily loaded machine.
CLUSTER_FORMING_SECONDS = 120.0


@given(st.lists(st.binary(max_size=40), min_size=1, max_size=20))
def test_records_round_trip_and_damage_is_an_error(entries: list[bytes]) -> None:
    body = encode_record(entries)
    assert decode_record(body, len(entries)) == entries
    with pytest.raises(StorageError):
        decode_record(body[:-1], len(entries))
    with pytest.raises(StorageError):
        decode_record(body + b"\0", len(entries))
    with pytest.raises(StorageError):
        decode_record(body, len(entries) + 1)


def test_appends_reads_and_dense_ids(jetstream_node: JetStreamNode) -> None:
    async def scenario() -> None:
        ledgers = await JetStreamLedgers.connect([jetstream_node.url], streams=2)
        try:
            ledger_id = await ledgers.allocate_ledger_id()
            writer = ledgers.writer(ledger_id)
            written: list[bytes] = []
            for size in (1, 3, 2, 5):
                batch = [f"{ledger_id}-{len(written) + i}".encode() for i in range(size)]
                first, last = await writer.append(batch)
                assert (first, last) == (len(written), len(written) + size - 1)
                written += batch
            index = writer.index
            for start in range(len(written)):
                got = await ledgers.read(ledger_id, index, start, 4)
                assert got == list(enumerate(written))[start : start + 4]
            assert await ledgers.read(ledger_id, index, len(written), 10) == []
            for size in [1, 2, 3] * 15:  # more records than one read fetches at once
                batch = [b"%d" % (len(written) + i) for i in range(size)]
                await writer.append(batch)
                written += batch
            for start, count in [(0, 1000), (7, 60), (9, 1), (len(written) - 2, 5), (30, 40)]:
                got = await ledgers.read(ledger_id, index, start, count)
                assert got == list(enumerate(written))[start : start + count]
            await ledgers.delete(ledger_id)
            with pytest.raises(StorageError, match="gone"):
                await ledgers.read(ledger_id, index, 0, 1)
        finally:
            await ledgers.close()

    asyncio.run(scenario())


@settings(max_examples=12, deadline=None)
@given(st.integers(min_value=0, max_value=30), st.integers(min_value=0, max_value=2**32))
def test_a_fence_at_any_moment_keeps_every_stored_append_and_stops_the_writer(
    jetstream_node: JetStreamNode, fence_after: int, seed: int
) -> None:
    rng = random.Random(seed)

    async def scenario() -> None:
        old = await JetStreamLedgers.connect([jetstream_node.url], streams=2)
        new = await JetStreamLedgers.connect([jetstream_node.url], streams=2)
        try:
            ledger_id = await old.allocate_ledger_id()
            writer = old.writer(ledger_id)
            stored: list[tuple[int, bytes]] = []
            started = asyncio.Event()

            async def keep_appending() -> None:
                n = 0
                while True:
                    batch = [f"{n}-{i}".encode() for i in range(rng.randint(1, 3))]
                    n += 1
                    try:
                        first, _ = await writer.append(batch)
                    except LedgerFencedError:
                        return
                    stored.extend((first + i, data) for i, data in enumerate(batch))
                    if n >= fence_after:
                        started.set()

            task = asyncio.create_task(keep_appending())
            if fence_after:
                await asyncio.wait_for(started.wait(), 10)
            index = await new.fence(ledger_id)
            await asyncio.wait_for(task, 10)  # the writer stops on its next append
            assert writer.fenced
            contents = await new.read(ledger_id, index, 0, 10_000)
            assert [entry_id for entry_id, _ in contents] == list(range(index.entries))
            assert stored == contents[: len(stored)]
            assert len(contents) - len(stored) <= 3  # at most the one append in flight
            with pytest.raises(LedgerFencedError):
                await writer.append([b"late"])
            assert await new.fence(ledger_id) == index  # fencing again changes nothing
        finally:
            await old.close()
            await new.close()

    asyncio.run(scenario())


def test_ledger_ids_are_unique_across_brokers(jetstream_node: JetStreamNode) -> None:
    async def scenario() -> list[int]:
        stores = [await JetStreamLedgers.connect([jetstream_node.url]) for _ in range(3)]
        try:
            ids = await asyncio.gather(*(s.allocate_ledger_id() for s in stores for _ in range(20)))
            placed = []  # ids on a chosen stream: on it, and increasing with every choice
            for stream in [3, 0, 0, 2, 1, 3, None, 1]:
                placed.append(await stores[len(placed) % 3].allocate_ledger_id(stream))
                if stream is not None:
                    assert stores[0].stream_of(placed[-1]) == stream
            assert placed == sorted(placed) and placed[0] > max(ids)
            return [*ids, *placed]
        finally:
            for s in stores:
                await s.close()

    ids = asyncio.run(scenario())
    assert len(set(ids)) == len(ids) == 68


def test_replicated_ledgers_survive_a_node_kill(jetstream_trio: list[JetStreamNode]) -> None:
    urls = [node.url for node in jetstream_trio]

    async def scenario() -> None:
        ledgers = await JetStreamLedgers.connect(
            urls, streams=1, replicas=3, give_up_after=CLUSTER_FORMING_SECONDS
        )
        try:
            ledger_id = await ledgers.allocate_ledger_id()
            writer = ledgers.writer(ledger_id)
            await writer.append([b"before"])
            jetstream_trio[2].kill()
            for _ in range(100):  # until the stream has a leader again
                try:
                    if writer.fenced:  # the append without an answer: reopen, as an owner does
                        await ledgers.fence(ledger_id)
                        ledger_id = await ledgers.allocate_ledger_id()
                        writer = ledgers.writer(ledger_id)
                    await writer.append([b"after"])
                    break
                except StorageError:
                    await asyncio.sleep(0.2)
            else:
                raise AssertionError("no append after a node's kill")
            assert (await ledgers.read(ledger_id, writer.index, 0, 10))[-1] == (
                writer.index.entries - 1,
                b"after",
            )
        finally:
            await ledgers.close()

    asyncio.run(scenario())


def _thread_states(pid: int) -> list[str]:
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):  # a thread that just ended
            states.append(task.joinpath("stat").read_text().rsplit(")", 1)[1].split()[0])
    return states


async def _until_stopped(pid: int) -> None:
    """Until every thread of process ``pid`` is stopped (SIGSTOP takes effect per thread, each
    when it is next scheduled: on a loaded machine a thread can still answer meanwhile)."""
    for _ in range(200):
        states = await asyncio.to_thread(_thread_states, pid)
        if states and all(state in ("T", "t") for state in states):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"process {pid} did not stop")


def test_an_append_fails_when_its_connection_drops_not_at_its_timeout(tmp_path: Path) -> None:
    """The node stops answering (SIGSTOP) while an append waits, then dies (SIGKILL): the
    append fails as soon as the connection drops, long before its 60 s timeout, and so does
    an append tried while disconnected; once a node is back, appends go on."""
    (node,) = jetstream_nodes(1, tmp_path)
    node.start()

    async def scenario() -> None:
        ledgers = await JetStreamLedgers.connect([node.url], request_timeout=60)
        try:
            writer = ledgers.writer(await ledgers.allocate_ledger_id())
            await writer.append([b"stored"])
            assert node.proc is not None
            node.proc.send_signal(signal.SIGSTOP)
            await _until_stopped(node.proc.pid)
            waiting = asyncio.ensure_future(writer.append([b"unanswered"]))
            await asyncio.sleep(0.5)
            if waiting.done():
                raise AssertionError(f"ended while the node was stopped: {waiting.exception()!r}")
            started = time.monotonic()
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(10)
            with pytest.raises(StorageError, match="dropped before the answer"):
                await waiting
            assert time.monotonic() - started < 30
            with pytest.raises(StorageError, match="not connected"):
                await ledgers.writer(1_000_000).append([b"while down"])
            await asyncio.to_thread(node.start)
            for _ in range(100):
                try:
                    fresh = ledgers.writer(await ledgers.allocate_ledger_id())
                    await fresh.append([b"back"])
                    break
                except StorageError:
                    await asyncio.sleep(0.2)
            else:
                raise AssertionError("no append after the node came back")
        finally:
            await ledgers.close()

    try:
        asyncio.run(scenario())
    finally:
        node.kill()


def test_requests_capped_bounds_every_wait_of_a_takeover_and_nothing_outside(
    tmp_path: Path,
) -> None:
    """Inside ``requests_capped`` an append, a key-value read and a listing of a node that
    stopped answering (SIGSTOP) fail after the cap, not after their own 60 s; outside it the
    same contexts wait their own time again, and once the node answers they work."""
    (node,) = jetstream_nodes(1, tmp_path)
    node.start()

    async def scenario() -> None:
        ledgers = await JetStreamLedgers.connect([node.url], request_timeout=60)
        metadata = await JetStreamMetadataStore.connect([node.url])
        try:
            writer = ledgers.writer(await ledgers.allocate_ledger_id())
            await writer.append([b"stored"])
            await metadata.put("/a/b", b"v")
            assert node.proc is not None
            node.proc.send_signal(signal.SIGSTOP)
            await _until_stopped(node.proc.pid)
            calls = {
                "append": lambda: ledgers.writer(writer.ledger_id + 1).append([b"x"]),
                "read": lambda: metadata.get_versioned("/a/b"),
                "listing": lambda: metadata.list_children("/a"),
                "scan": lambda: ledgers.scan(writer.ledger_id),
            }
            for what, call in calls.items():
                started = time.monotonic()
                with requests_capped(0.3), pytest.raises(StorageError), storage_errors(what):
                    await call()  # a takeover reports NATS errors as StorageErrors
                assert time.monotonic() - started < 10, what
            assert request_timeout(60) == 60
            pending = asyncio.ensure_future(metadata.get_versioned("/a/b"))
            await asyncio.sleep(1.5)
            assert not pending.done(), "outside the cap a request waits its own timeout"
            node.proc.send_signal(signal.SIGCONT)
            found = await pending
            assert found is not None and found.value == b"v"
            with requests_capped(5):
                assert [
                    data for _, data in await ledgers.read(writer.ledger_id, writer.index, 0, 10)
                ] == [b"stored"]
        finally:
            await ledgers.close()
            await metadata.close()

    try:
        asyncio.run(scenario())
    finally:
        node.kill()
