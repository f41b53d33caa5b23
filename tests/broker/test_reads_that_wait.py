"""The broker's synchronous paths over reads that wait, as a remote backend's do.

An acknowledgment (whose order must be kept) and a producer's admission cannot wait for a
read: they use what is known at once (the entries' infos, a read the ledger has at hand) and
otherwise go on without it while the read fills the cache for the next time. The periodic
backlog-quota check, message expiry and the delayed-delivery rebuild await their reads; an
expiry whose subscription goes away while it reads moves nothing. Real file-backed ledgers
whose reads are held at a gate (``tests/suspending_reads.py``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from official_client import official_client
from suspending_reads import SuspendingReads

from starquake.broker import backlog_quota
from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.message_expiry import expire_older_than
from starquake.broker.subscription import Subscription
from starquake.broker.topic import PersistentTopic
from starquake.protocol.framing import entry_metadata
from starquake.storage import Position


@pytest.fixture
def reads() -> SuspendingReads:
    return SuspendingReads(seed=7)


@pytest.fixture
def broker(tmp_path: Path, reads: SuspendingReads) -> Iterator[EmbeddedBroker]:
    with EmbeddedBroker(tmp_path / "data", backlogQuotaCheckEnabled=False) as running:
        reads.install_on_broker(running.service.storage)
        yield running


@pytest.fixture
def client(broker: EmbeddedBroker) -> Iterator[pulsar.Client]:
    c = official_client(broker)
    try:
        yield c
    finally:
        c.close()


def _loaded(broker: EmbeddedBroker, topic: str) -> PersistentTopic:
    loaded = broker.service.topics[topic]
    assert isinstance(loaded, PersistentTopic)
    return loaded


def _batch_of_five(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, subscription: str | None = None
) -> tuple[PersistentTopic, Position]:
    """One batch entry of 5 messages (after creating ``subscription`` if given): the loaded
    topic and the entry's position."""
    if subscription is not None:
        client.subscribe(topic, subscription).close()
    producer = client.create_producer(
        topic, batching_enabled=True, batching_max_publish_delay_ms=50
    )
    for i in range(5):
        producer.send_async(b"m%d" % i, None)
    producer.flush()
    loaded = _loaded(broker, topic)
    return loaded, loaded.ledger.last_confirmed


async def _close_gate(reads: SuspendingReads) -> asyncio.Event:
    """Hold every read from now on until the returned event is set (on the broker's loop)."""
    gate = asyncio.Event()
    reads.gate = gate
    return gate


async def _until(condition: Callable[[], bool], what: str) -> None:
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"timed out waiting for {what}")


def test_an_ack_does_without_a_batch_size_that_is_not_at_hand(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, reads: SuspendingReads
) -> None:
    loaded, position = _batch_of_five(broker, client, topic)

    async def scenario() -> tuple[int | None, int | None, int]:
        loaded.entry_infos.clear()
        gate = await _close_gate(reads)
        unknown = loaded.batch_size_of(position)  # the read waits: not known now
        held = reads.suspended
        gate.set()
        await _until(lambda: loaded.entry_infos.known(position) is not None, "the read")
        reads.gate = None
        return unknown, loaded.batch_size_of(position), held

    unknown, known, held = broker.call(scenario())
    assert held >= 1, "the read did not wait"
    assert unknown is None
    assert known == 5


def test_a_partial_ack_of_unknown_size_takes_the_ack_set_as_given(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    loaded, position = _batch_of_five(broker, client, topic, "s")
    cursor = loaded.subscriptions["s"].cursor

    async def scenario() -> None:
        # bits set: still unacknowledged (indexes 3 and 4 of the 5)
        assert not cursor.ack_batch_indexes(position, [0b11000], 0)
        assert cursor.get_batch_ack_set(position) == [0b11000]
        assert not cursor.ack_batch_indexes(position, [0b11111], 0)  # intersected: no gain
        assert cursor.get_batch_ack_set(position) == [0b11000]
        assert cursor.ack_batch_indexes(position, [0], 0)
        assert cursor.is_acked(position)

    broker.call(scenario())


def test_a_known_batch_size_bounds_the_ack_set(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str
) -> None:
    loaded, position = _batch_of_five(broker, client, topic, "s")
    cursor = loaded.subscriptions["s"].cursor

    async def scenario() -> None:
        # bit 10 lies beyond a batch of 5: dropped
        assert not cursor.ack_batch_indexes(position, [(1 << 10) | 0b10000], 5)
        assert cursor.get_batch_ack_set(position) == [0b10000]

    broker.call(scenario())


def test_the_oldest_backlog_entry_is_read_meanwhile_and_awaited_by_the_check(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, reads: SuspendingReads
) -> None:
    client.subscribe(topic, "s").close()
    producer = client.create_producer(topic, batching_enabled=False)
    producer.send(b"old")
    loaded = _loaded(broker, topic)
    first = loaded.ledger.last_confirmed

    async def scenario() -> tuple[object, object, object]:
        gate = await _close_gate(reads)
        at_once = backlog_quota.oldest_backlog_entry(loaded)  # not at hand: unknown
        awaited = asyncio.create_task(backlog_quota.load_oldest_backlog_entry(loaded))
        await asyncio.sleep(0.05)
        assert not awaited.done()
        gate.set()
        loaded_now = await awaited
        reads.gate = None
        return at_once, loaded_now, backlog_quota.oldest_backlog_entry(loaded)

    at_once, awaited, cached = broker.call(scenario())
    entry = broker.call(_read(loaded, first))
    published = int(entry_metadata(entry).publish_time)
    assert at_once is None
    assert awaited == (published, "s")
    assert cached == (published, "s")


async def _read(loaded: PersistentTopic, position: Position) -> bytes:
    entry = await loaded.ledger.read_entry(position)
    assert entry is not None
    return bytes(entry.data)


def test_expiry_awaits_its_search_and_moves_nothing_for_a_deleted_subscription(
    broker: EmbeddedBroker, client: pulsar.Client, topic: str, reads: SuspendingReads
) -> None:
    for name in ("kept", "deleted"):
        client.subscribe(topic, name).close()
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(3):
        producer.send(b"m%d" % i)
    loaded = _loaded(broker, topic)
    last = loaded.ledger.last_confirmed
    time.sleep(0.01)  # every message older than "now" in milliseconds: all expire

    async def scenario() -> tuple[bool, bool, Position]:
        kept, deleted = (loaded.subscriptions[n] for n in ("kept", "deleted"))
        assert isinstance(kept, Subscription) and isinstance(deleted, Subscription)
        gate = await _close_gate(reads)
        expiring = [asyncio.create_task(expire_older_than(s, 0)) for s in (kept, deleted)]
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in expiring)
        loaded.unsubscribe("deleted")  # while its search waits
        gate.set()
        moved = [await task for task in expiring]
        reads.gate = None
        return moved[0], moved[1], kept.cursor.mark_delete_position

    kept_moved, deleted_moved, mark_delete = broker.call(scenario())
    assert kept_moved and mark_delete == last
    assert not deleted_moved
