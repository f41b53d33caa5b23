"""TLS authentication: the role is the common name of the client certificate a trusted CA
signed; no certificate (or a plaintext port) is refused. The official client and ours, on
``pulsar+ssl://``, and the admin API on ``https://``."""

from __future__ import annotations

import types
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest
from auth_support import CLIENTS, assert_refused, roles
from tls_certs import Pki
from tls_setup import make_tls_auth_broker

from starquake import client as sq
from starquake.admin.client import PulsarAdmin, PulsarAdminError
from starquake.broker.embedded import EmbeddedBroker


@pytest.fixture(scope="module")
def tls_auth_broker(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EmbeddedBroker]:
    with make_tls_auth_broker(tmp_path_factory.mktemp("tls-auth") / "data", pki) as running:
        yield running


def _topic() -> str:
    return f"persistent://public/default/tls-auth-{uuid.uuid4().hex[:10]}"


def _client(module: types.ModuleType, url: str, ca: str, auth: object, timeout: int = 10) -> Any:
    return module.Client(
        url,
        authentication=auth,
        tls_trust_certs_file_path=ca,
        operation_timeout_seconds=timeout,
        logger=module.ConsoleLogger(module.LoggerLevel.Error),
    )


@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_role_is_the_certificate_common_name(
    tls_auth_broker: EmbeddedBroker, pki: Pki, module: types.ModuleType
) -> None:
    role = f"cn-{module.__name__}"
    cert, key = pki.client(role)
    auth = module.AuthenticationTLS(str(cert), str(key))
    client = _client(module, tls_auth_broker.service_url_tls, str(pki.ca_cert), auth)
    try:
        topic = _topic()
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"signed")
        assert consumer.receive(timeout_millis=10000).data() == b"signed"
        assert role in roles(tls_auth_broker)
    finally:
        client.close()


@pytest.mark.parametrize("module", CLIENTS, ids=["official", "starquake"])
def test_refused_without_a_certificate(
    tls_auth_broker: EmbeddedBroker, pki: Pki, module: types.ModuleType
) -> None:
    client = _client(module, tls_auth_broker.service_url_tls, str(pki.ca_cert), None, timeout=3)
    try:
        with pytest.raises(Exception) as refused:
            client.create_producer(_topic())
    finally:
        client.close()
    if module is sq:
        assert isinstance(refused.value, sq.AuthenticationError)
    else:
        assert isinstance(refused.value, pulsar.Timeout | pulsar.AuthenticationError)


def test_plaintext_port_has_no_certificate(tls_auth_broker: EmbeddedBroker, pki: Pki) -> None:
    cert, key = pki.client("plain")
    auth = sq.AuthenticationTLS(str(cert), str(key))
    assert_refused(sq, tls_auth_broker.service_url, auth, _topic())


def test_https_admin_with_a_client_certificate(tls_auth_broker: EmbeddedBroker, pki: Pki) -> None:
    cert, key = pki.client("admin-cn")
    url = tls_auth_broker.web_service_url_tls
    admin = PulsarAdmin(
        url,
        tls_trust_certs_file_path=str(pki.ca_cert),
        authentication=sq.AuthenticationTLS(str(cert), str(key)),
    )
    assert "public" in admin.tenants.list()
    anonymous = PulsarAdmin(url, tls_trust_certs_file_path=str(pki.ca_cert))
    with pytest.raises(PulsarAdminError) as refused:
        anonymous.tenants.list()
    assert refused.value.status == 401
