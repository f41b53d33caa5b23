"""The ``__compaction`` subscription exists from the moment a compaction threshold applies to a
topic (as in Pulsar: created at the earliest position when the topic loads, or when its policy
changes), so data published before the first compaction is not trimmed away; and truncating a
compacted topic moves it too."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pulsar
from admin_http import admin_json
from compaction_helpers import admin_path, compact, keyed_data, pairs, read_quiet, send_all
from official_client import official_client
from polling import wait_for

from starquake.broker.embedded import EmbeddedBroker

_ROLLING = {
    "managedLedgerMaxEntriesPerLedger": 20,
    "managedLedgerMinLedgerRolloverTimeMinutes": 0,
    "managedLedgerTrimIntervalSeconds": 0.1,
    "brokerServiceCompactionMonitorIntervalInSeconds": 0.1,
}


_UNCOMPACTED = "public/uncompacted"


def _uncompacted_namespace(broker: EmbeddedBroker) -> None:
    """A namespace whose compaction threshold policy (0) disables the broker's."""
    path = f"/admin/v2/namespaces/{_UNCOMPACTED}"
    assert admin_json(broker, "PUT", path)[0] == 204
    assert admin_json(broker, "PUT", path + "/compactionThreshold", 0)[0] == 204


def _topic(namespace: str = "public/default") -> str:
    return f"persistent://{namespace}/c-{uuid.uuid4().hex[:10]}"


def _internal(broker: EmbeddedBroker, topic: str) -> dict[str, Any]:
    body = admin_json(broker, "GET", admin_path(topic, "internalStats"))[1]
    assert isinstance(body, dict)
    return body


def _subscriptions(broker: EmbeddedBroker, topic: str) -> set[str]:
    body = admin_json(broker, "GET", admin_path(topic, "stats"))[1]
    assert isinstance(body, dict)
    return set(body["subscriptions"])


def _wait_trimmed(broker: EmbeddedBroker, client: pulsar.Client, messages: Any) -> None:
    """Publish to a topic nothing holds (no threshold, no subscription) after the others, and
    wait until its sealed ledgers are trimmed: the trims have looked at the other topics."""
    control = _topic(_UNCOMPACTED)
    send_all(client.create_producer(control, batching_enabled=False), messages)
    wait_for(lambda: len(_internal(broker, control)["ledgers"]) <= 2, "control ledgers trimmed")


def _latest(messages: list[tuple[str, bytes]]) -> dict[str, bytes]:
    latest: dict[str, bytes] = {}
    for key, value in messages:
        latest[key] = value
    return {key: value for key, value in latest.items() if value}


def test_a_threshold_keeps_the_data_published_before_the_first_compaction(
    tmp_path: Path,
) -> None:
    # a threshold far above what is published: no automatic compaction before the admin one
    settings = {**_ROLLING, "brokerServiceCompactionThresholdInBytes": 10**9}
    messages, _ = keyed_data(300, keys=20, deleted=2, seed=3)
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        client = official_client(broker)
        # loaded while the broker's threshold applies
        loaded = _topic()
        producer = client.create_producer(loaded, batching_enabled=False)
        assert _subscriptions(broker, loaded) == {"__compaction"}
        send_all(producer, messages)
        # loaded without a threshold; the topic policy set afterwards creates the cursor
        _uncompacted_namespace(broker)
        later = _topic(_UNCOMPACTED)
        late_producer = client.create_producer(later, batching_enabled=False)
        assert _subscriptions(broker, later) == set()
        path = admin_path(later, "compactionThreshold")
        assert admin_json(broker, "POST", path, 10**9)[0] == 204
        assert _subscriptions(broker, later) == {"__compaction"}
        send_all(late_producer, messages)

        _wait_trimmed(broker, client, messages)
        for topic in (loaded, later):
            assert len(_internal(broker, topic)["ledgers"]) >= 300 // 20
            full = read_quiet(client.create_reader(topic, pulsar.MessageId.earliest))
            assert pairs(full) == messages
            compact(broker, topic)
            reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=True)
            got = pairs(read_quiet(reader))
            assert dict(got) == _latest(messages) and len(got) == len(_latest(messages))
        client.close()


def test_a_topic_without_a_threshold_gets_no_compaction_subscription(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data", **_ROLLING) as broker:
        client = official_client(broker)
        topic = _topic()
        client.create_producer(topic).send(b"v", partition_key="k")
        assert _subscriptions(broker, topic) == set()
        assert "__compaction" not in _internal(broker, topic)["cursors"]
        client.close()
