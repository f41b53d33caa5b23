"""Basic authentication (htpasswd with bcrypt, apr1 and crypt hashes) with the official client
and ours, on the binary protocol and over HTTP."""

from __future__ import annotations

import base64
import types
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from auth_support import (
    BASIC_PROVIDER,
    CLIENTS,
    HASHES,
    assert_refused,
    client_of,
    data_url,
    htpasswd,
    produce_consume,
    roles,
)
from raw_connection import RawConnection

from starquake.admin.client import PulsarAdmin, PulsarAdminError
from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.server import BrokerStartError
from starquake.protocol._generated import starquake_wire_pb2 as pb

T = pb.BaseCommand
USERS = {f"{kind}-user": f"{kind}-secret" for kind in HASHES}


def _topic() -> str:
    return f"persistent://public/default/basic-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def basic_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    directory = tmp_path_factory.mktemp("basic")
    users = {f"{kind}-user": HASHES[kind](f"{kind}-secret") for kind in HASHES}
    conf = htpasswd(directory / "htpasswd", users)
    with EmbeddedBroker(
        directory / "data",
        authenticationEnabled=True,
        authenticationProviders=BASIC_PROVIDER,
        basicAuthConf=f"file://{conf}",
    ) as running:
        yield running


@pytest.mark.parametrize("kind", sorted(HASHES))
@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_each_hash_kind(basic_broker: EmbeddedBroker, module: types.ModuleType, kind: str) -> None:
    user, password = f"{kind}-user", f"{kind}-secret"
    url = basic_broker.service_url
    client = client_of(module, url, module.AuthenticationBasic(user, password))
    try:
        client.create_producer(_topic()).send(b"x")
        assert user in roles(basic_broker)
    finally:
        client.close()
    # (crypt's DES hash looks at the first 8 characters only: change one of them)
    assert_refused(module, url, module.AuthenticationBasic(user, "!" + password), _topic())


@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_unknown_user_and_no_credentials(
    basic_broker: EmbeddedBroker, module: types.ModuleType
) -> None:
    url = basic_broker.service_url
    assert_refused(module, url, module.AuthenticationBasic("nobody", "bcrypt-secret"), _topic())
    assert_refused(module, url, None, _topic())


def test_json_parameters(basic_broker: EmbeddedBroker) -> None:
    from starquake import client as sq

    params = '{"username": "apr1-user", "password": "apr1-secret"}'
    produce_consume(
        sq, basic_broker.service_url, sq.AuthenticationBasic(auth_params_string=params), _topic()
    )
    plugin = "org.apache.pulsar.client.impl.auth.AuthenticationBasic"
    java_params = '{"userId": "crypt-user", "password": "crypt-secret"}'
    produce_consume(sq, basic_broker.service_url, sq.Authentication(plugin, java_params), _topic())


def test_malformed_credentials(basic_broker: EmbeddedBroker) -> None:
    with RawConnection(basic_broker.broker_port) as cnx:
        cnx.connect("basic", b"no-colon")
        reply = cnx.next()
        assert reply.type == T.ERROR and reply.error.error == pb.AuthenticationError
        assert "user:password" in reply.error.message
        assert cnx.closed()


def test_http_basic(basic_broker: EmbeddedBroker) -> None:
    from starquake import client as sq

    good = PulsarAdmin(
        basic_broker.web_service_url,
        authentication=sq.AuthenticationBasic("bcrypt-user", "bcrypt-secret"),
    )
    assert "public" in good.tenants.list()
    bad = PulsarAdmin(
        basic_broker.web_service_url, authentication=sq.AuthenticationBasic("bcrypt-user", "nope")
    )
    with pytest.raises(PulsarAdminError) as refused:
        bad.tenants.list()
    assert refused.value.status == 401
    credentials = base64.b64encode(b"apr1-user:apr1-secret").decode()
    request = urllib.request.Request(
        f"{basic_broker.web_service_url}/admin/v2/tenants",
        headers={"Authorization": f"Basic {credentials}"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        assert reply.status == 200
    broken = urllib.request.Request(
        f"{basic_broker.web_service_url}/admin/v2/tenants",
        headers={"Authorization": "Basic !!!"},
    )
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(broken, timeout=10)
    error.value.close()
    assert error.value.code == 401


def test_inline_htpasswd_and_bad_files(tmp_path: Path) -> None:
    line = f"inline:{HASHES['apr1']('pw')}\n".encode()
    from starquake import client as sq

    with EmbeddedBroker(
        tmp_path / "data",
        authenticationEnabled=True,
        authenticationProviders="basic",
        basicAuthConf=data_url(line),
    ) as broker:
        produce_consume(sq, broker.service_url, sq.AuthenticationBasic("inline", "pw"), _topic())
    for number, content in enumerate([b"user:{SHA}abc\n", b"just-a-line\n"]):
        broker = EmbeddedBroker(
            tmp_path / f"d{number}",
            authenticationEnabled=True,
            authenticationProviders="basic",
            basicAuthConf=data_url(content),
        )
        with pytest.raises(BrokerStartError, match="basicAuthConf: line 1"):
            broker.start()
