"""Lookups between brokers of a cluster, through the official client and ours: two brokers
joined over a real nats-server each serve the topics of the bundles they own. A client given
either broker's binary or HTTP URL is redirected (LOOKUP Redirect, authoritative; HTTP 307)
to the owner of each topic and produces and consumes there; a producer that asks a broker for
a topic it does not serve is refused with ServiceNotReady; an HTTP lookup at the wrong broker
answers 307 to the owner's lookup."""

from __future__ import annotations

import contextlib
import http.client
import types
import urllib.parse
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from admin_http import admin_json
from polling import wait_for
from raw_connection import RawConnection

import starquake.client
from starquake.broker.cluster_join import join_cluster
from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.errors import ServiceNotReadyError
from starquake.cluster.membership import ClusterMembership
from starquake.cluster.nodes import JetStreamNode
from starquake.common.topic_name import TopicName
from starquake.protocol._generated import starquake_wire_pb2 as pb

LEASE = 5.0
TOPICS = [f"persistent://public/default/lookup-{i}" for i in range(12)]


@contextlib.contextmanager
def _cluster(
    base: Path, node: JetStreamNode, lease: float
) -> Iterator[list[tuple[EmbeddedBroker, ClusterMembership]]]:
    """Two in-process brokers joined to one cluster; a lost bundle closes its topics."""
    cluster = f"c{uuid.uuid4().hex[:6]}"
    brokers = [EmbeddedBroker(base / f"b{i}").start() for i in range(2)]
    members: list[tuple[EmbeddedBroker, ClusterMembership]] = []
    try:
        for broker in brokers:
            service = broker.service
            joining = join_cluster(service, [node.url], cluster, service.urls, lease)
            members.append((broker, broker.call(joining)))
        yield members
    finally:
        for broker, member in members:
            broker.call(member.leave())
        for broker in brokers:
            broker.stop()


@pytest.fixture(scope="module")
def pair(
    tmp_path_factory: pytest.TempPathFactory, jetstream_node: JetStreamNode
) -> Iterator[list[EmbeddedBroker]]:
    with _cluster(tmp_path_factory.mktemp("cluster-lookup"), jetstream_node, LEASE) as members:
        yield [broker for broker, _ in members]


def _redirect(broker: EmbeddedBroker, path: str) -> str | None:
    """Where ``GET path`` at ``broker`` redirects (asserting a 307), not following it."""
    web = urllib.parse.urlsplit(broker.web_service_url)
    conn = http.client.HTTPConnection(web.hostname or "127.0.0.1", web.port, timeout=15)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
    finally:
        conn.close()
    assert response.status == 307, response.status
    return response.getheader("Location")


def _owner(brokers: list[EmbeddedBroker], topic: str) -> EmbeddedBroker:
    """The broker serving ``topic`` (asking the first one; the answer takes the bundle)."""
    name = TopicName.parse(topic)
    owner = brokers[0].call(brokers[0].service.placement.owner(name, False))
    if owner is None:
        return brokers[0]
    found = next(b for b in brokers if b.service_url == owner.broker_url)
    found.call(found.service.placement.owner(name, True))  # the client's authoritative ask
    return found


@pytest.mark.parametrize("module", [pulsar, starquake.client], ids=["official", "starquake"])
def test_clients_are_redirected_to_each_topics_owner(
    pair: list[EmbeddedBroker], module: types.ModuleType
) -> None:
    owners = {topic: _owner(pair, topic) for topic in TOPICS}
    assert set(map(id, owners.values())) == set(map(id, pair)), "both brokers own bundles"
    # a client given either broker's binary or HTTP URL
    for url in [u for b in pair for u in (b.service_url, b.web_service_url)]:
        client = module.Client(
            url, operation_timeout_seconds=15, logger=module.ConsoleLogger(module.LoggerLevel.Warn)
        )
        try:
            for topic in TOPICS:
                sub = f"s-{uuid.uuid4().hex[:6]}"
                consumer = client.subscribe(topic, sub)
                client.create_producer(topic).send(b"to " + topic.encode())
                msg = consumer.receive(timeout_millis=15_000)
                assert msg.data() == b"to " + topic.encode()
                consumer.acknowledge(msg)
                consumer.close()
                # the topic lives at its owner only
                assert topic in owners[topic].service.topics
                other = next(b for b in pair if b is not owners[topic])
                assert topic not in other.service.topics
        finally:
            client.close()


def test_a_producer_at_a_broker_that_does_not_serve_the_topic_is_refused(
    pair: list[EmbeddedBroker],
) -> None:
    topic = TOPICS[0]
    owner = _owner(pair, topic)
    other = next(b for b in pair if b is not owner)
    with RawConnection(other.broker_port) as raw:
        raw.handshake()
        cmd = pb.BaseCommand(type=pb.BaseCommand.PRODUCER)
        cmd.producer.topic = topic
        cmd.producer.producer_id = 1
        cmd.producer.request_id = 1
        raw.send_command(cmd)
        reply = raw.next(timeout=15)
    assert reply.type == pb.BaseCommand.ERROR
    assert reply.error.error == pb.ServiceNotReady


def test_http_lookup_at_the_wrong_broker_redirects_to_the_owner(
    pair: list[EmbeddedBroker],
) -> None:
    topic = TOPICS[1]
    owner = _owner(pair, topic)
    other = next(b for b in pair if b is not owner)
    path = "/lookup/v2/topic/persistent/public/default/" + topic.rsplit("/", 1)[1]
    assert _redirect(other, path) == f"{owner.web_service_url}{path}?authoritative=true"


def test_clients_follow_a_bundle_to_its_new_owner(
    tmp_path: Path, jetstream_node: JetStreamNode
) -> None:
    """The owner stops renewing (cut off from the store); once its lease ends the other broker
    takes the bundle, the old owner closes the topic at its next renewal round, and the
    client's producer and consumer reconnect to the new owner and go on."""
    with _cluster(tmp_path, jetstream_node, 2.0) as members:
        brokers = [broker for broker, _ in members]
        topic = TOPICS[2]
        old = _owner(brokers, topic)
        new, new_member = next((b, m) for b, m in members if b is not old)
        old_member = next(m for b, m in members if b is old)
        client = pulsar.Client(
            old.service_url,
            operation_timeout_seconds=30,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            consumer = client.subscribe(topic, "s")
            producer = client.create_producer(topic)
            producer.send(b"before")
            assert consumer.receive(timeout_millis=10_000).data() == b"before"

            def reported() -> bool:  # the old owner's load report shows its topic
                seen = new.call(new_member.registry.broker(old_member.me.broker_id))
                return seen is not None and seen.load.topics >= 1 and seen.load.bundles >= 1

            wait_for(reported, "the old owner's load report", timeout=30)
            assert old_member._heartbeat is not None
            old_member._heartbeat.cancel()
            name = TopicName.parse(topic)

            def taken_over() -> bool:
                return new.call(new.service.placement.owner(name, True)) is None

            wait_for(taken_over, "the other broker to take the bundle over", timeout=30)
            old.call(old_member._beat())  # reports the loss: the topic is closed there
            assert topic not in old.service.topics
            producer.send(b"after")  # reconnected through a lookup: at the new owner
            assert consumer.receive(timeout_millis=30_000).data() == b"after"
            assert topic in new.service.topics
        finally:
            client.close()


def test_every_broker_lists_the_live_brokers_and_the_same_leader(
    pair: list[EmbeddedBroker],
) -> None:
    ids = sorted(urllib.parse.urlsplit(b.web_service_url).netloc for b in pair)
    leaders = []
    for broker in pair:
        assert admin_json(broker, "GET", "/admin/v2/brokers/standalone") == (200, ids)
        status, leader = admin_json(broker, "GET", "/admin/v2/brokers/leaderBroker")
        assert status == 200 and leader["brokerId"] in ids
        assert leader["serviceUrl"] == f"http://{leader['brokerId']}"
        leaders.append(leader)
    assert leaders[0] == leaders[1]


def test_unloading_a_bundle_gives_it_up(pair: list[EmbeddedBroker]) -> None:
    topic = TOPICS[3]
    owner = _owner(pair, topic)
    service = owner.service
    bundles = service.placement.bundles("public/default")
    bundle = bundles.find(topic).name
    name = TopicName.parse(topic)
    assert service.placement.membership is not None
    assert service.placement.membership.owns(topic, "public/default", bundles)
    path = f"/admin/v2/namespaces/public/default/{bundle}/unload"
    assert admin_json(owner, "PUT", path)[0] == 204
    assert not service.placement.membership.owns(topic, "public/default", bundles)
    with pytest.raises(ServiceNotReadyError):
        service.placement.check_served(name)
    _owner(pair, topic)  # the next lookup places the bundle again


def test_splitting_a_bundle_gives_it_up_and_places_its_halves_again(
    pair: list[EmbeddedBroker],
) -> None:
    topic = TOPICS[4]
    owner = _owner(pair, topic)
    client = pulsar.Client(owner.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        producer = client.create_producer(topic)
        loaded = owner.service.topics[topic]
        bundle = owner.service.placement.bundles("public/default").find(topic).name
        # every broker of a cluster sees one namespace policy; these two keep their own
        for broker in (owner, *[b for b in pair if b is not owner]):
            path = f"/admin/v2/namespaces/public/default/{bundle}/split"
            assert admin_json(broker, "PUT", path)[0] == 204
        assert loaded.closed  # its bundle is gone: placed again at the next lookup
        member = owner.service.placement.membership
        assert member is not None
        assert all(ref.bundle != bundle for ref in member.ownership.owned())
        producer.send(b"after the split")  # the producer looks the topic up again
        halves = owner.service.placement.bundles("public/default")
        assert halves.find(topic).name != bundle
        assert len(halves.bundles) == 5
    finally:
        client.close()


def test_topic_admin_requests_are_sent_to_the_owner(pair: list[EmbeddedBroker]) -> None:
    topic = f"persistent://public/default/admin-{uuid.uuid4().hex[:8]}"
    owner = _owner(pair, topic)
    other = next(b for b in pair if b is not owner)
    client = pulsar.Client(owner.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        client.create_producer(topic).send(b"counted")
    finally:
        client.close()
    path = "/admin/v2/persistent/public/default/" + topic.rsplit("/", 1)[1] + "/stats"
    assert _redirect(other, path) == owner.web_service_url + path
    status, stats = admin_json(owner, "GET", path)
    assert status == 200 and stats["msgInCounter"] == 1
