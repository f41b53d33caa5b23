"""Table views (``Client.create_table_view``), the same scenarios with both clients, and the
asyncio API of ours."""

from __future__ import annotations

import asyncio
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import pytest
from compaction_helpers import compact, keyed_data, send_all
from official_client import make_client

from starquake.broker.embedded import EmbeddedBroker
from starquake.client import asyncio as sqa
from starquake.client.exceptions import ConsumerNotInitialized


def _eventually(check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def _entries(view: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    view.for_each(lambda k, v: out.__setitem__(k, v))
    return out


def _producer(client: Any, topic: str, **kwargs: Any) -> Any:
    kwargs.setdefault("batching_enabled", False)
    return client.create_producer(topic, block_if_queue_full=True, **kwargs)


def test_initial_contents_keep_the_latest_value_and_empty_values_delete(
    client: Any, topic: str
) -> None:
    plain = _producer(client, topic)
    plain.send(b"a1", partition_key="a")
    plain.send(b"b1", partition_key="b")
    plain.send(b"", partition_key="b")  # deletes b
    plain.send(b"no key")  # ignored
    plain.send(b"", partition_key="never-set")
    batched = _producer(client, topic, batching_enabled=True, batching_max_publish_delay_ms=5)
    for i in range(20):
        batched.send_async(f"c{i}".encode(), None, partition_key="c")
    batched.send_async(b"a2", None, partition_key="a")
    batched.flush()

    view = client.create_table_view(topic)
    assert len(view) == 2
    assert view.get("a") == b"a2"
    assert view.get("c") == b"c19"
    assert view.get("b") is None
    assert view.get("never-set") is None
    assert view.get("") is None
    assert _entries(view) == {"a": b"a2", "c": b"c19"}
    assert repr(view) == f"TableView(topic={topic})"
    view.close()


def test_updates_after_creation_reach_get_and_listeners(client: Any, topic: str) -> None:
    producer = _producer(client, topic)
    producer.send(b"x1", partition_key="x")
    producer.send(b"y1", partition_key="y")
    view = client.create_table_view(topic, subscription_name="tv-sub")
    assert repr(view) == f"TableView(topic={topic}, subscription=tv-sub)"
    events: list[tuple[str, bytes]] = []
    lock = threading.Lock()

    def listener(key: str, value: bytes) -> None:
        with lock:
            events.append((key, value))

    view.for_each_and_listen(listener)
    assert sorted(events) == [("x", b"x1"), ("y", b"y1")]  # the current entries, at once
    producer.send(b"z1", partition_key="z")
    producer.send(b"", partition_key="x")
    producer.send(b"keyless")
    producer.send(b"y2", partition_key="y")
    _eventually(lambda: view.get("y") == b"y2")
    assert view.get("z") == b"z1"
    assert view.get("x") is None
    assert len(view) == 2
    _eventually(lambda: len(events) == 5)
    # updates in order, a deletion with an empty value, the keyless message skipped
    assert events[2:] == [("z", b"z1"), ("x", b""), ("y", b"y2")]
    seen: list[tuple[str, bytes]] = []
    view.for_each(lambda k, v: seen.append((k, v)))
    assert sorted(seen) == [("y", b"y2"), ("z", b"z1")]
    view.close()


def test_partitioned_topic(
    mod: types.ModuleType, client: Any, broker: EmbeddedBroker, topic: str
) -> None:
    broker.create_partitioned_topic(topic, 3)
    producer = _producer(client, topic)
    expected = {}
    for i in range(30):
        key = f"k{i % 12}"
        producer.send(f"{key}:{i}".encode(), partition_key=key)
        expected[key] = f"{key}:{i}".encode()
    producer.send(b"", partition_key="k0")
    del expected["k0"]
    view = client.create_table_view(topic)
    if mod.__name__ == "pulsar":
        # The official client decides "nothing more to read" on a partitioned topic from the
        # bytes waiting in its queue, so an empty (deleting) value that is the last message
        # there can be applied just after the view is returned. Ours applies it before.
        _eventually(lambda: _entries(view) == expected)
    assert _entries(view) == expected
    assert len(view) == 11
    for i in range(12):
        producer.send(f"new{i}".encode(), partition_key=f"k{i}")
    _eventually(lambda: all(view.get(f"k{i}") == f"new{i}".encode() for i in range(12)))
    view.close()


def test_view_of_a_compacted_topic(client: Any, broker: EmbeddedBroker, topic: str) -> None:
    messages, expected = keyed_data(600, keys=40, deleted=5)
    send_all(_producer(client, topic), messages[:300])
    send_all(_producer(client, topic, batching_enabled=True), messages[300:])
    compact(broker, topic)
    producer = _producer(client, topic)
    producer.send(b"after", partition_key="k1")
    producer.send(b"", partition_key="k2")
    want = dict(expected)
    want["k1"] = b"after"
    want.pop("k2", None)

    view = client.create_table_view(topic)
    assert _entries(view) == want
    assert len(view) == len(want)
    producer.send(b"later", partition_key="k3")
    _eventually(lambda: view.get("k3") == b"later")
    view.close()


def test_close_stops_following_and_keeps_the_entries(
    mod: types.ModuleType, client: Any, topic: str
) -> None:
    producer = _producer(client, topic)
    producer.send(b"v1", partition_key="k")
    view = client.create_table_view(topic)
    view.close()
    producer.send(b"v2", partition_key="k")
    producer.send(b"w", partition_key="other")
    time.sleep(0.5)
    assert view.get("k") == b"v1"
    assert len(view) == 1
    with pytest.raises(mod.ConsumerNotInitialized):
        view.close()


def test_client_close_closes_the_view(
    mod: types.ModuleType, broker: EmbeddedBroker, topic: str
) -> None:
    client = make_client(mod, broker)
    _producer(client, topic).send(b"v", partition_key="k")
    view = client.create_table_view(topic)
    events: list[tuple[str, bytes]] = []
    view.for_each_and_listen(lambda k, v: events.append((k, v)))
    client.close()
    _eventually(lambda: all(t.name != "starquake-table-view" for t in threading.enumerate()))
    assert view.get("k") == b"v"
    assert len(view) == 1
    assert events == [("k", b"v")]
    view.close()  # quietly, the first time
    with pytest.raises(mod.ConsumerNotInitialized):
        view.close()


def test_empty_topic(client: Any, topic: str) -> None:
    view = client.create_table_view(topic)
    assert len(view) == 0
    assert _entries(view) == {}
    _producer(client, topic).send(b"v", partition_key="k")
    _eventually(lambda: view.get("k") == b"v")
    view.close()


def test_schema_decodes_values(mod: types.ModuleType, client: Any, topic: str) -> None:
    producer = _producer(client, topic, schema=mod.schema.StringSchema())
    producer.send("hello", partition_key="a")
    producer.send("gone", partition_key="b")
    producer.send("", partition_key="b")
    view = client.create_table_view(topic, schema=mod.schema.StringSchema())
    assert view.get("a") == "hello"
    assert view.get("b") is None
    events: list[tuple[str, str]] = []
    view.for_each_and_listen(lambda k, v: events.append((k, v)))
    producer.send("", partition_key="a")
    _eventually(lambda: len(events) == 2)
    assert events == [("a", "hello"), ("a", "")]
    assert len(view) == 0
    view.close()


def test_incompatible_schema_and_bad_arguments(
    mod: types.ModuleType, client: Any, topic: str
) -> None:
    _producer(client, topic).send(b"bytes", partition_key="k")
    with pytest.raises(mod.IncompatibleSchema):
        client.create_table_view(topic, schema=mod.schema.StringSchema())
    with pytest.raises(ValueError, match="topic"):
        client.create_table_view(5)
    with pytest.raises(ValueError, match="subscription_name"):
        client.create_table_view(topic, subscription_name=5)
    with pytest.raises(ValueError, match="schema"):
        client.create_table_view(topic, schema="string")


def test_listener_errors_do_not_stop_the_view(client: Any, topic: str) -> None:
    producer = _producer(client, topic)
    view = client.create_table_view(topic)
    calls: list[str] = []

    def listener(key: str, value: bytes) -> None:
        calls.append(key)
        if key == "bad":
            raise ValueError("boom")

    view.for_each_and_listen(listener)
    producer.send(b"1", partition_key="bad")
    producer.send(b"2", partition_key="good")
    _eventually(lambda: view.get("good") == b"2")
    _eventually(lambda: calls == ["bad", "good"])
    view.close()


def test_asyncio_table_view(broker: EmbeddedBroker, topic: str) -> None:
    async def main() -> None:
        client = sqa.Client(broker.service_url, operation_timeout_seconds=10)
        producer = await client.create_producer(topic, batching_enabled=False)
        await producer.send(b"a1", partition_key="a")
        await producer.send(b"b1", partition_key="b")
        await producer.send(b"", partition_key="b")
        view = await client.create_table_view(topic)
        assert isinstance(view, sqa.TableView)
        assert len(view) == 1
        assert view.get("a") == b"a1"
        events: list[tuple[str, bytes]] = []
        view.for_each_and_listen(lambda k, v: events.append((k, v)))
        assert events == [("a", b"a1")]
        await producer.send(b"c1", partition_key="c")
        await producer.send(b"", partition_key="a")
        for _ in range(500):
            if len(events) == 3:
                break
            await asyncio.sleep(0.01)
        assert events == [("a", b"a1"), ("c", b"c1"), ("a", b"")]
        entries: dict[str, bytes] = {}
        view.for_each(entries.__setitem__)
        assert entries == {"c": b"c1"}
        await view.close()
        assert view.get("c") == b"c1"
        await client.close()  # the view was closed first: nothing left running

        client = sqa.Client(broker.service_url, operation_timeout_seconds=10)
        view = await client.create_table_view(topic)
        assert view.get("c") == b"c1"
        await client.close()  # closes the view with the client
        await view.close()  # quietly, the first time
        with pytest.raises(ConsumerNotInitialized):
            await view.close()

    asyncio.run(main())
