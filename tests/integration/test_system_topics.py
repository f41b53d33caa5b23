"""System topics (``__change_events`` and Pulsar's other reserved names) are internal: the
admin API refuses to create them, clients cannot auto-create them, and topic listings hide
them unless the admin list asks ``includeSystemTopic=true``."""

from __future__ import annotations

import asyncio
import uuid

import pulsar
import pytest
from admin_http import admin_json as _call
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.system_topics import is_system_topic
from starquake.client.asyncio import Client as AsyncClient
from starquake.common.topic_name import TopicName

BASE = "/admin/v2/persistent/public/default"
REFUSED = "Cannot create topic in system topic format!"


@pytest.mark.parametrize(
    ("name", "system"),
    [
        ("persistent://public/default/__change_events", True),
        ("persistent://public/default/__change_events-partition-3", True),
        ("non-persistent://t/ns/__change_events", True),
        ("persistent://t/ns/__transaction_buffer_snapshot", True),
        ("persistent://t/ns/__transaction_buffer_snapshot_segments", True),
        ("persistent://t/ns/__transaction_buffer_snapshot_indexes", True),
        ("persistent://t/ns/orders-sub__transaction_pending_ack", True),
        ("persistent://pulsar/system/transaction_coordinator_assign-partition-0", True),
        ("persistent://pulsar/system/__transaction_log_7", True),
        ("persistent://public/default/__change_events_of_mine", False),
        ("persistent://public/default/change_events", False),
        ("persistent://public/default/__private", False),
        ("persistent://t/ns/transaction_coordinator_assign", False),
    ],
)
def test_system_topic_names(name: str, system: bool) -> None:
    assert is_system_topic(TopicName.parse(name)) is system


def test_admin_api_refuses_to_create_system_topics(broker: EmbeddedBroker) -> None:
    for path in (
        f"{BASE}/__change_events",
        "/admin/v2/non-persistent/public/default/__change_events",
        f"{BASE}/orders__transaction_pending_ack",
        f"{BASE}/__transaction_buffer_snapshot",
    ):
        assert _call(broker, "PUT", path) == (400, {"reason": REFUSED}), path
        assert _call(broker, "PUT", f"{path}/partitions", 2) == (400, {"reason": REFUSED}), path
    status, names = _call(broker, "GET", f"{BASE}?includeSystemTopic=true")
    assert status == 200 and names == []
    status, names = _call(broker, "GET", f"{BASE}/partitioned?includeSystemTopic=true")
    assert status == 200 and names == []
    # a name that only looks similar is an ordinary topic
    assert _call(broker, "PUT", f"{BASE}/__change_events_log") == (204, None)


def test_clients_cannot_auto_create_system_topics(broker: EmbeddedBroker) -> None:
    client = official_client(broker)
    try:
        for name in ("__change_events", "__transaction_buffer_snapshot"):
            topic = f"persistent://public/default/{name}"
            with pytest.raises(pulsar.NotAllowedError):
                client.create_producer(topic)
            with pytest.raises(pulsar.NotAllowedError):
                client.subscribe(topic, "s")
        with pytest.raises(pulsar.NotAllowedError):
            client.create_producer("non-persistent://public/default/__change_events")
        client.create_producer("persistent://public/default/ordinary").send(b"x")
    finally:
        client.close()
    status, names = _call(broker, "GET", f"{BASE}?includeSystemTopic=true")
    assert status == 200 and names == ["persistent://public/default/ordinary"]
    status, partitioned = _call(broker, "GET", f"{BASE}/partitioned?includeSystemTopic=true")
    assert status == 200 and partitioned == []


def test_listings_hide_existing_system_topics(broker: EmbeddedBroker) -> None:
    # a system topic that exists (as after moving a Pulsar namespace's metadata here)
    events = "persistent://public/default/__change_events"
    broker.create_partitioned_topic(events, 1)
    user = f"u-{uuid.uuid4().hex[:6]}"
    assert _call(broker, "PUT", f"{BASE}/{user}") == (204, None)
    user_topic = f"persistent://public/default/{user}"

    assert _call(broker, "GET", BASE) == (200, [user_topic])
    status, everything = _call(broker, "GET", f"{BASE}?includeSystemTopic=true")
    assert status == 200 and everything == sorted([f"{events}-partition-0", user_topic])
    assert _call(broker, "GET", f"{BASE}/partitioned") == (200, [])
    assert _call(broker, "GET", f"{BASE}/partitioned?includeSystemTopic=true") == (200, [events])

    async def topics_of_namespace() -> list[str]:
        client = AsyncClient(broker.service_url)
        try:
            return await client.get_topics_of_namespace("public/default")
        finally:
            await client.close()

    assert asyncio.run(topics_of_namespace()) == [user_topic]  # GET_TOPICS_OF_NAMESPACE
