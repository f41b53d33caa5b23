"""Authorization on the binary protocol, with the official client and ours over token
authentication: producers need produce, consumers consume, lookups either; grants are gained
and lost through the admin API; super users and tenant admins need no grant."""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from authz_setup import SUPER_USER, call, secured_broker, token
from polling import wait_for

import starquake.client
from starquake.broker.embedded import EmbeddedBroker

MODULES = [pytest.param(pulsar, id="official"), pytest.param(starquake.client, id="starquake")]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("authz-clients") / "data"
    running = secured_broker(data)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def clients() -> Iterator[list[Any]]:
    made: list[Any] = []
    yield made
    for client in made:
        client.close()


def connect(module: types.ModuleType, broker: EmbeddedBroker, role: str, made: list[Any]) -> Any:
    client = module.Client(
        broker.service_url,
        authentication=module.AuthenticationToken(token(role)),
        operation_timeout_seconds=5,
        logger=module.ConsoleLogger(module.LoggerLevel.Error),
    )
    made.append(client)
    return client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def topic_path(topic: str) -> str:
    return "/admin/v2/" + topic.replace("://", "/")


def grant(broker: EmbeddedBroker, topic: str, role: str, actions: list[str]) -> None:
    path = f"{topic_path(topic)}/permissions/{role}"
    assert call(broker, "POST", path, "acme-admin", actions) == (204, None)


def revoke(broker: EmbeddedBroker, topic: str, role: str) -> None:
    assert call(broker, "DELETE", f"{topic_path(topic)}/permissions/{role}", "acme-admin")[0] == 204


def publishers(broker: EmbeddedBroker, topic: str) -> int:
    status, stats = call(broker, "GET", f"{topic_path(topic)}/stats", SUPER_USER)
    assert status == 200
    return len(stats["publishers"])


def consumers(broker: EmbeddedBroker, topic: str, subscription: str) -> int:
    status, stats = call(broker, "GET", f"{topic_path(topic)}/stats", SUPER_USER)
    assert status == 200
    return len(stats["subscriptions"].get(subscription, {}).get("consumers", []))


@pytest.mark.parametrize("module", MODULES)
def test_producer_gains_and_loses_produce(
    broker: EmbeddedBroker, module: types.ModuleType, clients: list[Any]
) -> None:
    topic, role = f"persistent://acme/app/{unique('p')}", unique("writer")
    client = connect(module, broker, role, clients)
    with pytest.raises(module.AuthorizationError):
        client.create_producer(topic)

    grant(broker, topic, role, ["produce"])
    producer = client.create_producer(topic, block_if_queue_full=True)
    producer.send(b"allowed")
    assert publishers(broker, topic) == 1

    revoke(broker, topic, role)
    # as Pulsar does, the producers of a role that lost its permission are closed ...
    wait_for(lambda: publishers(broker, topic) == 0, "the producer to be closed")
    # ... and a new one is refused
    with pytest.raises(module.AuthorizationError):
        client.create_producer(topic)
    # consume is not produce
    grant(broker, topic, role, ["consume"])
    with pytest.raises(module.AuthorizationError):
        client.create_producer(topic)


@pytest.mark.parametrize("module", MODULES)
def test_consumer_gains_and_loses_consume(
    broker: EmbeddedBroker, module: types.ModuleType, clients: list[Any]
) -> None:
    topic, role = f"persistent://acme/app/{unique('c')}", unique("reader")
    client = connect(module, broker, role, clients)
    with pytest.raises(module.AuthorizationError):
        client.subscribe(topic, "s")

    grant(broker, topic, role, ["consume"])
    consumer = client.subscribe(topic, "s")
    writer = connect(module, broker, SUPER_USER, clients).create_producer(topic)
    writer.send(b"hello")
    message = consumer.receive(timeout_millis=5000)
    assert message.data() == b"hello"
    consumer.acknowledge(message)
    # consume does not allow producing
    with pytest.raises(module.AuthorizationError):
        client.create_producer(topic)

    revoke(broker, topic, role)
    wait_for(lambda: consumers(broker, topic, "s") == 0, "the consumer to be closed")
    with pytest.raises(module.AuthorizationError):
        client.subscribe(topic, "s2")


@pytest.mark.parametrize("module", MODULES)
def test_lookups_need_produce_or_consume(
    broker: EmbeddedBroker, module: types.ModuleType, clients: list[Any]
) -> None:
    topic, role = f"persistent://acme/app/{unique('l')}", unique("looker")
    assert call(broker, "PUT", f"{topic_path(topic)}/partitions", "acme-admin", 2)[0] == 204
    client = connect(module, broker, role, clients)
    with pytest.raises(module.AuthorizationError):
        client.get_topic_partitions(topic)
    assert call(broker, "GET", f"/lookup/v2/topic/{topic.replace('://', '/')}", role)[0] == 403

    # a grant on the partitioned topic covers its partitions
    grant(broker, topic, role, ["produce"])
    assert client.get_topic_partitions(topic) == [f"{topic}-partition-0", f"{topic}-partition-1"]
    assert call(broker, "GET", f"/lookup/v2/topic/{topic.replace('://', '/')}", role)[0] == 200
    producer = client.create_producer(topic)
    producer.send(b"to a partition")


@pytest.mark.parametrize("module", MODULES)
def test_namespace_grant_covers_every_topic(
    broker: EmbeddedBroker, module: types.ModuleType, clients: list[Any]
) -> None:
    namespace, role = f"acme/{unique('ns')}", unique("app")
    assert call(broker, "PUT", f"/admin/v2/namespaces/{namespace}", "acme-admin")[0] == 204
    path = f"/admin/v2/namespaces/{namespace}/permissions/{role}"
    assert call(broker, "POST", path, "acme-admin", ["produce"])[0] == 204
    client = connect(module, broker, role, clients)
    for name in ("a", "b"):
        client.create_producer(f"persistent://{namespace}/{name}").send(b"x")
    with pytest.raises(module.AuthorizationError):
        client.subscribe(f"persistent://{namespace}/a", "s")
    with pytest.raises(module.AuthorizationError):
        client.create_producer(f"persistent://acme/app/{unique('elsewhere')}")


@pytest.mark.parametrize("module", MODULES)
def test_super_user_and_tenant_admins(
    broker: EmbeddedBroker, module: types.ModuleType, clients: list[Any]
) -> None:
    for role, tenant in ((SUPER_USER, "other"), (SUPER_USER, "acme"), ("acme-admin", "acme")):
        topic = f"persistent://{tenant}/{'ns' if tenant == 'other' else 'app'}/{unique('su')}"
        client = connect(module, broker, role, clients)
        consumer = client.subscribe(topic, "s")
        client.create_producer(topic).send(role.encode())
        assert consumer.receive(timeout_millis=5000).data() == role.encode()
    # a tenant admin has no rights in another tenant
    client = connect(module, broker, "acme-admin", clients)
    with pytest.raises(module.AuthorizationError):
        client.create_producer(f"persistent://other/ns/{unique('x')}")
    with pytest.raises(module.AuthorizationError):
        client.subscribe(f"persistent://other/ns/{unique('x')}", "s")


@pytest.mark.parametrize("module", MODULES)
def test_subscription_roles(
    broker: EmbeddedBroker, module: types.ModuleType, clients: list[Any]
) -> None:
    namespace = f"acme/{unique('subs')}"
    assert call(broker, "PUT", f"/admin/v2/namespaces/{namespace}", "acme-admin")[0] == 204
    base = f"/admin/v2/namespaces/{namespace}/permissions"
    for role in ("billing", "audit"):
        assert call(broker, "POST", f"{base}/{role}", "acme-admin", ["consume"])[0] == 204
    assert (
        call(broker, "POST", f"{base}/subscription/invoices", "acme-admin", ["billing"])[0] == 204
    )
    topic = f"persistent://{namespace}/t"
    connect(module, broker, "billing", clients).subscribe(topic, "invoices")
    audit = connect(module, broker, "audit", clients)
    with pytest.raises(module.AuthorizationError):
        audit.subscribe(topic, "invoices")
    audit.subscribe(topic, "audit-trail")


def test_http_lookups_of_the_official_client(broker: EmbeddedBroker, clients: list[Any]) -> None:
    topic, role = f"persistent://acme/app/{unique('http')}", unique("web")
    client = pulsar.Client(
        broker.web_service_url,
        authentication=pulsar.AuthenticationToken(token(role)),
        operation_timeout_seconds=5,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    clients.append(client)
    # the broker answers the HTTP lookup 403; this client reports any refused one so
    with pytest.raises(pulsar.ConnectError):
        client.create_producer(topic)
    grant(broker, topic, role, ["produce"])
    client.create_producer(topic).send(b"over an HTTP lookup")
