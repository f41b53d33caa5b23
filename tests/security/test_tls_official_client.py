"""The official client over TLS: ``pulsar+ssl://`` (and ``https://`` lookups) with the
trusted CA, with and without host name validation; refused with an untrusted CA or a host name
the broker's certificate does not carry."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from tls_certs import Pki, make_pki
from tls_setup import tls_broker

from starquake.broker.embedded import EmbeddedBroker

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
EARLIEST = pulsar.InitialPosition.Earliest


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EmbeddedBroker]:
    with tls_broker(tmp_path_factory.mktemp("tls") / "data", pki) as running:
        yield running


def _topic() -> str:
    return f"persistent://public/default/tls-{uuid.uuid4().hex[:10]}"


def _round_trip(client: pulsar.Client, count: int = 20) -> None:
    """Produce ``count`` messages and consume them back, in order."""
    topic = _topic()
    consumer = client.subscribe(topic, "sub", initial_position=EARLIEST)
    producer = client.create_producer(topic, block_if_queue_full=True)
    for i in range(count):
        producer.send(f"m-{i}".encode())
    got = []
    for _ in range(count):
        msg = consumer.receive(5000)
        consumer.acknowledge(msg)
        got.append(msg.data())
    assert got == [f"m-{i}".encode() for i in range(count)]
    producer.close()
    consumer.close()


@pytest.mark.parametrize("validate_hostname", [False, True])
def test_produce_and_consume_over_tls_with_the_trusted_ca(
    tls: EmbeddedBroker, pki: Pki, validate_hostname: bool
) -> None:
    assert tls.service_url_tls.startswith("pulsar+ssl://127.0.0.1:")
    client = pulsar.Client(
        tls.service_url_tls,
        tls_trust_certs_file_path=str(pki.ca_cert),
        tls_validate_hostname=validate_hostname,
        operation_timeout_seconds=10,
        logger=QUIET,
    )
    try:
        _round_trip(client)
    finally:
        client.close()


def test_https_service_url_looks_up_over_tls(tls: EmbeddedBroker, pki: Pki) -> None:
    """Given the HTTPS web URL, the client looks topics up over HTTPS and then uses the
    ``brokerUrlTls`` of the answer."""
    client = pulsar.Client(
        tls.web_service_url_tls,
        tls_trust_certs_file_path=str(pki.ca_cert),
        tls_validate_hostname=True,
        operation_timeout_seconds=10,
        logger=QUIET,
    )
    try:
        _round_trip(client, 5)
    finally:
        client.close()


@pytest.mark.parametrize("url", ["service_url_tls", "web_service_url_tls"])
def test_untrusted_ca_fails_to_connect(tls: EmbeddedBroker, pki: Pki, url: str) -> None:
    client = pulsar.Client(
        getattr(tls, url),
        tls_trust_certs_file_path=str(pki.untrusted_ca_cert),
        operation_timeout_seconds=3,
        logger=QUIET,
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(_topic())
    finally:
        client.close()


def test_tls_client_on_the_plaintext_port_fails(tls: EmbeddedBroker, pki: Pki) -> None:
    plain_port_as_tls = f"pulsar+ssl://127.0.0.1:{tls.broker_port}"
    client = pulsar.Client(
        plain_port_as_tls,
        tls_trust_certs_file_path=str(pki.ca_cert),
        operation_timeout_seconds=3,
        logger=QUIET,
    )
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(_topic())
    finally:
        client.close()


def test_host_name_not_in_the_certificate(tmp_path: Path, pki: Pki) -> None:
    """The broker's certificate names localhost and 127.0.0.1; reached as 127.0.0.2 the chain
    is still trusted, so only host name validation refuses it."""
    with tls_broker(tmp_path / "data", pki, bindAddress="127.0.0.2") as broker:
        assert broker.service_url_tls.startswith("pulsar+ssl://127.0.0.2:")
        strict = pulsar.Client(
            broker.service_url_tls,
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_validate_hostname=True,
            operation_timeout_seconds=3,
            logger=QUIET,
        )
        try:
            with pytest.raises(pulsar.PulsarException):
                strict.create_producer(_topic())
        finally:
            strict.close()
        lenient = pulsar.Client(
            broker.service_url_tls,
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_validate_hostname=False,
            operation_timeout_seconds=10,
            logger=QUIET,
        )
        try:
            _round_trip(lenient, 3)
        finally:
            lenient.close()


def test_insecure_client_accepts_any_certificate(tls: EmbeddedBroker, pki: Pki) -> None:
    client = pulsar.Client(
        tls.service_url_tls,
        tls_trust_certs_file_path=str(pki.untrusted_ca_cert),
        tls_allow_insecure_connection=True,
        operation_timeout_seconds=10,
        logger=QUIET,
    )
    try:
        _round_trip(client, 3)
    finally:
        client.close()
