"""Readers with both clients: ``has_message_available`` right after ``seek`` (the broker
disconnects the reader on a seek, and the call waits for the reconnect instead of failing), and
a reader at ``latest`` with ``start_message_id_inclusive`` (it starts at the last message)."""

from __future__ import annotations

import time
from typing import Any

import pytest


def _produce(client: Any, topic: str, count: int, *, batching: bool = False) -> list[Any]:
    producer = client.create_producer(
        topic, batching_enabled=batching, batching_max_publish_delay_ms=50
    )
    if batching:
        futures: list[Any] = []
        for i in range(count):
            producer.send_async(f"m{i}".encode(), lambda res, mid: futures.append(mid))
        producer.flush()
        ids = futures
    else:
        ids = [producer.send(f"m{i}".encode()) for i in range(count)]
    producer.close()
    return ids


def test_has_message_available_right_after_seek_waits_for_the_reconnect(
    client: Any, mod: Any, topic_factory: Any
) -> None:
    topic = topic_factory("seek-hma")
    ids = _produce(client, topic, 6)
    reader = client.create_reader(topic, mod.MessageId.earliest)
    # Several rounds: each seek closes the reader on the broker, and the very next call
    # must neither raise NotConnected nor answer from the old position.
    for round_ in range(5):
        reader.seek(ids[2])
        assert reader.has_message_available(), round_
        assert reader.read_next(5000).data() == b"m3"
        reader.seek(ids[5])  # the last one, exclusive: nothing after it
        assert not reader.has_message_available(), round_
    reader.close()


def test_seek_to_earliest_after_reading_everything(
    client: Any, mod: Any, topic_factory: Any
) -> None:
    topic = topic_factory("seek-again")
    _produce(client, topic, 3)
    reader = client.create_reader(topic, mod.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
    assert not reader.has_message_available()
    reader.seek(mod.MessageId.earliest)
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"m0"
    reader.close()


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_reader_at_latest_inclusive_starts_at_the_last_message(
    client: Any, mod: Any, topic_factory: Any, batching: bool
) -> None:
    topic = topic_factory("latest-incl")
    _produce(client, topic, 4, batching=batching)
    reader = client.create_reader(topic, mod.MessageId.latest, start_message_id_inclusive=True)
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"m3"
    assert not reader.has_message_available()
    reader.close()


def test_reader_at_latest_exclusive_sees_only_new_messages(
    client: Any, mod: Any, topic_factory: Any
) -> None:
    topic = topic_factory("latest-excl")
    _produce(client, topic, 2)
    reader = client.create_reader(topic, mod.MessageId.latest)
    assert not reader.has_message_available()
    _produce(client, topic, 1)
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"m0"
    reader.close()


def test_reader_at_latest_inclusive_on_an_empty_topic_waits_for_the_first(
    client: Any, mod: Any, topic_factory: Any
) -> None:
    topic = topic_factory("latest-empty")
    client.create_producer(topic).close()  # the topic exists, with nothing in it
    reader = client.create_reader(topic, mod.MessageId.latest, start_message_id_inclusive=True)
    assert not reader.has_message_available()
    with pytest.raises(mod.Timeout):
        reader.read_next(300)
    _produce(client, topic, 1)
    assert reader.read_next(5000).data() == b"m0"
    reader.close()


@pytest.mark.parametrize("batching", [False, True], ids=["single", "batched"])
def test_has_message_available_after_seek_to_a_publish_time(
    client: Any, mod: Any, topic_factory: Any, batching: bool
) -> None:
    topic = topic_factory("seek-time-hma")
    _produce(client, topic, 3, batching=batching)
    reader = client.create_reader(topic, mod.MessageId.earliest)
    future = int(time.time() * 1000) + 3_600_000
    reader.seek(future)  # after the last message: nothing to read
    assert not reader.has_message_available()
    reader.seek(0)  # before the first: everything
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"m0"
    reader.seek(future)
    assert not reader.has_message_available()
    reader.close()


@pytest.mark.parametrize("read_first", [False, True], ids=["unread", "after-reading"])
def test_has_message_available_at_once_after_seek_to_latest_and_a_send(
    client: Any, mod: Any, topic_factory: Any, read_first: bool
) -> None:
    """After ``seek(MessageId.latest)`` the reader compares the subscription's position with
    the last message: a message sent afterwards is available at once, not only once the
    broker has dispatched it to the reader."""
    topic = topic_factory("seek-latest")
    _produce(client, topic, 3)
    reader = client.create_reader(topic, mod.MessageId.earliest)
    if read_first:
        assert reader.read_next(5000).data() == b"m0"
    for round_ in range(3):
        reader.seek(mod.MessageId.latest)
        assert not reader.has_message_available(), round_
        producer = client.create_producer(topic)
        producer.send(f"new{round_}".encode())
        assert reader.has_message_available(), round_  # no wait: the same call, at once
        assert reader.read_next(5000).data() == f"new{round_}".encode()
        assert not reader.has_message_available(), round_
        producer.close()
    reader.close()


def test_inclusive_reader_after_seek_to_latest_starts_at_the_last_message(
    client: Any, mod: Any, topic_factory: Any
) -> None:
    topic = topic_factory("seek-latest-incl")
    _produce(client, topic, 3)
    reader = client.create_reader(topic, mod.MessageId.earliest, start_message_id_inclusive=True)
    assert reader.read_next(5000).data() == b"m0"
    reader.seek(mod.MessageId.latest)
    assert reader.has_message_available()
    assert reader.read_next(5000).data() == b"m2"
    assert not reader.has_message_available()
    reader.close()
