"""The web port's front door: the first request of a connection with refused credentials is
answered 401 before aiohttp reads it, with the bytes aiohttp would send, and the connection is
closed after the refusal's linger; anything else reaches aiohttp unchanged."""

from __future__ import annotations

import base64
import socket
import time
from collections.abc import Iterator

import pytest
from auth_support import BASIC_PROVIDER, HASHES, htpasswd
from hypothesis import given
from hypothesis import strategies as st
from polling import wait_for

from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.web import MAX_BODY_BYTES
from starquake.broker.web_door import door_credentials

USER, PASSWORD = "alice", "alice-secret"
LINGER = 0.5
IDLE = 1.0


def _auth(password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{USER}:{password}".encode())


def _request(
    password: str, *extra: bytes, method: bytes = b"GET", version: bytes = b"1.1"
) -> bytes:
    lines = [
        method + b" /admin/v2/clusters HTTP/" + version,
        b"Host: x",
        b"Authorization: " + _auth(password),
        *extra,
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    directory = tmp_path_factory.mktemp("web-door")
    conf = htpasswd(directory / "htpasswd", {USER: HASHES["apr1"](PASSWORD)})
    with EmbeddedBroker(
        directory / "data",
        authenticationEnabled=True,
        authenticationProviders=BASIC_PROVIDER,
        basicAuthConf=f"file://{conf}",
        authenticationRefusalLingerSeconds=LINGER,
        httpServerIdleTimeoutSeconds=IDLE,
    ) as running:
        yield running


def _exchange(port: int, *requests: bytes) -> tuple[bytes, float]:
    """Send ``requests`` one after another on one connection, each once the previous one is
    answered; everything received until the broker closes, and when it closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        received = b""
        for request in requests:
            sock.sendall(request)
            while received.count(b"HTTP/1.1 ") < requests.index(request) + 1:
                chunk = sock.recv(65536)
                assert chunk, received
                received += chunk
        while chunk := sock.recv(65536):
            received += chunk
        return received, time.monotonic()


def _without_date(response: bytes) -> bytes:
    return b"\r\n".join(line for line in response.split(b"\r\n") if not line.startswith(b"Date:"))


def test_a_refused_first_request_gets_aiohttps_401_at_the_door(broker: EmbeddedBroker) -> None:
    web = broker.server.web
    port = broker.server.web_port
    before = web.refused_early
    started = time.monotonic()
    at_door, closed = _exchange(port, _request("wrong"))
    assert web.refused_early == before + 1
    assert closed - started >= LINGER * 0.75, closed - started  # the linger, as aiohttp's
    # the same refusal by aiohttp itself: a second request on a connection passes no door
    through_aiohttp, _ = _exchange(port, _request(PASSWORD), _request("wrong"))
    assert web.refused_early == before + 1
    assert through_aiohttp.startswith(b"HTTP/1.1 200 OK"), through_aiohttp
    second = through_aiohttp[through_aiohttp.index(b"HTTP/1.1 401") :]
    assert _without_date(at_door) == _without_date(second)
    assert b'{"reason": "Authentication failed: unknown user or wrong password"}' in at_door


def test_accepted_credentials_pass_the_door_with_a_body_sent_later(
    broker: EmbeddedBroker,
) -> None:
    port = broker.server.web_port
    head = (
        b"PUT /admin/v2/tenants/door HTTP/1.1\r\nHost: x\r\nAuthorization: "
        + _auth(PASSWORD)
        + b"\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head)
        time.sleep(0.1)
        sock.sendall(b"{}")
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    assert received.startswith(b"HTTP/1.1 204"), received  # the tenant was created


def test_a_connection_that_sends_nothing_costs_no_aiohttp_handler(broker: EmbeddedBroker) -> None:
    web = broker.server.web
    opened = time.monotonic()
    idle = [socket.create_connection(("127.0.0.1", broker.server.web_port)) for _ in range(20)]
    try:
        wait_for(lambda: web.open_connections >= 20, "the broker to take every connection")
        assert web.aiohttp_handlers == 0
        for sock in idle:  # closed at the idle timeout all the same
            sock.settimeout(10)
            assert sock.recv(1) == b""
        assert time.monotonic() - opened < IDLE + 2
    finally:
        for sock in idle:
            sock.close()


def test_a_first_head_is_due_the_idle_timeout_after_opening_however_late_it_starts(
    broker: EmbeddedBroker,
) -> None:
    with socket.create_connection(("127.0.0.1", broker.server.web_port), timeout=10) as sock:
        opened = time.monotonic()
        time.sleep(IDLE * 0.6)
        sock.sendall(b"GET /admin/v2/clusters HTTP/1.1\r\n")  # aiohttp's handler starts here
        try:
            while time.monotonic() - opened < IDLE * 3:
                sock.sendall(b"X")  # a header that never ends
                time.sleep(0.05)
        except OSError:  # closed: the write fails
            pass
        closed = time.monotonic() - opened
    assert closed < IDLE * 1.45, closed  # not IDLE after the first byte


_READ = [
    _request("x"),
    _request("x", b"Content-Length: 2", method=b"PUT") + b"{}",
    _request("x", b"X-Pad:\t  spaced value  "),
]
_LEFT_TO_AIOHTTP = [
    _request("x", version=b"1.0"),
    _request("x", method=b"HEAD"),
    _request("x", b"Authorization: Bearer y"),
    _request("x", b"Expect: 100-continue"),
    _request("x", b"Transfer-Encoding: chunked"),
    _request("x", f"Content-Length: {MAX_BODY_BYTES + 1}".encode()),
    _request("x", b"Content-Length: -1"),
    _request("x", b" folded continuation"),
    _request("x", b"Bad Name: y"),
    _request("x")[:-2],  # the head is not complete
    b"GET /admin/v2/clusters HTTP/1.1\r\nHost: x\r\n\r\n",  # no credentials
    b"GET admin HTTP/1.1\r\nAuthorization: Basic eA==\r\n\r\n",
]


@pytest.mark.parametrize("data", _READ)
def test_the_door_reads_plain_requests_with_credentials(data: bytes) -> None:
    assert door_credentials(data, MAX_BODY_BYTES) == _auth("x").decode()


@pytest.mark.parametrize("data", _LEFT_TO_AIOHTTP)
def test_the_door_leaves_every_other_request_to_aiohttp(data: bytes) -> None:
    assert door_credentials(data, MAX_BODY_BYTES) is None


@given(st.binary(max_size=300))
def test_the_door_reads_nothing_without_an_authorization_header(data: bytes) -> None:
    if b"authorization:" not in data.lower():
        assert door_credentials(data, MAX_BODY_BYTES) is None
