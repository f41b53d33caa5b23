"""Brokers with TLS ports for the TLS tests, and a hand-driven TLS connection for reading the
broker's raw answers."""

from __future__ import annotations

import ssl
import uuid
from pathlib import Path
from typing import Any

from tls_certs import Pki

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol._generated import starquake_wire_pb2 as pb

T = pb.BaseCommand


def tls_broker(data_dir: Path, pki: Pki, **overrides: Any) -> EmbeddedBroker:
    """A broker (not started) with TLS binary and HTTPS ports on free ports, serving ``pki``'s
    broker certificate, besides its plaintext ports (``overrides`` may turn them off)."""
    settings: dict[str, Any] = {
        "brokerServicePortTls": 0,
        "webServicePortTls": 0,
        "tlsCertificateFilePath": str(pki.broker_cert),
        "tlsKeyFilePath": str(pki.broker_key),
    }
    settings.update(overrides)
    return EmbeddedBroker(data_dir, **settings)


def make_tls_auth_broker(data_dir: Path, pki: Pki) -> EmbeddedBroker:
    """A TLS broker (not started) with TLS authentication: clients present a certificate that
    ``pki``'s CA signed, whose common name is their role."""
    return tls_broker(
        data_dir,
        pki,
        tlsTrustCertsFilePath=str(pki.ca_cert),
        authenticationEnabled=True,
        authenticationProviders="org.apache.pulsar.broker.authentication.AuthenticationProviderTls",
    )


def client_context(
    ca: Path,
    cert: tuple[Path, Path] | None = None,
    *,
    minimum: ssl.TLSVersion | None = None,
    maximum: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    """A Python SSL client context trusting ``ca`` (host names checked), optionally presenting
    ``cert`` = (certificate, key) and limited to the given TLS versions."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    if minimum is not None:
        context.minimum_version = minimum
    if maximum is not None:
        context.maximum_version = maximum
    return context


def round_trip(client: Any, earliest: Any, count: int = 20) -> None:
    """Produce ``count`` messages on a new topic and consume them back, in order, with
    ``client`` (the official client or Starquake's: they have the same API; ``earliest`` is
    that client's ``InitialPosition.Earliest``)."""
    topic = f"persistent://public/default/tls-{uuid.uuid4().hex[:10]}"
    consumer = client.subscribe(topic, "sub", initial_position=earliest)
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
