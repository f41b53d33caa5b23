"""Malformed input at every route of the web port: never a 500, and the broker keeps serving.

The routes are enumerated from the route table (``starquake.broker.admin.ROUTES``); the requests
go to one real ``starquake standalone`` process shared by the module: first a malformed body at
each endpoint that takes one (400 naming the body), then a hypothesis property (every generated
body, query and path parameter at every route: a 4xx with a reason, never a 5xx), then a sweep
of fixed inputs, deletions last.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from admin_http import admin_json
from broker_process import BrokerProcess, broker_process, process_client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from starquake.broker.admin import ROUTES, Route
from starquake.broker.policy_types import (
    AutoSubscriptionCreationOverride,
    AutoTopicCreationOverride,
    BacklogQuota,
    DelayedDeliveryPolicies,
    InactiveTopicPolicies,
    RetentionPolicies,
)

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
    "bundle": "0x00000000_0x40000000",
    "sub": "s",  # the transactions' routes
    "id": "0",
    "most": "0",
    "least": "1",
    "timeout": "1000",
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


def _fill(pattern: str, values: dict[str, str]) -> str | None:
    """The path ``pattern`` matches with these group values (None if one does not fit)."""
    out = GROUP.sub(lambda m: values.get(m.group(1), GOOD.get(m.group(1), "x")), pattern)
    out = out.replace("/?", "").replace("\\", "")
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


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    # transactions on, so that their routes read their input instead of answering 503
    data = tmp_path_factory.mktemp("malformed") / "data"
    with broker_process(data, "transactionCoordinatorEnabled=true") as proc:
        _seed(proc)
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

    def call(self, method: str, path: str, body: bytes) -> tuple[int, bytes]:
        for attempt in range(2):
            try:
                self.conn.request(method, path, body=body or None)
                response = self.conn.getresponse()
                return response.status, response.read()
            except (http.client.HTTPException, ConnectionError):
                self.conn.close()
                self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def __enter__(self) -> _Http:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


def _problem(status: int, raw: bytes) -> str | None:
    """What is wrong with an answer to malformed input: a 5xx, or a 4xx without a reason."""
    if status >= 500:
        return f"status {status}"
    if status >= 400:
        try:
            reason = json.loads(raw)["reason"]
        except (ValueError, KeyError, TypeError):
            return f"status {status} without a JSON reason: {raw[:60]!r}"
        if not isinstance(reason, str) or not reason:
            return f"status {status} with an empty reason"
    return None


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
    status, reply = admin_json(broker, method, path, body)
    assert status == 400, (status, reply)
    assert reason in reply["reason"]


NOT_JSON = [b"{", b'{"a": 1,}', b"[1, 2", b"\xff\xfe\x00", b"'single'", b"nul", DEEP]


def test_a_body_that_is_not_json_is_400_naming_the_body(broker: BrokerProcess) -> None:
    """Every endpoint that reads a body answers 400, with a reason naming the body, to one that
    is not JSON or nests too deeply."""
    with_body = [route for route in ROUTES if route.body]
    assert len(with_body) > 40
    failures = []
    with _Http(broker.web_port) as http:
        for route in with_body:
            path = _fill(route.path, {})
            assert path is not None, route.name
            for body in NOT_JSON:
                status, raw = http.call(route.method, quote(path, safe="/%?&=:"), body)
                reason = json.loads(raw).get("reason", "") if raw else ""
                if status != 400 or "body" not in reason:
                    failures.append((route.method, route.template, body[:12], status, reason))
    assert not failures, failures[:20]


NAMES_WHAT = re.compile(r"\bthe body\b|^[a-z]+[A-Z]\w* must be |^type: ")


def test_a_body_of_the_wrong_type_is_400_naming_the_body_or_its_field(
    broker: BrokerProcess,
) -> None:
    """A JSON string where an endpoint takes a number, a list, an object or a name: 400, and
    the reason says which (the body, or the field it stands for)."""
    failures = []
    with _Http(broker.web_port) as http:
        for route in [route for route in ROUTES if route.body]:
            path = _fill(route.path, {})
            assert path is not None, route.name
            for body in (b'"not the right type"', b'[{"type": 5}]'):
                status, raw = http.call(route.method, quote(path, safe="/%?&=:"), body)
                reason = json.loads(raw).get("reason", "") if raw else ""
                if status != 400 or not NAMES_WHAT.search(reason):
                    failures.append((route.method, route.template, body, status, reason))
    assert not failures, failures[:20]


# --- hypothesis: generated malformed input at every route ---------------------------------------

FIELDS = [
    "adminRoles",
    "allowedClusters",
    "serviceUrl",
    "retentionTimeInMinutes",
    "retentionSizeInMB",
    "limitSize",
    "limitTime",
    "policy",
    "ledgerId",
    "entryId",
    "partitionIndex",
    "batchIndex",
    "type",
    "schema",
    "properties",
    "allowAutoTopicCreation",
    "topicType",
    "defaultNumPartitions",
    "allowAutoSubscriptionCreation",
    "active",
    "tickTime",
    "maxDeliveryDelayInMillis",
    "inactiveTopicDeleteMode",
    "maxInactiveDurationSeconds",
    "deleteWhileInactive",
]
"""Field names the endpoints' bodies take (given values of the wrong type, out of range...)."""
QUERY_KEYS = [
    "force",
    "perPartition",
    "applied",
    "messageTTL",
    "backlogQuotaType",
    "authoritative",
    "checkAllowAutoCreation",
    "mode",
    "listenerName",
    "includeSystemTopic",
    "getEarliestTimeInBacklog",
    "ledgerId",
    "entryId",
    "maxMessages",
    "maxEntries",
    "initialPosition",
    "messagePosition",
    "tenant",
    "namespace",
]
HUGE = st.sampled_from([2**63, -(2**63) - 1, 10**30, -1, 2**31])
ODD_TEXT = st.sampled_from(["", "x" * 2000, "-1", "1e400", "NaN", "\u2603", "\x00", "true"])
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), HUGE, st.floats(), ODD_TEXT, st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


def _json(value: object) -> bytes:
    """``value`` as JSON, with Python's spellings of infinities and NaN (not JSON either)."""
    return json.dumps(value).encode()


BODIES_GENERATED = st.one_of(
    VALUES.map(_json),
    st.fixed_dictionaries({}, optional={field: VALUES for field in FIELDS}).map(_json),
    st.binary(max_size=40),
    st.integers(1_000, 60_000).map(lambda n: b"[" * n + b"]" * n),
    st.integers(1, 5_000).map(lambda n: b"9" * n),
    st.sampled_from(BODIES),
)
PATH_VALUES = st.one_of(
    st.sampled_from(NUMBERS + NAMES),
    st.integers().map(str),
    st.text(st.characters(blacklist_characters="/?#%", blacklist_categories=["Cs"]), min_size=1),
)
GROUP_NAMES = sorted({name for route in ROUTES for name, _ in GROUP.findall(route.path)})


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    body=BODIES_GENERATED,
    query=st.dictionaries(st.sampled_from(QUERY_KEYS), st.text(max_size=30) | HUGE.map(str)),
    path_values=st.fixed_dictionaries({}, optional=dict.fromkeys(GROUP_NAMES, PATH_VALUES)),
)
def test_generated_malformed_input_at_every_route_is_a_4xx_with_a_reason(
    broker: BrokerProcess, body: bytes, query: dict[str, str], path_values: dict[str, str]
) -> None:
    """Each example goes to every route but the deletions (kept for the sweep, last)."""
    failures = []
    suffix = "?" + urlencode(query) if query else ""
    with _Http(broker.web_port) as http:
        for route in ROUTES:
            if route.method == "DELETE":
                continue
            path = _fill(route.path, path_values) or _fill(route.path, {})
            assert path is not None, route.name
            status, raw = http.call(route.method, quote(path, safe="/%:") + suffix, body)
            problem = _problem(status, raw)
            if problem is not None:
                failures.append((route.method, route.template, path[-30:], problem))
    assert not failures, f"{len(failures)} failures with body {body[:60]!r}: {failures[:10]}"


def _sweep_requests(route: Route) -> list[tuple[str, bytes]]:
    """(path and query, body) for ``route``: each bad path value, then each fixed query and
    body on the good path."""
    requests = [(path, b"") for path in _paths(route.path)]
    base = requests[0][0] if requests else None
    if base is not None:
        requests += [(base + query, body) for query in QUERIES for body in BODIES]
    return requests


@pytest.mark.timeout(300)  # hundreds of requests: slow on a heavily loaded machine
def test_no_route_answers_500_to_malformed_input(broker: BrokerProcess) -> None:
    """The fixed inputs at every route (deletions last, so that the other routes meet the
    seeded topics); then the broker still serves both ports and logged no failure."""
    failures = []
    sent = 0
    with _Http(broker.web_port) as http:
        for route in sorted(ROUTES, key=lambda r: r.method == "DELETE"):
            for path, body in _sweep_requests(route):
                status, raw = http.call(route.method, quote(path, safe="/%?&=:"), body)
                sent += 1
                problem = _problem(status, raw)
                if problem is not None:
                    failures.append((route.method, route.template, path[-40:], body[:40], problem))
    assert not failures, f"{len(failures)} of {sent} requests failed: {failures[:30]}"
    assert "internal error" not in broker.log() and "Traceback" not in broker.log()
    # the broker still serves both ports
    status, clusters = admin_json(broker, "GET", "/admin/v2/clusters")
    assert status == 200 and "standalone" in clusters
    client = process_client(broker.url)
    try:
        producer = client.create_producer("persistent://public/default/after-fuzz")
        producer.send(b"still here")
    finally:
        client.close()


# --- typed policies: a wrong field is named ----------------------------------------------------

POLICY_BODIES: dict[str, type[Any]] = {
    "retention": RetentionPolicies,
    "backlogQuota": BacklogQuota,
    "delayedDelivery": DelayedDeliveryPolicies,
    "inactiveTopicPolicies": InactiveTopicPolicies,
    "autoTopicCreation": AutoTopicCreationOverride,
    "autoSubscriptionCreation": AutoSubscriptionCreationOverride,
}
"""The last path segment of the routes that take a policy object -> its class."""
GOOD_FIELDS: dict[str, Any] = {
    "retentionTimeInMinutes": -1,
    "retentionSizeInMB": -1,
    "policy": "producer_request_hold",
    "active": True,
    "deleteWhileInactive": False,
    "allowAutoTopicCreation": False,
    "allowAutoSubscriptionCreation": True,
}
"""Right values of the required fields of policy bodies."""
WRONG_VALUES: list[object] = ["x", -5, 1.5, [], {}, None, 10**20]


def test_each_field_of_a_policy_body_given_a_wrong_value_is_400_naming_it(
    broker: BrokerProcess,
) -> None:
    """Every route that takes a policy object, namespace or topic level: each field given each
    wrong value (the other fields right, the required ones present) answers 400 naming it."""
    routes = [r for r in ROUTES if r.body and r.path.rpartition("/")[2] in POLICY_BODIES]
    assert len(routes) >= 2 * len(POLICY_BODIES) - 2  # the auto-creation ones: namespaces only
    assert admin_json(broker, "PUT", f"{NS}/fzpol")[0] in (204, 409)  # the sweep deletes fz
    failures = []
    with _Http(broker.web_port) as http:
        for route in routes:
            cls = POLICY_BODIES[route.path.rpartition("/")[2]]
            path = _fill(route.path, {"topic": "fzpol"})
            assert path is not None, route.name
            specs = {f.metadata["json"]: f for f in dataclasses.fields(cls)}
            base = {k: GOOD_FIELDS[k] for k, f in specs.items() if f.default is not None}
            for name in specs:
                for wrong in WRONG_VALUES:
                    body = json.dumps({**base, name: wrong}).encode()
                    status, raw = http.call(route.method, quote(path, safe="/%:"), body)
                    reason = json.loads(raw).get("reason", "") if raw else ""
                    if status != 400 or not re.match(rf"{name} must be ", reason):
                        failures.append((route.method, route.template, name, wrong, status, reason))
    assert not failures, f"{len(failures)} failures: {failures[:10]}"


def test_a_namespace_created_with_a_malformed_policy_is_refused_naming_it(
    broker: BrokerProcess,
) -> None:
    retention = {"retentionTimeInMinutes": "x", "retentionSizeInMB": 1}
    body = {"message_ttl_in_seconds": 5, "retention_policies": retention}
    status, reply = admin_json(broker, "PUT", "/admin/v2/namespaces/public/badpol", body)
    assert status == 400, reply
    assert reply["reason"].startswith("retentionTimeInMinutes must be ")
    assert admin_json(broker, "GET", "/admin/v2/namespaces/public/badpol/messageTTL")[0] == 404
    # a null field is a policy not set, as Pulsar's admin clients send those they leave unset
    unset = {"autoTopicCreationOverride": {"allowAutoTopicCreation": False, "topicType": None}}
    body = {"retention_policies": None, **unset}
    assert admin_json(broker, "PUT", "/admin/v2/namespaces/public/nullpol", body)[0] == 204
    status, value = admin_json(
        broker, "GET", "/admin/v2/namespaces/public/nullpol/autoTopicCreation"
    )
    assert (status, value) == (200, {"allowAutoTopicCreation": False, "topicType": None})
    assert admin_json(broker, "DELETE", "/admin/v2/namespaces/public/nullpol")[0] == 204


@pytest.mark.parametrize("field", ["serviceUrl", "brokerServiceUrl", "proxyServiceUrl"])
def test_a_cluster_address_that_is_not_a_string_is_400_naming_it(
    broker: BrokerProcess, field: str
) -> None:
    before = admin_json(broker, "GET", "/admin/v2/clusters/standalone")
    assert before[0] == 200
    for method in ("PUT", "POST"):
        status, reply = admin_json(broker, method, "/admin/v2/clusters/standalone", {field: 5})
        assert (status, reply["reason"]) == (400, f"{field} must be a string (a URL)")
    # refused: the cluster's data is what it was (other tests of this module may change it)
    assert admin_json(broker, "GET", "/admin/v2/clusters/standalone") == before
