"""The official client over TLS: ``pulsar+ssl://`` (and ``https://`` lookups) with the
trusted CA, with and without host name validation; refused with an untrusted CA or a host name
the broker's certificate does not carry."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from tls_certs import Pki
from tls_setup import round_trip, tls_broker

from starquake.broker.embedded import EmbeddedBroker

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
EARLIEST = pulsar.InitialPosition.Earliest


def _topic() -> str:
    return f"persistent://public/default/tls-{uuid.uuid4().hex[:10]}"


def _works(url: str, ca: Path, count: int = 20, **settings: Any) -> None:
    """A client of ``url`` trusting ``ca`` produces and consumes ``count`` messages."""
    client = pulsar.Client(
        url,
        tls_trust_certs_file_path=str(ca),
        operation_timeout_seconds=10,
        logger=QUIET,
        **settings,
    )
    try:
        round_trip(client, EARLIEST, count)
    finally:
        client.close()


def _refused(url: str, ca: Path, **settings: Any) -> None:
    """A client of ``url`` trusting ``ca`` cannot create a producer."""
    client = pulsar.Client(
        url,
        tls_trust_certs_file_path=str(ca),
        operation_timeout_seconds=3,
        logger=QUIET,
        **settings,
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(_topic())
    finally:
        client.close()


@pytest.mark.parametrize("validate_hostname", [False, True])
def test_produce_and_consume_over_tls_with_the_trusted_ca(
    tls: EmbeddedBroker, pki: Pki, validate_hostname: bool
) -> None:
    assert tls.service_url_tls.startswith("pulsar+ssl://127.0.0.1:")
    _works(tls.service_url_tls, pki.ca_cert, tls_validate_hostname=validate_hostname)


def test_https_service_url_looks_up_over_tls(tls: EmbeddedBroker, pki: Pki) -> None:
    """Given the HTTPS web URL, the client looks topics up over HTTPS and then uses the
    ``brokerUrlTls`` of the answer."""
    _works(tls.web_service_url_tls, pki.ca_cert, 5, tls_validate_hostname=True)


@pytest.mark.parametrize("url", ["service_url_tls", "web_service_url_tls"])
def test_untrusted_ca_fails_to_connect(tls: EmbeddedBroker, pki: Pki, url: str) -> None:
    _refused(getattr(tls, url), pki.untrusted_ca_cert)


def test_tls_client_on_the_plaintext_port_fails(tls: EmbeddedBroker, pki: Pki) -> None:
    _refused(f"pulsar+ssl://127.0.0.1:{tls.broker_port}", pki.ca_cert)


def test_host_name_not_in_the_certificate(tmp_path: Path, pki: Pki) -> None:
    """The broker's certificate names localhost and 127.0.0.1; reached as 127.0.0.2 the chain
    is still trusted, so only host name validation refuses it."""
    with tls_broker(tmp_path / "data", pki, bindAddress="127.0.0.2") as broker:
        assert broker.service_url_tls.startswith("pulsar+ssl://127.0.0.2:")
        _refused(broker.service_url_tls, pki.ca_cert, tls_validate_hostname=True)
        _works(broker.service_url_tls, pki.ca_cert, 3, tls_validate_hostname=False)


def test_insecure_client_accepts_any_certificate(tls: EmbeddedBroker, pki: Pki) -> None:
    _works(tls.service_url_tls, pki.untrusted_ca_cert, 3, tls_allow_insecure_connection=True)
