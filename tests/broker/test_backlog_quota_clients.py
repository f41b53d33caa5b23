"""Our client meets a backlog quota as the official one does (the same scenarios run with
both): with ``producer_request_hold`` its sends wait for the backlog to drop, with
``producer_exception`` they fail with ProducerBlockedQuotaExceededException, and a new
producer is refused with the policy's error."""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from admin_http import admin_json
from backlog_quota_helpers import Sends, refused
from official_client import make_client
from polling import wait_for

import starquake.client
from starquake.broker.embedded import EmbeddedBroker

QUOTA = "/admin/v2/namespaces/public/default/backlogQuota?backlogQuotaType=destination_storage"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data = tmp_path_factory.mktemp("quota") / "data"
    with EmbeddedBroker(data, backlogQuotaCheckIntervalInSeconds=0.2) as running:
        yield running


@pytest.fixture(params=["official", "starquake"])
def mod(request: pytest.FixtureRequest) -> types.ModuleType:
    return pulsar if request.param == "official" else starquake.client


@pytest.fixture
def client(mod: types.ModuleType, broker: EmbeddedBroker) -> Iterator[Any]:
    c = make_client(mod, broker)
    try:
        yield c
    finally:
        c.close()


def over_quota(broker: EmbeddedBroker, client: Any, policy: str) -> tuple[str, Any, Any]:
    """A topic (in a namespace of its own) with a consumer and a producer, over a 500-byte
    quota of ``policy``, once the broker has disconnected the producer."""
    namespace = f"public/q-{uuid.uuid4().hex[:8]}"
    assert admin_json(broker, "PUT", f"/admin/v2/namespaces/{namespace}")[0] == 204
    topic = f"persistent://{namespace}/t"
    consumer = client.subscribe(topic, "sub")
    producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=0)
    for i in range(10):
        producer.send(b"%03d" % i + b"x" * 97)
    quota = {"limitSize": 500, "limitTime": -1, "policy": policy}
    path = QUOTA.replace("public/default", namespace)
    assert admin_json(broker, "POST", path, quota)[0] == 204
    stats = f"/admin/v2/persistent/{namespace}/t/stats"
    wait_for(lambda: not admin_json(broker, "GET", stats)[1]["publishers"], "the disconnection")
    return topic, consumer, producer


def test_hold_keeps_sends_pending_until_the_backlog_drops(
    broker: EmbeddedBroker, client: Any, mod: types.ModuleType
) -> None:
    topic, consumer, producer = over_quota(broker, client, "producer_request_hold")
    with pytest.raises(mod.ProducerBlockedQuotaExceededError):
        client.create_producer(topic)
    sends = Sends()
    for i in range(3):
        producer.send_async(b"held-%d" % i, sends.callback)
    # Held: the producer stays off the topic and a new one is still refused, after the sends.
    assert refused(client, topic, mod)
    assert sends.count() == 0
    for _ in range(10):
        consumer.acknowledge(consumer.receive(5000))
    wait_for(lambda: sends.count() == 3, "the held sends")
    assert sends.results == [mod.Result.Ok] * 3
    assert [consumer.receive(5000).data() for _ in range(3)] == [b"held-0", b"held-1", b"held-2"]


def test_exception_fails_pending_and_new_sends(
    broker: EmbeddedBroker, client: Any, mod: types.ModuleType
) -> None:
    topic, consumer, producer = over_quota(broker, client, "producer_exception")
    with pytest.raises(mod.ProducerBlockedQuotaExceededException):
        client.create_producer(topic)
    sends = Sends()
    producer.send_async(b"refused", sends.callback)
    wait_for(lambda: sends.count() == 1, "the send to fail")
    assert sends.results == [mod.Result.ProducerBlockedQuotaExceededException]
    with pytest.raises(mod.ProducerBlockedQuotaExceededException):
        producer.send(b"refused too")
    for _ in range(10):
        consumer.acknowledge(consumer.receive(5000))
    stats = topic.replace("persistent://", "/admin/v2/persistent/") + "/stats"
    wait_for(lambda: admin_json(broker, "GET", stats)[1]["backlogSize"] < 500, "the ack")
    producer.send(b"accepted")
    assert consumer.receive(5000).data() == b"accepted"


def test_starquake_client_surfaces_the_quota_errors_with_their_codes(
    broker: EmbeddedBroker,
) -> None:
    client = make_client(starquake.client, broker)
    try:
        topic, _, _ = over_quota(broker, client, "producer_request_hold")
        with pytest.raises(starquake.client.ProducerBlockedQuotaExceededError) as caught:
            client.create_producer(topic)
        assert caught.value.error() == starquake.client.Result.ProducerBlockedQuotaExceededError
        assert "backlog quota exceeded" in str(caught.value)
    finally:
        client.close()
