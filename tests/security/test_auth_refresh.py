"""Expiring tokens on long-lived connections: the broker challenges (AUTH_CHALLENGE) a
connection whose token expired; fresh credentials of the same role keep it, anything else
closes it. authenticationRefreshCheckSeconds=1 here."""

from __future__ import annotations

import time
import types
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from auth_support import (
    CLIENTS,
    auth_response,
    client_of,
    connections,
    hs256,
    secret_key,
    token_auth,
    token_broker,
)
from polling import eventually, wait_for
from raw_connection import RawConnection

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol._generated import starquake_wire_pb2 as pb

T = pb.BaseCommand
KEY = secret_key()
LIFETIME = 3


@pytest.fixture(scope="module")
def refresh_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    directory = tmp_path_factory.mktemp("refresh")
    with token_broker(directory / "data", KEY, authenticationRefreshCheckSeconds=1) as running:
        yield running


def _topic() -> str:
    return f"persistent://public/default/refresh-{uuid.uuid4().hex[:10]}"


def _of_role(broker: EmbeddedBroker, role: str) -> list[Any]:
    return [c for c in connections(broker) if c.auth_role == role]


@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_supplier_keeps_the_connection(
    refresh_broker: EmbeddedBroker, module: types.ModuleType
) -> None:
    role = f"long-lived-{module.__name__}"
    calls: list[float] = []

    def supplier() -> str:
        calls.append(time.time())
        return hs256(KEY, role, expires_in=LIFETIME)

    client = client_of(module, refresh_broker.service_url, token_auth(module, supplier))
    try:
        topic = _topic()
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        [cnx] = _of_role(refresh_broker, role)
        first_expiry = cnx.auth_expires_at
        sent = 0

        def refreshed_twice() -> bool:
            nonlocal sent
            producer.send(f"m{sent}".encode())  # the connection is in use all along
            sent += 1
            return cnx.auth_expires_at > first_expiry + LIFETIME and len(calls) >= 3

        wait_for(refreshed_twice, "two refreshes of the credentials", timeout=10 * LIFETIME)
        for _ in range(sent):
            consumer.acknowledge(consumer.receive(timeout_millis=5000))
        # the same connection, with credentials refreshed (more than once)
        assert _of_role(refresh_broker, role) == [cnx]
        assert cnx.auth_expires_at > first_expiry + LIFETIME
        assert len(calls) >= 3
    finally:
        client.close()


@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_expired_token_without_a_fresh_one_is_disconnected(
    refresh_broker: EmbeddedBroker, module: types.ModuleType
) -> None:
    role = f"short-lived-{module.__name__}"
    token = hs256(KEY, role, expires_in=2)
    client = client_of(module, refresh_broker.service_url, token_auth(module, token))
    try:
        client.create_producer(_topic())
        assert len(_of_role(refresh_broker, role)) == 1
        # challenged after expiry, answered with the same expired token: closed, and the
        # client's reconnections are refused
        assert eventually(lambda: not _of_role(refresh_broker, role), timeout=8)
        # scenario, not synchronisation: a window for the client's reconnections, none of which
        # may get through (a slower machine retries less often in it, never falsely fails)
        time.sleep(1.5)
        assert not _of_role(refresh_broker, role)
    finally:
        client.close()


def test_client_without_refresh_support_is_closed_on_expiry(refresh_broker: EmbeddedBroker) -> None:
    with RawConnection(refresh_broker.broker_port) as cnx:
        cnx.connect("token", hs256(KEY, "old-client", expires_in=1).encode(), refresh=False)
        assert cnx.next().type == T.CONNECTED
        started = time.monotonic()
        with pytest.raises(ConnectionError):
            cnx.next(timeout=6)  # no AUTH_CHALLENGE: closed
        assert time.monotonic() - started < 5


def test_challenge_and_answers(refresh_broker: EmbeddedBroker) -> None:
    with RawConnection(refresh_broker.broker_port) as cnx:
        cnx.connect("token", hs256(KEY, "raw", expires_in=1).encode())
        assert cnx.next().type == T.CONNECTED
        challenge = cnx.next(timeout=5)
        assert challenge.type == T.AUTH_CHALLENGE
        assert challenge.auth_challenge.challenge.auth_method_name == "token"
        assert challenge.auth_challenge.challenge.auth_data == b"refresh"
        cnx.send_command(auth_response("token", hs256(KEY, "raw", expires_in=60).encode()))
        assert not cnx.closed(timeout=2.5)  # refreshed: the next checks leave it alone
    with RawConnection(refresh_broker.broker_port) as cnx:
        cnx.connect("token", hs256(KEY, "raw", expires_in=1).encode())
        assert cnx.next().type == T.CONNECTED
        assert cnx.next(timeout=5).type == T.AUTH_CHALLENGE
        cnx.send_command(auth_response("token", hs256(KEY, "someone-else", expires_in=60).encode()))
        assert cnx.closed(timeout=3)  # the role cannot change
    with RawConnection(refresh_broker.broker_port) as cnx:
        cnx.connect("token", hs256(KEY, "raw", expires_in=1).encode())
        assert cnx.next().type == T.CONNECTED
        assert cnx.next(timeout=5).type == T.AUTH_CHALLENGE
        assert cnx.closed(timeout=3)  # no answer before the next check
    with RawConnection(refresh_broker.broker_port) as cnx:
        cnx.connect("token", hs256(KEY, "raw", expires_in=1).encode())
        assert cnx.next().type == T.CONNECTED
        assert cnx.next(timeout=5).type == T.AUTH_CHALLENGE
        cnx.send_command(auth_response("token", hs256(secret_key(), "raw").encode()))
        reply = cnx.next(timeout=3)
        assert reply.type == T.ERROR and reply.error.error == pb.AuthenticationError
        assert cnx.closed(timeout=3)


def test_tokens_without_expiry_are_never_challenged(refresh_broker: EmbeddedBroker) -> None:
    with RawConnection(refresh_broker.broker_port) as cnx:
        cnx.connect("token", hs256(KEY, "forever").encode())
        assert cnx.next().type == T.CONNECTED
        with pytest.raises(TimeoutError):
            cnx.next(timeout=2.5)
