"""The dashboard at ``/``: served over plain HTTP, and rendered by a real headless Chromium
against a live broker (the page's script reads the broker, and the tests read the DOM it
builds, the requests it makes and screenshots)."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import http_call
from dashboard_browser import LivePage, find_chromium, parse_dom, run_chromium
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker


@pytest.fixture
def chromium() -> str:
    return find_chromium()


@pytest.fixture
def page(chromium: str, tmp_path: Path) -> Iterator[LivePage]:
    live = LivePage(chromium, tmp_path / "profile")
    try:
        yield live
    finally:
        live.close()


def _stats(broker: EmbeddedBroker, topic: str) -> dict[str, Any]:
    status, body = http_call(
        broker.web_service_url, "GET", f"/admin/v2/{topic.replace('://', '/')}/stats"
    )
    assert status == 200, body
    stats = json.loads(body)
    assert isinstance(stats, dict)
    return stats


# --- plain HTTP -------------------------------------------------------------------------------


def test_index_and_assets_are_served_and_unknown_paths_404(broker: EmbeddedBroker) -> None:
    base = broker.web_service_url
    with urllib.request.urlopen(f"{base}/", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers.get_content_type() == "text/html"
        page = resp.read().decode()
    assert '<script src="/dashboard/dashboard.js">' in page
    assert 'href="/dashboard/dashboard.css"' in page
    for name, ctype in [("dashboard.js", "text/javascript"), ("dashboard.css", "text/css")]:
        with urllib.request.urlopen(f"{base}/dashboard/{name}", timeout=10) as resp:
            assert resp.status == 200
            assert resp.headers.get_content_type() == ctype
            assert resp.read()
    for path in [
        "/dashboard/missing.js",
        "/dashboard/dashboard.py",
        "/dashboard/__init__.py",
        "/dashboard/",
        "/dashboard/static/dashboard.js",
        "/dashboard/..%2Fdashboard.py",
        "/index.html",
    ]:
        status, body = http_call(base, "GET", path)
        assert status == 404, path
        assert "reason" in json.loads(body)
    status, _ = http_call(base, "POST", "/")
    assert status == 404


# --- in the browser ---------------------------------------------------------------------------


def test_overview_lists_topics_with_their_backlog(
    broker: EmbeddedBroker, chromium: str, tmp_path: Path
) -> None:
    suffix = uuid.uuid4().hex[:8]
    topic = f"persistent://public/default/dash-backlog-{suffix}"
    other = f"persistent://public/default/dash-other-{suffix}"
    backlog = 37
    client = official_client(broker)
    try:
        client.subscribe(topic, "pending").close()  # the durable subscription stays
        producer = client.create_producer(topic)
        for i in range(backlog):
            producer.send(f"m-{i}".encode())
        client.create_producer(other).send(b"x")
    finally:
        client.close()

    page = parse_dom(run_chromium(chromium, tmp_path, f"{broker.web_service_url}/", "--dump-dom"))

    main = page.find("main", data_view="overview")
    namespace = main.find(cls="namespace", data_namespace="public/default")
    row = namespace.find("tr", data_topic=topic)
    assert row.find("a").attrs["href"] == (
        f"#/topic/persistent/public/default/dash-backlog-{suffix}"
    )
    assert row.find("td", cls="backlog").text.strip() == str(backlog)
    assert row.find("td", cls="subscriptions").text.strip() == "1"
    assert namespace.find("tr", data_topic=other).find("td", cls="backlog").text.strip() == "0"
    assert page.find(id="status").classes() >= {"status", "ok"}
    assert "hidden" in page.find(id="auth-button").attrs  # no authentication: no Sign in

    shot = tmp_path / "overview.png"
    run_chromium(
        chromium,
        tmp_path,
        f"{broker.web_service_url}/",
        f"--screenshot={shot}",
        "--window-size=1280,900",
    )
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_topic_view_draws_key_shared_hash_ranges(
    broker: EmbeddedBroker, chromium: str, tmp_path: Path
) -> None:
    local = f"dash-ks-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{local}"
    client = official_client(broker)
    consumers: list[pulsar.Consumer] = []
    try:
        consumers += [
            client.subscribe(
                topic,
                "by-key",
                consumer_type=pulsar.ConsumerType.KeyShared,
                consumer_name=name,
            )
            for name in ("ks-a", "ks-b")
        ]
        producer = client.create_producer(topic, producer_name="dash-producer")
        producer.send(b"k", partition_key="key-1")
        stats = _stats(broker, topic)
        expected = {
            c["consumerName"]: set(c["keyHashRanges"])
            for c in stats["subscriptions"]["by-key"]["consumers"]
        }
        assert set(expected) == {"ks-a", "ks-b"} and all(expected.values())

        url = f"{broker.web_service_url}/#/topic/persistent/public/default/{local}"
        page = parse_dom(run_chromium(chromium, tmp_path, url, "--dump-dom"))
    finally:
        for consumer in consumers:
            consumer.close()
        client.close()

    main = page.find("main", data_view="topic")
    assert main.find("h1").text == local
    assert main.find("tr", data_producer="dash-producer")
    sub = main.find(cls="subscription", data_subscription="by-key")
    assert sub.find(cls="badge").text == "Key_Shared"
    drawn: dict[str, set[str]] = {}
    for rect in sub.find_all("rect", cls="hash-range"):
        drawn.setdefault(rect.attrs["data-consumer"], set()).add(rect.attrs["data-range"])
        assert float(rect.attrs["width"]) > 0
    assert drawn == expected
    for name in ("ks-a", "ks-b"):
        row = sub.find("tr", data_consumer=name)
        assert row.find("td", cls="permits").text.strip() not in ("", "\u2013")
        assert row.find_all("rect", cls="hash-range"), f"{name}'s own bar"


def _api_requests(page: LivePage, base: str) -> list[str]:
    """The URLs of the broker requests the page made (its script's, not its files')."""
    urls = [r["url"] for r in page.requests if r["url"].startswith(base)]
    return [u for u in urls if u[len(base) :].startswith(("/admin/", "/dashboard/api/"))]


def test_partitioned_topic_is_one_row_and_opens_per_partition(
    broker: EmbeddedBroker, page: LivePage, tmp_path: Path
) -> None:
    local = f"dash-parts-{uuid.uuid4().hex[:8]}"
    topic = f"persistent://public/default/{local}"
    broker.create_partitioned_topic(topic, 3)
    client = official_client(broker)
    try:
        client.subscribe(topic, "pending").close()
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(30):
            producer.send(f"m-{i}".encode(), partition_key=f"key-{i}")
    finally:
        client.close()
    per_partition = {
        name: sum(s["msgBacklog"] for s in stats["subscriptions"].values())
        for name, stats in _partitioned_stats(broker, topic)["partitions"].items()
    }
    assert sum(per_partition.values()) == 30

    base = broker.web_service_url
    page.goto(f"{base}/")
    page.wait_refreshes(1)
    overview = page.dom().find("main", data_view="overview")
    row = overview.find("tr", data_topic=topic)
    assert row.attrs["data-partitions"] == "3"
    assert row.find(cls="partitions").text == "3 partitions"
    assert row.find("td", cls="backlog").text == "30"
    assert row.find("td", cls="subscriptions").text == "1"
    assert not [
        r for r in overview.find_all("tr") if "-partition-" in r.attrs.get("data-topic", "")
    ]

    page.goto(f"{base}/{row.find('a').attrs['href']}")
    page.wait_for("!!document.querySelector('table.partitions')", "the partitions table")
    view = page.dom().find("main", data_view="topic")
    assert not view.find_all(cls="error")
    assert view.find("h1").text == local
    shown = {
        r.attrs["data-topic"]: int(r.find("td", cls="backlog").text)
        for r in view.find("table", cls="partitions").find_all("tr")
        if "data-partition" in r.attrs
    }
    assert shown == per_partition
    assert view.find(cls="total-backlog").find(cls="card-value").text == "30"
    assert view.find(cls="subscription", data_subscription="pending")
    page.screenshot(tmp_path / "partitioned.png")

    # one partition's own view, from its row
    first = f"{topic}-partition-0"
    page.goto(f"{base}/#/topic/persistent/public/default/{local}-partition-0")
    heading = "document.querySelector('main[data-view=topic] h1')?.textContent"
    page.wait_for(f"{heading} === '{local}-partition-0'", "the partition's view")
    view = page.dom().find("main", data_view="topic")
    assert not view.find_all(cls="error")
    assert view.find(cls="total-backlog").find(cls="card-value").text == str(per_partition[first])


def test_charts_keep_a_short_history(broker: EmbeddedBroker, page: LivePage, topic: str) -> None:
    client = official_client(broker)
    try:
        client.subscribe(topic, "pending").close()
        producer = client.create_producer(topic)
        for i in range(12):
            producer.send(f"m-{i}".encode())
        page.goto(f"{broker.web_service_url}/")
        page.wait_refreshes(3)
    finally:
        client.close()
    main = page.dom().find("main", data_view="overview")
    rates = main.find("figure", cls="chart", data_chart="rates")
    backlog = main.find("figure", cls="chart", data_chart="backlog")
    assert int(rates.attrs["data-samples"]) >= 3
    for series in ("rateIn", "rateOut"):
        points = rates.find("polyline", data_series=series).attrs["points"].split()
        assert len(points) >= 3
    points = backlog.find("polyline", data_series="backlog").attrs["points"].split()
    ys = {float(p.split(",")[1]) for p in points}
    assert len(points) >= 3 and len(ys) == 1 and ys != {110.0}  # a flat line above the axis
    assert backlog.find(cls="chart-legend").text.strip().endswith("12")


def test_requests_per_refresh_do_not_grow_with_the_topics(
    broker: EmbeddedBroker, page: LivePage
) -> None:
    base = broker.web_service_url
    counts = {}
    for namespace, topics in (("few", 3), ("many", 40)):
        assert http_call(base, "PUT", f"/admin/v2/namespaces/public/{namespace}")[0] == 204
        for i in range(topics):
            path = f"/admin/v2/persistent/public/{namespace}/t-{i}"
            assert http_call(base, "PUT", path)[0] == 204
        page.goto(f"{base}/#/namespace/public/{namespace}")
        page.wait_refreshes(1)
        rows = page.dom().find("div", cls="namespace").find_all("tr", data_partitions="0")
        assert len(rows) == topics
        page.watch_requests()
        start = page.refreshes()
        page.wait_refreshes(start + 4)
        done = page.refreshes()
        requests = _api_requests(page, base)
        assert all("/dashboard/api/overview?" in url for url in requests), requests
        # one request per refresh (give or take the one in flight at either end)
        assert done - start - 1 <= len(requests) <= done - start + 1, requests
        counts[namespace] = len(requests)
    # 3 topics or 40: the same number of requests
    assert max(counts.values()) - min(counts.values()) <= 2, counts


def _partitioned_stats(broker: EmbeddedBroker, topic: str) -> dict[str, Any]:
    path = f"/admin/v2/{topic.replace('://', '/')}/partitioned-stats?perPartition=true"
    status, body = http_call(broker.web_service_url, "GET", path)
    assert status == 200, body
    stats = json.loads(body)
    assert isinstance(stats, dict)
    return stats
