"""Malformed input at every route of the web port: never a 500, and the broker keeps serving.

The routes are enumerated from the web server of an in-process broker; the requests go to a
real ``starquake standalone`` process.
"""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from admin_http import admin_json
from broker_process import BrokerProcess, broker_process, process_client

from starquake.broker.embedded import EmbeddedBroker

NS = "/admin/v2/persistent/public/default"
GROUP = re.compile(r"\(\?P<(\w+)>((?:[^()]|\([^()]*\))*)\)")
GOOD = {
    "domain": "persistent",
    "tenant": "public",
    "namespace": "default",
    "topic": "fz",
    "subscription": "s",
    "role": "someone",
    "cluster": "standalone",
    "name": "app.js",
}
NUMBERS = ["99999999999999999999", "-99999999999999999999", "-1", "abc", "1e3", "0x10", " 1"]
NAMES = ["x" * 300, "bad:name", "a b", "%E2%98%83", "%00"]
DEEP = b"[" * 100_000 + b"]" * 100_000
BODIES = [
    b"",
    b"{",
    DEEP,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b"\xff\xfe\x00",
    b"null",
    b"true",
    b'"text"',
    b"99999999999999999999999",
    b"-1",
    b"1e400",
    b"1" * 5000,
    b"[]",
    b"{}",
    b'{"ledgerId": 99999999999999999999, "entryId": -99999999999999999999}',
    b'{"retentionTimeInMinutes": 1e400, "retentionSizeInMB": "x"}',
    b'{"allowAutoTopicCreation": true, "topicType": "partitioned", "defaultNumPartitions": 1e9}',
    b'{"type": "KEY_VALUE", "schema": "{not json", "properties": {}}',
    b'{"type": "AVRO", "schema": 12, "properties": []}',
    b'{"limitSize": 99999999999999999999, "limitTime": -5, "policy": 3}',
    b'{"adminRoles": "x", "allowedClusters": [1]}',
]
QUERIES = [
    "",
    "?force=maybe&perPartition=&applied=yes",
    "?messageTTL=99999999999999999999&backlogQuotaType=nope",
    "?authoritative=%ff&checkAllowAutoCreation=true&mode=weird&listenerName=none",
]


def _enumerate(tmp: Path) -> list[tuple[str, str]]:
    with EmbeddedBroker(tmp) as broker:
        web = broker.server.web
        exact = [(method, re.escape(path)) for method, path in web.routes]
        return exact + [(method, regex.pattern) for method, regex, _ in web.patterns]


def _fill(pattern: str, values: dict[str, str]) -> str | None:
    """The path ``pattern`` matches with these group values (None if one does not fit)."""
    out = GROUP.sub(lambda m: values.get(m.group(1), GOOD.get(m.group(1), "x")), pattern)
    out = out.replace("\\", "")
    decoded = re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), out)
    return out if re.fullmatch(pattern, decoded) else None


def _paths(pattern: str) -> list[str]:
    """Paths for ``pattern``: the good values, then each group given each bad value."""
    paths = [p for p in [_fill(pattern, {})] if p]
    for group in GROUP.findall(pattern):
        name = group[0]
        for bad in NUMBERS if name not in GOOD else NAMES + NUMBERS[:2]:
            path = _fill(pattern, {name: bad})
            if path is not None:
                paths.append(path)
    return paths


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    with broker_process(tmp_path / "data") as proc:
        yield proc


def _seed(broker: BrokerProcess) -> None:
    """A topic with messages and a subscription, and a partitioned topic."""
    client = process_client(broker.url)
    try:
        consumer = client.subscribe("persistent://public/default/fz", "s")
        producer = client.create_producer("persistent://public/default/fz")
        for i in range(3):
            producer.send(f"m{i}".encode())
        consumer.close()
    finally:
        client.close()
    assert admin_json(broker, "PUT", f"{NS}/fzp/partitions", 2)[0] == 204


class _Http:
    """One keep-alive connection to the web port, reopened when the broker closes it."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def call(self, method: str, path: str, body: bytes) -> int:
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body or None)
                response = self.conn.getresponse()
                response.read()
                return response.status
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")


def test_no_route_answers_500_to_malformed_input(tmp_path: Path, broker: BrokerProcess) -> None:
    routes = _enumerate(tmp_path / "enumerate")
    assert len(routes) > 130  # every route, not a handful
    _seed(broker)
    http = _Http(broker.web_port)
    failures = []
    sent = 0
    try:
        # deletions last, so that the other routes meet the seeded topics
        ordered = sorted(routes, key=lambda r: r[0] == "DELETE")
        for method, pattern in ordered:
            requests = [(path, b"") for path in _paths(pattern)]
            base = requests[0][0] if requests else None
            if base is not None:
                requests += [(base + query, body) for query in QUERIES for body in BODIES]
            for path, body in requests:
                status = http.call(method, quote(path, safe="/%?&=:"), body)
                sent += 1
                if status >= 500:
                    failures.append(
                        (status, method, pattern.rsplit("/", 1)[-1], path[-40:], body[:40])
                    )
    finally:
        http.conn.close()
    assert not failures, f"{len(failures)} of {sent} requests failed: {sorted(set(failures))[:30]}"
    assert "internal error" not in broker.log() and "Traceback" not in broker.log()
    # the broker still serves both ports
    assert admin_json(broker, "GET", "/admin/v2/clusters") == (200, ["standalone"])
    client = process_client(broker.url)
    try:
        producer = client.create_producer("persistent://public/default/after-fuzz")
        producer.send(b"still here")
    finally:
        client.close()
    broker.stop()


@pytest.mark.parametrize(
    ("method", "path", "body", "reason"),
    [
        ("POST", f"{NS}/fz/subscription/s/skip/99999999999999999999", b"", "must be from 0"),
        ("POST", "/admin/v2/namespaces/public/default/messageTTL", DEEP, "nested too deeply"),
        ("POST", f"{NS}/fz/subscription/s/resetcursor", DEEP, "nested too deeply"),
        ("GET", "/admin/v2/schemas/public/default/fz/schema/99999999999999999999", b"", "from 0"),
        ("POST", f"{NS}/fz/messageTTL?messageTTL=99999999999999999999", b"", "messageTTL"),
    ],
)
def test_the_reported_inputs_get_400_with_a_reason(
    broker: BrokerProcess, method: str, path: str, body: bytes, reason: str
) -> None:
    _seed(broker)
    status, reply = admin_json(broker, method, path, body)
    assert status == 400, (status, reply)
    assert reason in reply["reason"]
