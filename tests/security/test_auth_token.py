"""Token authentication on the binary protocol, with the official client and ours: HS256,
RS256 and ES256 tokens; wrong signatures, expired tokens and missing tokens refused; the
anonymous role; the role each connection gets."""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from auth_support import (
    CLIENTS,
    TOKEN_PROVIDER,
    KeyPair,
    assert_refused,
    client_of,
    data_url,
    hs256,
    produce_consume,
    raw_hs256,
    roles,
    secret_key,
    token_auth,
    token_broker,
)
from raw_connection import RawConnection

from starquake import client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.server import BrokerStartError
from starquake.protocol._generated import starquake_wire_pb2 as pb

T = pb.BaseCommand
KEY = secret_key()


def _topic() -> str:
    return f"persistent://public/default/auth-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def hs_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    with token_broker(tmp_path_factory.mktemp("hs") / "data", KEY) as running:
        yield running


@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_hs256_token_is_accepted_and_names_the_role(
    hs_broker: EmbeddedBroker, module: types.ModuleType
) -> None:
    role = f"app-{module.__name__}"
    client = client_of(module, hs_broker.service_url, token_auth(module, hs256(KEY, role)))
    try:
        producer = client.create_producer(_topic())
        producer.send(b"x")
        assert role in roles(hs_broker)
    finally:
        client.close()


@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_bad_tokens_are_refused(hs_broker: EmbeddedBroker, module: types.ModuleType) -> None:
    url = hs_broker.service_url
    wrong_key = hs256(secret_key(), "app")
    expired = hs256(KEY, "app", expires_in=-10)
    # the official client takes its operation timeout to give up: fewer cases for it
    tokens = [wrong_key, expired] if module is pulsar else [wrong_key, expired, "not-a-token"]
    for token in tokens:
        assert_refused(module, url, token_auth(module, token), _topic())
    if module is sq:
        assert_refused(module, url, None, _topic())  # no credentials, no anonymous role


def test_refusals_name_their_reason(hs_broker: EmbeddedBroker) -> None:
    cases = {
        hs256(secret_key(), "app").encode(): "invalid token signature",
        hs256(KEY, "app", expires_in=-10).encode(): "token expired",
        hs256(KEY, "app", nbf=2**40).encode(): "not yet valid",
        b"": "no token given",
    }
    for data, reason in cases.items():
        with RawConnection(hs_broker.broker_port) as cnx:
            cnx.connect("token", data)
            reply = cnx.next()  # at once; the connection closes after the refusal linger
            assert reply.type == T.ERROR
            assert reply.error.error == pb.AuthenticationError
            assert reply.error.request_id == 2**64 - 1
            assert reply.error.message.startswith("Failed to authenticate")
            assert reason in reply.error.message
            assert cnx.closed()
    with RawConnection(hs_broker.broker_port) as cnx:
        cnx.connect("oauth2", b"x")
        reply = cnx.next()
        assert "'oauth2' is not enabled" in reply.error.message


def test_commands_before_connected_close_the_connection(hs_broker: EmbeddedBroker) -> None:
    with RawConnection(hs_broker.broker_port) as cnx:
        cmd = T(type=T.PARTITIONED_METADATA)
        cmd.partition_metadata.topic = _topic()
        cmd.partition_metadata.request_id = 1
        cnx.send_command(cmd)
        assert cnx.closed()


def test_our_client_reads_a_token_file_at_each_connect(
    hs_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    path = tmp_path / "token"
    path.write_text(hs256(secret_key(), "app") + "\n")
    auth = sq.AuthenticationToken(f"file://{path}")
    assert_refused(sq, hs_broker.service_url, auth, _topic())
    path.write_text(hs256(KEY, "file-role") + "\n")
    produce_consume(sq, hs_broker.service_url, auth, _topic())


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_public_key_tokens(tmp_path: Path, module: types.ModuleType, algorithm: str) -> None:
    keys = KeyPair(algorithm)
    public = tmp_path / "public.key"
    public.write_bytes(keys.public_der)
    settings = {
        "authenticationEnabled": True,
        "authenticationProviders": TOKEN_PROVIDER,
        "tokenPublicKey": f"file://{public}",
        "tokenPublicAlg": algorithm,
    }
    with EmbeddedBroker(tmp_path / "data", **settings) as broker:
        url = broker.service_url
        produce_consume(module, url, token_auth(module, keys.token("signer")), _topic())
        other = KeyPair(algorithm).token("signer")
        assert_refused(module, url, token_auth(module, other), _topic())
        if module is sq:  # (the official client takes its operation timeout to give up)
            expired = keys.token("signer", expires_in=-5)
            assert_refused(module, url, token_auth(module, expired), _topic())
            # an HMAC token signed with the public key's bytes must not pass
            confused = raw_hs256(keys.public_der, {"sub": "signer"})
            assert_refused(module, url, token_auth(module, confused), _topic())


@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_anonymous_role(tmp_path: Path, module: types.ModuleType) -> None:
    with token_broker(tmp_path / "data", KEY, anonymousUserRole="guest") as broker:
        client = client_of(module, broker.service_url)
        try:
            client.create_producer(_topic()).send(b"x")
            assert roles(broker) == ["guest"]
        finally:
            client.close()
        # wrong credentials are still refused: the anonymous role is for those with none
        assert_refused(module, broker.service_url, token_auth(module, "garbage"), _topic())


def test_role_claim_and_audience(tmp_path: Path) -> None:
    settings = {"tokenAuthClaim": "principal", "tokenAudience": "starquake"}
    with token_broker(tmp_path / "data", KEY, **settings) as broker:
        url = broker.service_url
        good = hs256(KEY, "ignored", principal="svc", aud=["other", "starquake"])
        client = client_of(sq, url, sq.AuthenticationToken(good))
        try:
            client.create_producer(_topic()).send(b"x")
            assert roles(broker) == ["svc"]
        finally:
            client.close()
        for bad in (
            hs256(KEY, "x", principal="svc", aud="elsewhere"),
            hs256(KEY, "x", principal="svc"),
            hs256(KEY, "svc", aud="starquake"),  # no 'principal' claim
        ):
            assert_refused(sq, url, sq.AuthenticationToken(bad), _topic())


def test_plugin_form_of_the_official_and_our_client(hs_broker: EmbeddedBroker) -> None:
    token = hs256(KEY, "plugin-role")
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationToken"
    produce_consume(
        sq, hs_broker.service_url, sq.Authentication(plugin, f"token:{token}"), _topic()
    )
    produce_consume(sq, hs_broker.service_url, sq.Authentication("token", token), _topic())


def test_configuration_errors_stop_the_start(tmp_path: Path) -> None:
    cases = [
        ({"authenticationProviders": "org.example.Unknown"}, "unknown provider"),
        ({"authenticationProviders": "token"}, "tokenSecretKey or tokenPublicKey"),
        (
            {"authenticationProviders": "token", "tokenSecretKey": data_url(b"short")},
            "at least 32",
        ),
        (
            {"authenticationProviders": "token", "tokenSecretKey": "file:///no/such/key"},
            "tokenSecretKey",
        ),
        ({"authenticationProviders": "basic"}, "basicAuthConf"),
    ]
    for number, (settings, message) in enumerate(cases):
        broker = EmbeddedBroker(tmp_path / f"d{number}", authenticationEnabled=True, **settings)
        with pytest.raises(BrokerStartError, match=message):
            broker.start()


def test_official_client_error_for_unknown_role_is_not_a_crash(hs_broker: EmbeddedBroker) -> None:
    """A refused client gets an error, and the broker keeps serving others."""
    assert_refused(pulsar, hs_broker.service_url, pulsar.AuthenticationToken("x.y.z"), _topic())
    produce_consume(
        pulsar, hs_broker.service_url, pulsar.AuthenticationToken(hs256(KEY, "ok")), _topic()
    )
