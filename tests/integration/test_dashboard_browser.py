"""The dashboard at ``/``: served over plain HTTP, and rendered by a real headless Chromium
against a live broker (the page's script reads the admin API, and the tests read the DOM it
builds).

The browser tests need Debian's ``chromium`` (``scripts/test`` installs it). Without it they
are skipped, except in CI (``CI=true``), where a missing browser fails them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pulsar
import pytest
from admin_http import http_call
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
    # virtual time runs the page's timers fast; it stands still while a fetch is in flight
    "--virtual-time-budget=5000",
]


@pytest.fixture
def chromium() -> str:
    found = shutil.which("chromium") or (
        "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None
    )
    if found is None:
        message = "chromium is not installed (scripts/test installs it: apt-get install chromium)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


def _run_chromium(chromium: str, tmp_path: Path, url: str, *args: str) -> str:
    """Chromium's stdout after loading ``url`` with ``args``, in a fresh profile."""
    profile = tmp_path / f"chromium-{uuid.uuid4().hex[:8]}"
    command = [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url]
    done = subprocess.run(command, capture_output=True, timeout=90, check=False)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"chromium exited with {done.returncode}: {stderr[-2000:]}"
    return done.stdout.decode()


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""
    children: list[Element] = field(default_factory=list)

    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def walk(self) -> Iterator[Element]:
        yield self
        for child in self.children:
            yield from child.walk()

    def find_all(
        self, tag: str | None = None, cls: str | None = None, **attrs: str
    ) -> list[Element]:
        """Descendants (and self) with ``tag``, class ``cls`` and attributes (``data_x`` names
        ``data-x``)."""
        wanted = {name.replace("_", "-"): value for name, value in attrs.items()}
        return [
            e
            for e in self.walk()
            if (tag is None or e.tag == tag)
            and (cls is None or cls in e.classes())
            and all(e.attrs.get(k) == v for k, v in wanted.items())
        ]

    def find(self, tag: str | None = None, cls: str | None = None, **attrs: str) -> Element:
        found = self.find_all(tag, cls, **attrs)
        assert found, f"no <{tag or '*'} class={cls} {attrs}> in the page"
        return found[0]


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"}


class _DomParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(element)
        if tag not in VOID:
            self.stack.append(element)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.stack) - 1, 0, -1):
            if self.stack[depth].tag == tag:
                del self.stack[depth:]
                return

    def handle_data(self, data: str) -> None:
        for open_element in self.stack:
            open_element.text += data


def parse_dom(html: str) -> Element:
    parser = _DomParser()
    parser.feed(html)
    parser.close()
    return parser.root


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

    page = parse_dom(_run_chromium(chromium, tmp_path, f"{broker.web_service_url}/", "--dump-dom"))

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

    shot = tmp_path / "overview.png"
    _run_chromium(
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
        page = parse_dom(_run_chromium(chromium, tmp_path, url, "--dump-dom"))
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
