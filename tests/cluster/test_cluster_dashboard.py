"""The dashboard's cluster view: in cluster mode the overview names every live broker (with its
load report), the leader and this broker, and the owner of every owned bundle; the page draws
them (real Chromium). A standalone broker's overview has no cluster view."""

from __future__ import annotations

import urllib.request
import uuid
from pathlib import Path

import pulsar
from admin_http import admin_json
from broker_process import BrokerProcess, multi_host_url
from dashboard_browser import find_chromium, parse_dom, run_chromium

from starquake.cluster.nodes import jetstream_nodes


def test_the_overview_shows_brokers_leader_and_bundle_owners(tmp_path: Path) -> None:
    (node,) = jetstream_nodes(1, tmp_path / "jetstream")
    node.start()
    cluster = f"dash{uuid.uuid4().hex[:6]}"
    brokers = [
        BrokerProcess(tmp_path / f"b{i}", f"metadataStoreUrl={node.url}", f"clusterName={cluster}")
        for i in range(2)
    ]
    try:
        for broker in brokers:
            broker.start(timeout=60)
        url = multi_host_url(brokers)
        client = pulsar.Client(url, operation_timeout_seconds=30)
        try:
            for i in range(8):  # topics in several bundles
                client.create_producer(f"persistent://public/default/dash-{i}").send(b"x")
        finally:
            client.close()
        ids = {b.web_service_url.removeprefix("http://") for b in brokers}

        status, overview = admin_json(brokers[0], "GET", "/dashboard/api/overview")
        assert status == 200, overview
        view = overview["clusterView"]
        assert view["self"] == brokers[0].web_service_url.removeprefix("http://")
        assert {b["id"] for b in view["brokers"]} == ids
        assert {b["serviceUrl"] for b in view["brokers"]} == {b.url for b in brokers}
        assert view["leader"] in ids
        owned = {(b["namespace"], b["bundle"]): b["owner"] for b in view["bundles"]}
        assert owned and set(owned.values()) <= ids
        status, bundles = admin_json(
            brokers[0], "GET", "/admin/v2/namespaces/public/default/bundles"
        )
        assert status == 200, bundles
        names = {
            f"{lo}_{hi}"
            for lo, hi in zip(bundles["boundaries"], bundles["boundaries"][1:], strict=False)
        }
        assert {bundle for _, bundle in owned} <= names

        page = parse_dom(
            run_chromium(find_chromium(), tmp_path, f"{brokers[1].web_service_url}/", "--dump-dom")
        )
        table = page.find("table", cls="brokers")
        for broker_id in ids:
            row = table.find("tr", data_broker=broker_id)
            assert broker_id in row.text
        this = table.find("tr", data_broker=brokers[1].web_service_url.removeprefix("http://"))
        assert "this broker" in this.text
        leader_row = table.find("tr", data_broker=view["leader"])
        assert "leader" in leader_row.text
        drawn = page.find("table", cls="bundles")
        for (namespace, bundle), owner in owned.items():
            assert owner in drawn.find("tr", data_bundle=f"{namespace}/{bundle}").text
    finally:
        for broker in brokers:
            broker.cleanup()
        node.kill()


def test_a_standalone_overview_has_no_cluster_view(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b")
    try:
        broker.start()
        with urllib.request.urlopen(f"{broker.web_service_url}/dashboard/api/overview") as resp:
            assert b"clusterView" not in resp.read()
    finally:
        broker.cleanup()
