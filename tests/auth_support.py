"""Brokers with authentication on, credentials for them, and ways to see who is connected, for
the authentication tests (test_auth_*.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import os
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jwt
import pulsar
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from passlib.hash import apr_md5_crypt, bcrypt, des_crypt

from starquake import client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import FrameDecoder, encode_command

T = pb.BaseCommand
TOKEN_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderToken"
BASIC_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic"
TLS_PROVIDER = "org.apache.pulsar.broker.authentication.AuthenticationProviderTls"
CLIENTS = [pulsar, sq]
"""The official client and ours: the same API."""


def data_url(data: bytes) -> str:
    return "data:;base64," + base64.b64encode(data).decode()


def secret_key() -> bytes:
    return os.urandom(32)


def hs256(key: bytes, role: str, expires_in: float | None = None, **claims: Any) -> str:
    """An HS256 token for ``role`` (``expires_in`` seconds from now, or never)."""
    payload: dict[str, Any] = {"sub": role, **claims}
    if expires_in is not None:
        payload["exp"] = int(time.time() + expires_in)
    return jwt.encode(payload, key, algorithm="HS256")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw_hs256(key: bytes, claims: dict[str, Any]) -> str:
    """An HS256 token made by hand (PyJWT refuses some keys this must test, e.g. a public key's
    bytes)."""
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    payload = _b64url(json.dumps(claims).encode())
    signature = hmac.new(key, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    return f"{header}.{payload}.{_b64url(signature)}"


class KeyPair:
    """A private key and its public key in DER (as ``pulsar tokens create-key-pair`` writes)."""

    def __init__(self, algorithm: str) -> None:
        self.algorithm = algorithm
        self.private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
        if algorithm == "RS256":
            self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        else:
            self.private = ec.generate_private_key(ec.SECP256R1())
        self.public_der = self.private.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    def token(self, role: str, expires_in: float | None = None) -> str:
        payload: dict[str, Any] = {"sub": role}
        if expires_in is not None:
            payload["exp"] = int(time.time() + expires_in)
        return jwt.encode(payload, self.private, algorithm=self.algorithm)


def token_broker(data_dir: Path, key: bytes, **settings: Any) -> EmbeddedBroker:
    """A broker (not started) with token authentication by the HS256 secret ``key``."""
    return EmbeddedBroker(
        data_dir,
        authenticationEnabled=True,
        authenticationProviders=TOKEN_PROVIDER,
        tokenSecretKey=data_url(key),
        **settings,
    )


def htpasswd(path: Path, users: dict[str, str]) -> Path:
    """Write an htpasswd file: ``user -> hash``."""
    path.write_text("".join(f"{user}:{hashed}\n" for user, hashed in users.items()))
    return path


HASHES: dict[str, Callable[[str], str]] = {
    "bcrypt": lambda pw: bcrypt.using(rounds=5, ident="2y").hash(pw),
    "apr1": lambda pw: apr_md5_crypt.hash(pw),
    "crypt": lambda pw: des_crypt.hash(pw),
}


def client_of(module: types.ModuleType, url: str, auth: Any = None, timeout: int = 10) -> Any:
    """A client of ``module`` (``pulsar`` or ``starquake.client``) with ``auth``."""
    return module.Client(
        url,
        authentication=auth,
        operation_timeout_seconds=timeout,
        logger=module.ConsoleLogger(module.LoggerLevel.Error),
    )


def token_auth(module: types.ModuleType, token: str | Callable[[], str]) -> Any:
    return module.AuthenticationToken(token)


def refused(module: types.ModuleType, url: str, auth: Any, topic: str) -> Exception:
    """The error creating a producer with ``auth`` fails with (AssertionError if it works).

    Our client raises AuthenticationError at once; the official client retries a refused
    CONNECT until its operation timeout (2 s here) and then raises Timeout.
    """
    client = client_of(module, url, auth, timeout=2)
    try:
        client.create_producer(topic)
    except Exception as exc:
        return exc
    finally:
        client.close()
    raise AssertionError("the broker accepted credentials it should have refused")


def assert_refused(module: types.ModuleType, url: str, auth: Any, topic: str) -> None:
    exc = refused(module, url, auth, topic)
    if module is sq:
        assert isinstance(exc, sq.AuthenticationError), exc
        assert "Failed to authenticate" in str(exc)
    else:
        assert isinstance(exc, pulsar.Timeout | pulsar.AuthenticationError | pulsar.ConnectError), (
            exc
        )


def produce_consume(module: types.ModuleType, url: str, auth: Any, topic: str) -> None:
    """Produce and consume one message with ``auth``: the credentials are accepted."""
    client = client_of(module, url, auth)
    try:
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        producer.send(b"hello")
        msg = consumer.receive(timeout_millis=10000)
        assert msg.data() == b"hello"
        consumer.acknowledge(msg)
    finally:
        client.close()


def roles(broker: EmbeddedBroker) -> list[str | None]:
    """The roles of the broker's connections that finished their handshake."""

    async def read() -> list[str | None]:
        return [c.auth_role for c in broker.service.connections if c.connected]

    return broker.call(read())


def connections(broker: EmbeddedBroker) -> list[Any]:
    """The broker's connections that finished their handshake (read on its loop)."""

    async def read() -> list[Any]:
        return [c for c in broker.service.connections if c.connected]

    return broker.call(read())


def auth_response(method: str, data: bytes) -> pb.BaseCommand:
    cmd = T(type=T.AUTH_RESPONSE)
    cmd.auth_response.client_version = "raw-auth-test"
    cmd.auth_response.protocol_version = commands.MAX_PROTOCOL_VERSION
    cmd.auth_response.response.auth_method_name = method
    cmd.auth_response.response.auth_data = data
    return cmd


async def storm_attempt(
    port: int, method: str, data: bytes, wait: float = 30, local_host: str | None = None
) -> int:
    """One CONNECT with (wrong) credentials over a fresh socket (from ``local_host``, e.g.
    another loopback address); the ServerError code of the broker's ERROR (-1: it answered
    CONNECTED; -2: it closed without an answer)."""
    local = (local_host, 0) if local_host else None
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=local)
    try:
        cmd = T(type=T.CONNECT)
        cmd.connect.client_version = "storm"
        cmd.connect.protocol_version = commands.MAX_PROTOCOL_VERSION
        cmd.connect.auth_method_name = method
        cmd.connect.auth_data = data
        writer.write(encode_command(cmd))
        decoder = FrameDecoder()
        async with asyncio.timeout(wait):
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return -2
                for frame in decoder.feed(chunk):
                    if frame.command.type == T.ERROR:
                        return int(frame.command.error.error)
                    if frame.command.type == T.CONNECTED:
                        return -1
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()
