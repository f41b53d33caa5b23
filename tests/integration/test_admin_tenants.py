"""Clusters, brokers, tenants and namespaces over HTTP: Pulsar's paths, bodies and status codes,
and bad input answered with a reason while nothing changes."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import pulsar
from admin_http import admin_json as _call
from admin_http import http_call
from broker_process import BrokerProcess

from starquake.broker.embedded import EmbeddedBroker

V2 = "/admin/v2"


def _reason(reply: tuple[int, Any]) -> str:
    _status, body = reply
    assert isinstance(body, dict), reply
    return str(body["reason"])


def test_clusters_and_brokers(broker: EmbeddedBroker) -> None:
    assert _call(broker, "GET", f"{V2}/clusters") == (200, ["standalone"])
    status, data = _call(broker, "GET", f"{V2}/clusters/standalone")
    assert status == 200
    assert data == {"serviceUrl": broker.web_service_url, "brokerServiceUrl": broker.service_url}
    host_port = broker.web_service_url.removeprefix("http://")
    assert _call(broker, "GET", f"{V2}/brokers/standalone") == (200, [host_port])
    assert _call(broker, "GET", f"{V2}/clusters/elsewhere")[0] == 404
    with urllib.request.urlopen(f"{broker.web_service_url}{V2}/brokers/health") as resp:
        assert resp.read() == b"ok"  # still the health check


def test_tenant_lifecycle(broker: EmbeddedBroker) -> None:
    assert _call(broker, "GET", f"{V2}/tenants") == (200, ["public"])
    info = {"adminRoles": ["ops"], "allowedClusters": ["standalone"]}
    assert _call(broker, "PUT", f"{V2}/tenants/acme", info) == (204, None)
    assert _call(broker, "GET", f"{V2}/tenants/acme") == (200, info)
    assert _call(broker, "PUT", f"{V2}/tenants/acme", info)[0] == 409
    assert _call(broker, "GET", f"{V2}/tenants") == (200, ["acme", "public"])
    changed = {"adminRoles": [], "allowedClusters": ["standalone"]}
    assert _call(broker, "POST", f"{V2}/tenants/acme", changed) == (204, None)
    assert _call(broker, "GET", f"{V2}/tenants/acme") == (200, changed)
    # a tenant with a namespace cannot go
    assert _call(broker, "PUT", f"{V2}/namespaces/acme/orders") == (204, None)
    assert "still has namespaces" in _reason(_call(broker, "DELETE", f"{V2}/tenants/acme"))
    assert _call(broker, "DELETE", f"{V2}/namespaces/acme/orders") == (204, None)
    assert _call(broker, "DELETE", f"{V2}/tenants/acme") == (204, None)
    assert _call(broker, "GET", f"{V2}/tenants/acme")[0] == 404
    assert _call(broker, "DELETE", f"{V2}/tenants/acme")[0] == 404


def test_bad_tenant_requests_change_nothing(broker: EmbeddedBroker) -> None:
    bad = [
        (("PUT", f"{V2}/tenants/bad%20name", {}), 412, "Tenant name is not valid"),
        (("PUT", f"{V2}/tenants/t1", b"{not json"), 400, "not valid JSON"),
        (("PUT", f"{V2}/tenants/t1", [1, 2]), 400, "TenantInfo"),
        (("PUT", f"{V2}/tenants/t1", {"adminRoles": "ops"}), 400, "adminRoles must be a list"),
        (("PUT", f"{V2}/tenants/t1", {"allowedClusters": []}), 412, "can not be empty"),
        (("PUT", f"{V2}/tenants/t1", {"allowedClusters": ["mars"]}), 412, "['mars'] do not exist"),
        (("POST", f"{V2}/tenants/nobody", {}), 404, "does not exist"),
    ]
    for (method, path, body), status, reason in bad:
        reply = _call(broker, method, path, body)
        assert reply[0] == status, (path, body, reply)
        assert reason in _reason(reply), (path, body, reply)
    assert _call(broker, "GET", f"{V2}/tenants") == (200, ["public"])


def test_namespace_lifecycle(broker: EmbeddedBroker) -> None:
    assert _call(broker, "GET", f"{V2}/namespaces/public") == (200, ["public/default"])
    assert _call(broker, "PUT", f"{V2}/namespaces/public/ns1") == (204, None)
    assert _call(broker, "PUT", f"{V2}/namespaces/public/ns1")[0] == 409
    status, policies = _call(broker, "GET", f"{V2}/namespaces/public/ns1")
    assert status == 200 and policies["bundles"] == {
        "boundaries": ["0x00000000", "0x40000000", "0x80000000", "0xc0000000", "0xffffffff"],
        "numBundles": 4,
    }
    assert _call(broker, "GET", f"{V2}/namespaces/public/ns1/bundles") == (200, policies["bundles"])
    assert _call(broker, "GET", f"{V2}/namespaces/public") == (
        200,
        ["public/default", "public/ns1"],
    )
    # with a topic in it, the namespace cannot be deleted
    client = pulsar.Client(broker.service_url)
    try:
        client.create_producer("persistent://public/ns1/orders").send(b"x")
    finally:
        client.close()
    reply = _call(broker, "DELETE", f"{V2}/namespaces/public/ns1")
    assert reply[0] == 409 and "non empty namespace" in _reason(reply)
    assert _call(broker, "PUT", f"{V2}/namespaces/public/ns2") == (204, None)
    assert _call(broker, "DELETE", f"{V2}/namespaces/public/ns2") == (204, None)
    assert _call(broker, "GET", f"{V2}/namespaces/public/ns2")[0] == 404


def test_bad_namespace_requests_change_nothing(broker: EmbeddedBroker) -> None:
    bad = [
        (("PUT", f"{V2}/namespaces/nobody/ns"), 404, "Tenant nobody does not exist"),
        (("PUT", f"{V2}/namespaces/public/bad%20ns"), 412, "Namespace name is not valid"),
        (("GET", f"{V2}/namespaces/nobody"), 404, "does not exist"),
        (("DELETE", f"{V2}/namespaces/public/none"), 404, "does not exist"),
    ]
    for (method, path), status, reason in bad:
        reply = _call(broker, method, path)
        assert reply[0] == status, (path, reply)
        assert reason in _reason(reply), (path, reply)
    reply = _call(broker, "PUT", f"{V2}/namespaces/public/ns3", b"[oops")
    assert reply[0] == 400
    assert _call(broker, "GET", f"{V2}/namespaces/public") == (200, ["public/default"])


def test_tenants_and_namespaces_survive_a_restart(tmp_path: Path) -> None:
    with EmbeddedBroker(tmp_path / "data") as broker:
        assert _call(broker, "PUT", f"{V2}/tenants/acme", {})[0] == 204
        assert _call(broker, "PUT", f"{V2}/namespaces/acme/orders")[0] == 204
    with EmbeddedBroker(tmp_path / "data") as broker:
        assert _call(broker, "GET", f"{V2}/namespaces/acme") == (200, ["acme/orders"])
        client = pulsar.Client(broker.service_url)
        try:
            producer = client.create_producer("persistent://acme/orders/o1")
            assert producer.send(b"x").entry_id() == 0
        finally:
            client.close()


def test_tenants_and_namespaces_survive_kill_9(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    broker.start()
    try:
        web = f"http://127.0.0.1:{broker.web_port}"
        assert http_call(web, "PUT", f"{V2}/tenants/acme", {})[0] == 204
        assert http_call(web, "PUT", f"{V2}/namespaces/acme/orders")[0] == 204
        assert http_call(web, "PUT", f"{V2}/namespaces/acme/gone")[0] == 204
        assert http_call(web, "DELETE", f"{V2}/namespaces/acme/gone")[0] == 204
        broker.kill()  # each answer came after the change was stored
        broker.start()
        assert http_call(web, "GET", f"{V2}/tenants") == (200, b'["acme", "public"]')
        assert http_call(web, "GET", f"{V2}/namespaces/acme") == (200, b'["acme/orders"]')
        client = pulsar.Client(broker.url)
        try:
            producer = client.create_producer("persistent://acme/orders/o1")
            assert producer.send(b"x").entry_id() == 0
        finally:
            client.close()
    finally:
        broker.cleanup()


def test_namespace_bundles(broker: EmbeddedBroker) -> None:
    """A namespace created with its own split keeps it; a bad one is refused."""
    body = {"bundles": {"numBundles": 8}}
    assert _call(broker, "PUT", f"{V2}/namespaces/public/ns8", body) == (204, None)
    status, bundles = _call(broker, "GET", f"{V2}/namespaces/public/ns8/bundles")
    assert status == 200 and bundles["numBundles"] == 8 and len(bundles["boundaries"]) == 9
    unset = {"bundles": {"boundaries": None, "numBundles": 0}}  # as Java's admin sends it
    assert _call(broker, "PUT", f"{V2}/namespaces/public/ns0", unset) == (204, None)
    status, bundles = _call(broker, "GET", f"{V2}/namespaces/public/ns0/bundles")
    assert status == 200 and bundles["numBundles"] == 4
    bad = {"bundles": {"boundaries": ["0x00000000", "0x10000000"]}}
    assert _call(broker, "PUT", f"{V2}/namespaces/public/nsbad", bad)[0] == 400
    assert _call(broker, "GET", f"{V2}/namespaces/public/nsbad")[0] == 404
    huge = {"bundles": {"numBundles": 1 << 32}}  # past the bound: refused, nothing created
    assert _call(broker, "PUT", f"{V2}/namespaces/public/nsbad", huge)[0] == 400
    assert _call(broker, "GET", f"{V2}/namespaces/public/nsbad")[0] == 404
    in_ns8 = pulsar.Client(broker.service_url)
    try:  # the policies, bundles included, are read for a topic of the namespace
        in_ns8.create_producer("persistent://public/ns8/t").send(b"x")
    finally:
        in_ns8.close()
