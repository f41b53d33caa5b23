"""Topic and subscription endpoints of the admin API over real HTTP, with the official client
producing and consuming: Pulsar's paths, JSON field names and status codes."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import admin_json as _call
from admin_http import http_call

from starquake.broker.embedded import EmbeddedBroker

NS = "/admin/v2/persistent/public/default"


def _reason(reply: tuple[int, Any]) -> str:
    assert isinstance(reply[1], dict), reply
    return str(reply[1]["reason"])


def _name() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def _produce(broker: EmbeddedBroker, topic: str, count: int, **kwargs: Any) -> list[Any]:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False, **kwargs)
        ids = [producer.send(f"m{i}".encode(), properties={"i": str(i)}) for i in range(count)]
        producer.close()
        return ids
    finally:
        client.close()


def test_create_list_delete_non_partitioned(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    assert _call(broker, "PUT", f"{NS}/{name}") == (204, None)
    assert _call(broker, "PUT", f"{NS}/{name}")[0] == 409
    status, topics = _call(broker, "GET", NS)
    assert status == 200 and full in topics
    assert _call(broker, "GET", f"{NS}/{name}/partitions") == (200, {"partitions": 0})
    assert _call(broker, "DELETE", f"{NS}/{name}") == (204, None)
    assert full not in _call(broker, "GET", NS)[1]
    assert _call(broker, "DELETE", f"{NS}/{name}")[0] == 404
    # names Pulsar refuses, unknown namespaces
    assert _call(broker, "PUT", "/admin/v2/persistent/public/nowhere/x")[0] == 404
    assert _call(broker, "GET", "/admin/v2/persistent/public/nowhere")[0] == 404
    # an encoded slash is a path separator: no such route
    assert _call(broker, "PUT", f"{NS}/bad%2Fname")[0] == 404


def test_a_deleted_topic_s_files_are_removed_off_the_event_loop(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removing a large topic's files takes a fraction of a second (unlinking gigabytes):
    the broker's event loop only renames the directory, a worker thread removes it."""
    name = _name()
    _produce(broker, f"persistent://public/default/{name}", 3)
    factory = broker.service.storage.factory  # type: ignore[attr-defined]
    removals: list[tuple[int, Path]] = []
    remove = factory.remove_detached

    def spy(detached: Path) -> None:
        removals.append((threading.get_ident(), detached))
        assert detached.is_dir() and any(p.suffix == ".log" for p in detached.iterdir())
        remove(detached)

    monkeypatch.setattr(factory, "remove_detached", spy)

    async def loop_thread() -> int:
        return threading.get_ident()

    assert _call(broker, "DELETE", f"{NS}/{name}") == (204, None)
    assert len(removals) == 1
    thread, detached = removals[0]
    assert thread != broker.call(loop_thread())
    assert not detached.exists()
    assert not factory.exists(f"persistent://public/default/{name}")


def test_explicit_creation_works_with_auto_creation_off(tmp_path: Any) -> None:
    with EmbeddedBroker(tmp_path / "d", allowAutoTopicCreation=False) as broker:
        assert _call(broker, "PUT", f"{NS}/made")[0] == 204
        _produce(broker, "persistent://public/default/made", 1)


def test_partitioned_topics_list_grow_and_delete(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    assert _call(broker, "PUT", f"{NS}/{name}/partitions", 2)[0] == 204
    assert _call(broker, "GET", f"{NS}/partitioned") == (200, [full])
    assert _call(broker, "PUT", f"{NS}/{name}")[0] == 409
    # only up (422 Unprocessable, as Pulsar), only a positive count (406 Not Acceptable), and
    # a number (400); the current count again changes nothing
    for bad, expected in ((1, 422), (-3, 406), (0, 406), ("two", 400)):
        status, body = _call(broker, "POST", f"{NS}/{name}/partitions", bad)
        assert status == expected and body["reason"], bad
    assert _call(broker, "PUT", f"{NS}/{_name()}/partitions", 0)[0] == 406
    assert _call(broker, "POST", f"{NS}/{name}/partitions", 2) == (204, None)
    assert _call(broker, "GET", f"{NS}/{name}/partitions") == (200, {"partitions": 2})
    assert _call(broker, "POST", f"{NS}/{name}/partitions", 3)[0] == 204
    _produce(broker, full, 6)
    status, stats = _call(broker, "GET", f"{NS}/{name}/partitioned-stats")
    assert status == 200
    assert stats["metadata"] == {"partitions": 3}
    assert stats["msgInCounter"] == 6
    assert sum(p["msgInCounter"] for p in stats["partitions"].values()) == 6
    assert _call(broker, "GET", f"{NS}/{name}/stats")[0] == 404  # ask partitioned-stats
    assert _call(broker, "DELETE", f"{NS}/{name}/partitions") == (204, None)
    assert _call(broker, "GET", f"{NS}/partitioned") == (200, [])
    assert not [t for t in _call(broker, "GET", NS)[1] if name in t]


def test_stats_have_pulsars_fields(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(
            full, "ks", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="c1"
        )
        producer = client.create_producer(full, producer_name="p1", batching_enabled=False)
        for i in range(10):
            producer.send(b"x" * 100, partition_key=f"k{i}")
        for _ in range(4):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        _wait_for_backlog(broker, name, "ks", 6)  # the client sends acks in groups
        status, stats = _call(broker, "GET", f"{NS}/{name}/stats")
    finally:
        client.close()
    assert status == 200
    assert stats["msgInCounter"] == 10
    assert stats["bytesInCounter"] > 1000
    assert stats["msgRateIn"] > 0 and stats["msgThroughputIn"] > 0
    assert stats["storageSize"] > 1000
    for field in ("msgRateOut", "msgThroughputOut", "averageMsgSize", "backlogSize"):
        assert isinstance(stats[field], (int, float)), field
    (publisher,) = stats["publishers"]
    assert publisher["producerName"] == "p1"
    assert publisher["msgRateIn"] > 0 and publisher["accessMode"] == "Shared"
    assert publisher["clientVersion"]
    sub = stats["subscriptions"]["ks"]
    assert sub["type"] == "Key_Shared"
    assert sub["msgBacklog"] == 6
    assert sub["msgOutCounter"] == 10
    assert sub["isDurable"] is True
    (c1,) = sub["consumers"]
    assert c1["consumerName"] == "c1"
    assert c1["keyHashRanges"]
    for text in c1["keyHashRanges"]:  # "[start, end]", inclusive
        start, end = json.loads(text)
        assert 0 <= start <= end
    assert c1["unackedMessages"] == 6
    assert c1["msgOutCounter"] == 10
    for field in ("availablePermits", "address", "connectedSince", "msgRateOut"):
        assert field in c1, field


def test_internal_stats_and_last_message_id(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    assert _call(broker, "PUT", f"{NS}/{name}/subscription/s")[0] == 204
    ids = _produce(broker, full, 3)
    status, internal = _call(broker, "GET", f"{NS}/{name}/internalStats")
    assert status == 200
    assert internal["numberOfEntries"] == 3
    last = ids[-1]
    assert internal["lastConfirmedEntry"] == f"{last.ledger_id()}:{last.entry_id()}"
    assert internal["ledgers"][-1]["entries"] == 3
    cursor = internal["cursors"]["s"]
    assert cursor["markDeletePosition"] == f"{last.ledger_id()}:-1"
    status, mid = _call(broker, "GET", f"{NS}/{name}/lastMessageId")
    assert status == 200
    assert (mid["ledgerId"], mid["entryId"]) == (last.ledger_id(), last.entry_id())
    assert _call(broker, "GET", f"{NS}/never-made/internalStats")[0] == 404


def _backlog(broker: EmbeddedBroker, name: str, sub: str) -> int:
    status, stats = _call(broker, "GET", f"{NS}/{name}/stats")
    assert status == 200, stats
    return int(stats["subscriptions"][sub]["msgBacklog"])


def test_subscription_create_skip_clear_and_delete(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    _produce(broker, full, 2)
    # created at "latest" by default, at the earliest message when asked
    assert _call(broker, "PUT", f"{NS}/{name}/subscription/late") == (204, None)
    earliest = {"ledgerId": -1, "entryId": -1, "partitionIndex": -1}
    assert _call(broker, "PUT", f"{NS}/{name}/subscription/early", earliest) == (204, None)
    assert _call(broker, "PUT", f"{NS}/{name}/subscription/early")[0] == 409
    _produce(broker, full, 8)
    assert _call(broker, "GET", f"{NS}/{name}/subscriptions") == (200, ["early", "late"])
    assert _backlog(broker, name, "late") == 8
    assert _backlog(broker, name, "early") == 10
    assert _call(broker, "POST", f"{NS}/{name}/subscription/early/skip/3")[0] == 204
    assert _backlog(broker, name, "early") == 7
    assert _call(broker, "POST", f"{NS}/{name}/subscription/early/skip/-1")[0] == 400
    assert _call(broker, "POST", f"{NS}/{name}/subscription/nope/skip/1")[0] == 404
    assert _backlog(broker, name, "early") == 7
    assert _call(broker, "POST", f"{NS}/{name}/subscription/early/skip_all")[0] == 204
    assert _backlog(broker, name, "early") == 0
    # bad message-id bodies change nothing
    for bad in (b"{not json", {"ledgerId": "x"}, [1, 2]):
        assert _call(broker, "PUT", f"{NS}/{name}/subscription/other", bad)[0] == 400
    assert _call(broker, "GET", f"{NS}/{name}/subscriptions") == (200, ["early", "late"])
    assert _call(broker, "DELETE", f"{NS}/{name}/subscription/late") == (204, None)
    assert _call(broker, "DELETE", f"{NS}/{name}/subscription/late")[0] == 404
    assert _call(broker, "GET", f"{NS}/{name}/subscriptions") == (200, ["early"])


def test_delete_with_clients_needs_force(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        client.subscribe(full, "busy")
        status, body = _call(broker, "DELETE", f"{NS}/{name}/subscription/busy")
        assert status == 412 and "consumers" in body["reason"]
        assert _call(broker, "DELETE", f"{NS}/{name}")[0] == 412
        assert _call(broker, "GET", f"{NS}/{name}/subscriptions") == (200, ["busy"])
        assert _call(broker, "DELETE", f"{NS}/{name}/subscription/busy?force=true")[0] == 204
        assert _call(broker, "DELETE", f"{NS}/{name}?force=true")[0] == 204
    finally:
        client.close()


def test_reset_cursor_by_id_and_time_redelivers(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        consumer = client.subscribe(full, "r")
        ids = _produce(broker, full, 5)
        for _ in range(5):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        third = ids[2]
        body = {"ledgerId": third.ledger_id(), "entryId": third.entry_id()}
        assert _call(broker, "POST", f"{NS}/{name}/subscription/r/resetcursor", body)[0] == 204
        got = [consumer.receive(timeout_millis=10000).data() for _ in range(3)]
        assert got == [b"m2", b"m3", b"m4"]
        before = int(time.time() * 1000) - 60_000
        path = f"{NS}/{name}/subscription/r/resetcursor/{before}"
        assert _call(broker, "POST", path)[0] == 204
        got = [consumer.receive(timeout_millis=10000).data() for _ in range(5)]
        assert got == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    finally:
        client.close()


def test_expire_messages(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    assert _call(broker, "PUT", f"{NS}/{name}/subscription/e")[0] == 204
    _produce(broker, full, 4)
    assert _call(broker, "POST", f"{NS}/{name}/subscription/e/expireMessages/3600")[0] == 204
    assert _backlog(broker, name, "e") == 4  # none is an hour old
    time.sleep(1.2)  # scenario: the messages must be more than a second old (age only grows)
    assert _call(broker, "POST", f"{NS}/{name}/subscription/e/expireMessages/1")[0] == 204
    assert _backlog(broker, name, "e") == 0
    status, stats = _call(broker, "GET", f"{NS}/{name}/stats")
    assert status == 200
    assert stats["subscriptions"]["e"]["totalMsgExpired"] == 4


def _wait_for_backlog(broker: EmbeddedBroker, name: str, sub: str, expected: int) -> None:
    deadline = time.monotonic() + 10
    while _backlog(broker, name, sub) != expected:
        assert time.monotonic() < deadline, f"backlog of {sub} never became {expected}"
        time.sleep(0.05)


def _get(broker: EmbeddedBroker, path: str) -> tuple[bytes, dict[str, str]]:
    with urllib.request.urlopen(f"{broker.web_service_url}{path}", timeout=10) as resp:
        return resp.read(), dict(resp.headers)


def test_peek_and_get_message_by_id(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    assert _call(broker, "PUT", f"{NS}/{name}/subscription/p")[0] == 204
    ids = _produce(broker, full, 3, producer_name="peeker")
    body, headers = _get(broker, f"{NS}/{name}/subscription/p/position/2")
    assert body == b"m1"
    assert headers["X-Pulsar-Message-ID"] == f"{ids[1].ledger_id()}:{ids[1].entry_id()}"
    assert headers["X-Pulsar-PROPERTY-i"] == "1"
    assert headers["X-Pulsar-producer-name"] == "peeker"
    path = f"{NS}/{name}/ledger/{ids[2].ledger_id()}/entry/{ids[2].entry_id()}"
    body, headers = _get(broker, path)
    assert body == b"m2" and headers["X-Pulsar-PROPERTY-i"] == "2"
    assert _call(broker, "GET", f"{NS}/{name}/subscription/p/position/9")[0] == 404
    assert _call(broker, "GET", f"{NS}/{name}/ledger/{ids[2].ledger_id()}/entry/99")[0] == 404


def test_terminate_refuses_producers_and_ends_consumers(broker: EmbeddedBroker) -> None:
    from starquake.client import Client, TopicTerminated

    name = _name()
    full = f"persistent://public/default/{name}"
    official = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    ours = Client(broker.service_url)
    try:
        theirs = official.subscribe(full, "official")
        consumer = ours.subscribe(full, "ours")
        ids = _produce(broker, full, 2)
        status, last = _call(broker, "POST", f"{NS}/{name}/terminate")
        assert status == 200
        assert (last["ledgerId"], last["entryId"]) == (ids[1].ledger_id(), ids[1].entry_id())
        assert _call(broker, "POST", f"{NS}/{name}/terminate")[1] == last  # again: same answer
        with pytest.raises(pulsar.TopicTerminated):
            _produce(broker, full, 1)
        with pytest.raises(TopicTerminated):
            ours.create_producer(full)
        for _ in range(2):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
            theirs.acknowledge(theirs.receive(timeout_millis=5000))
        deadline = time.monotonic() + 10
        # the client keeps the end-of-topic flag on its per-topic consumer
        (impl,) = consumer._inner.front.consumers.values()
        while not impl.reached_end_of_topic:
            assert time.monotonic() < deadline, "our consumer was never told the topic ended"
            time.sleep(0.05)
        # the official client cannot take the command: it stays connected and idle instead
        time.sleep(0.3)
        assert theirs.is_connected()
        with pytest.raises(pulsar.Timeout):
            theirs.receive(timeout_millis=200)
    finally:
        ours.close()
        official.close()
    path = "/admin/v2/non-persistent/public/default/np/terminate"
    assert _call(broker, "POST", path)[0] == 412


def test_unload_keeps_data_and_subscriptions(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"persistent://public/default/{name}"
    assert _call(broker, "PUT", f"{NS}/{name}/subscription/u")[0] == 204
    _produce(broker, full, 3)
    assert _call(broker, "PUT", f"{NS}/{name}/unload") == (204, None)
    assert _backlog(broker, name, "u") == 3
    assert _call(broker, "PUT", f"{NS}/never-made/unload")[0] == 404


def test_non_persistent_topics_list_and_stats(broker: EmbeddedBroker) -> None:
    name = _name()
    full = f"non-persistent://public/default/{name}"
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        client.subscribe(full, "np")
        producer = client.create_producer(full)
        producer.send(b"x")
        path = "/admin/v2/non-persistent/public/default"
        assert full in _call(broker, "GET", path)[1]
        status, stats = _call(broker, "GET", f"{path}/{name}/stats")
    finally:
        client.close()
    assert status == 200
    assert stats["msgInCounter"] == 1
    assert stats["subscriptions"]["np"]["msgOutCounter"] == 1


def test_admin_changes_survive_kill_9(tmp_path: Any) -> None:
    """Every answered admin change was stored first: a broker process killed with SIGKILL
    comes back with the subscriptions where the API put them (nothing consumed, part skipped,
    everything cleared), the topic still terminated and the policies set."""
    from broker_process import BrokerProcess

    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    web = f"http://127.0.0.1:{broker.web_port}"
    policies = "/admin/v2/namespaces/public/default"
    try:
        name = _name()
        topic = f"persistent://public/default/{name}"
        earliest = {"ledgerId": -1, "entryId": -1}
        assert http_call(web, "PUT", f"{NS}/{name}/subscription/early", earliest)[0] == 204
        assert http_call(web, "PUT", f"{NS}/{name}/subscription/cleared", earliest)[0] == 204
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            ids = [producer.send(f"m{i}".encode()) for i in range(5)]
        finally:
            client.close()
        assert http_call(web, "PUT", f"{NS}/{name}/subscription/late")[0] == 204
        assert http_call(web, "POST", f"{NS}/{name}/subscription/early/skip/2")[0] == 204
        assert http_call(web, "POST", f"{NS}/{name}/subscription/cleared/skip_all")[0] == 204
        assert http_call(web, "POST", f"{NS}/{name}/terminate")[0] == 200
        assert http_call(web, "POST", f"{policies}/messageTTL", 3600)[0] == 204
        broker.kill()
        broker.start()
        status, raw = http_call(web, "GET", f"{NS}/{name}/stats")
        assert status == 200, raw
        subs = json.loads(raw)["subscriptions"]
        backlogs = {sub: subs[sub]["msgBacklog"] for sub in ("early", "late", "cleared")}
        assert backlogs == {"early": 3, "late": 0, "cleared": 0}
        status, raw = http_call(web, "GET", f"{NS}/{name}/lastMessageId")
        last = json.loads(raw)
        assert (last["ledgerId"], last["entryId"]) == (ids[-1].ledger_id(), ids[-1].entry_id())
        assert http_call(web, "GET", f"{policies}/messageTTL") == (200, b"3600")
        client = pulsar.Client(broker.url, operation_timeout_seconds=10)
        try:
            with pytest.raises(pulsar.TopicTerminated):
                client.create_producer(topic)
            consumer = client.subscribe(topic, "early")
            got = [consumer.receive(timeout_millis=10000).data() for _ in range(3)]
            assert got == [b"m2", b"m3", b"m4"]
        finally:
            client.close()
    finally:
        broker.stop()
