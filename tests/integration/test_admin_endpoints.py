"""The admin endpoints served so far: namespace deduplication and partitioned topics."""

from __future__ import annotations

import json

import pulsar
import pytest
from admin_http import http_call

from starquake.broker.embedded import EmbeddedBroker


def _call(broker: EmbeddedBroker, method: str, path: str, body: object = None) -> tuple[int, bytes]:
    return http_call(broker.web_service_url, method, path, body)


DEDUP = "/admin/v2/namespaces/public/default/deduplication"


def test_deduplication_policy_round_trip_and_errors(broker: EmbeddedBroker) -> None:
    assert _call(broker, "GET", DEDUP) == (204, b"")  # not set: the broker default applies
    assert _call(broker, "POST", DEDUP, True)[0] == 204
    assert _call(broker, "GET", DEDUP) == (200, b"true")
    status, body = _call(broker, "POST", DEDUP, "yes")
    assert status == 400 and "boolean" in json.loads(body)["reason"]
    assert _call(broker, "GET", "/admin/v2/namespaces/public/nowhere/deduplication")[0] == 404
    assert _call(broker, "DELETE", DEDUP)[0] == 204
    assert _call(broker, "GET", DEDUP) == (204, b"")


def test_turning_deduplication_on_applies_to_a_live_topic(
    broker: EmbeddedBroker, topic: str
) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, producer_name="p1")
        producer.send(b"a", sequence_id=5)
        assert _call(broker, "POST", DEDUP, True)[0] == 204
        producer.send(b"b", sequence_id=6)  # the producer reconnects to the reloaded topic
        producer.send(b"again", sequence_id=6)  # a duplicate now: not stored
        producer.send(b"c", sequence_id=7)
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(5000).data())
        assert got == [b"a", b"b", b"c"]
    finally:
        client.close()


@pytest.mark.parametrize("domain", ["persistent"])
def test_partitioned_topic_create_update_get(broker: EmbeddedBroker, domain: str) -> None:
    path = f"/admin/v2/{domain}/public/default/pt-admin/partitions"
    assert _call(broker, "GET", path) == (200, b'{"partitions": 0}')
    assert _call(broker, "PUT", path, 2)[0] == 204
    assert _call(broker, "PUT", path, 2)[0] == 409
    assert _call(broker, "POST", path, 1)[0] == 422  # partitions only grow
    assert _call(broker, "POST", path, 4)[0] == 204
    assert json.loads(_call(broker, "GET", path)[1]) == {"partitions": 4}
    assert _call(broker, "PUT", "/admin/v2/persistent/public/default/x/partitions", 0)[0] == 406
    client = pulsar.Client(broker.service_url)
    try:
        assert len(client.get_topic_partitions("persistent://public/default/pt-admin")) == 4
    finally:
        client.close()
