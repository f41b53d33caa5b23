"""Starquake's own clients (blocking and asyncio) over TLS: the same settings as the official
client (``tls_trust_certs_file_path``, ``tls_validate_hostname``,
``tls_allow_insecure_connection``, ``use_tls``), the same outcomes."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
from tls_certs import Pki
from tls_setup import round_trip, tls_broker

import starquake.client as sq
import starquake.client.asyncio as sq_asyncio
from starquake.broker.embedded import EmbeddedBroker
from starquake.client.exceptions import ConnectError, InvalidConfiguration, PulsarException
from starquake.client.exceptions import LookupError as ClientLookupError

EARLIEST = sq.InitialPosition.Earliest


def _topic() -> str:
    return f"persistent://public/default/sq-tls-{uuid.uuid4().hex[:10]}"


def _fails_fast(client: sq.Client, error: type[Exception] = PulsarException) -> None:
    """Creating a producer fails, well before the operation timeout of ``client`` (5 s)."""
    started = time.monotonic()
    try:
        with pytest.raises(error):
            client.create_producer(_topic())
    finally:
        client.close()
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("validate_hostname", [False, True])
def test_blocking_client_over_tls(tls: EmbeddedBroker, pki: Pki, validate_hostname: bool) -> None:
    client = sq.Client(
        tls.service_url_tls,
        tls_trust_certs_file_path=str(pki.ca_cert),
        tls_validate_hostname=validate_hostname,
        operation_timeout_seconds=10,
    )
    try:
        round_trip(client, EARLIEST)
    finally:
        client.close()


def test_use_tls_with_a_pulsar_url(tls: EmbeddedBroker, pki: Pki) -> None:
    """``use_tls=True`` makes a ``pulsar://`` URL a TLS one, as in the official client."""
    client = sq.Client(
        f"pulsar://127.0.0.1:{tls.broker_port_tls}",
        use_tls=True,
        tls_trust_certs_file_path=str(pki.ca_cert),
        operation_timeout_seconds=10,
    )
    try:
        round_trip(client, EARLIEST, 3)
    finally:
        client.close()


def test_untrusted_ca_fails(tls: EmbeddedBroker, pki: Pki) -> None:
    client = sq.Client(
        tls.service_url_tls,
        tls_trust_certs_file_path=str(pki.untrusted_ca_cert),
        operation_timeout_seconds=5,
    )
    _fails_fast(client, ConnectError)


def test_system_cas_do_not_trust_a_private_ca(tls: EmbeddedBroker) -> None:
    client = sq.Client(tls.service_url_tls, operation_timeout_seconds=5)
    _fails_fast(client, ConnectError)


def test_insecure_connection_accepts_any_certificate(tls: EmbeddedBroker, pki: Pki) -> None:
    client = sq.Client(
        tls.service_url_tls,
        tls_trust_certs_file_path=str(pki.untrusted_ca_cert),
        tls_allow_insecure_connection=True,
        operation_timeout_seconds=10,
    )
    try:
        round_trip(client, EARLIEST, 3)
    finally:
        client.close()


def test_missing_trust_file_is_a_configuration_error(tls: EmbeddedBroker, tmp_path: Path) -> None:
    client = sq.Client(
        tls.service_url_tls,
        tls_trust_certs_file_path=str(tmp_path / "missing.pem"),
        operation_timeout_seconds=5,
    )
    started = time.monotonic()
    try:
        with pytest.raises(InvalidConfiguration, match=r"missing\.pem"):
            client.create_producer(_topic())
    finally:
        client.close()
    assert time.monotonic() - started < 4


def test_wrong_argument_types_are_refused() -> None:
    with pytest.raises(ValueError, match="tls_validate_hostname"):
        sq.Client("pulsar+ssl://127.0.0.1:6651", tls_validate_hostname="yes")  # type: ignore[arg-type]


def test_host_name_not_in_the_certificate(tmp_path: Path, pki: Pki) -> None:
    with tls_broker(tmp_path / "data", pki, bindAddress="127.0.0.2") as broker:
        strict = sq.Client(
            broker.service_url_tls,
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_validate_hostname=True,
            operation_timeout_seconds=5,
        )
        _fails_fast(strict, ConnectError)
        lenient = sq.Client(
            broker.service_url_tls,
            tls_trust_certs_file_path=str(pki.ca_cert),
            operation_timeout_seconds=10,
        )
        try:
            round_trip(lenient, EARLIEST, 3)
        finally:
            lenient.close()


def test_tls_client_of_a_broker_without_tls_lookup_urls(tmp_path: Path, pki: Pki) -> None:
    """A TLS client told by a lookup only of a plaintext URL fails with a clear error
    (here: an advertised listener that names only a ``pulsar://`` URL)."""
    with tls_broker(
        tmp_path / "data", pki, advertisedListeners="plain:pulsar://127.0.0.1:6650"
    ) as broker:
        client = sq.Client(
            broker.service_url_tls,
            tls_trust_certs_file_path=str(pki.ca_cert),
            listener_name="plain",
            operation_timeout_seconds=5,
        )
        _fails_fast(client, ClientLookupError)


async def _async_round_trip(url: str, ca: Path, validate_hostname: bool) -> list[bytes]:
    client = sq_asyncio.Client(
        url,
        tls_trust_certs_file_path=str(ca),
        tls_validate_hostname=validate_hostname,
        operation_timeout_seconds=10,
    )
    try:
        topic = _topic()
        consumer = await client.subscribe(topic, "sub", initial_position=EARLIEST)
        producer = await client.create_producer(topic)
        await asyncio.gather(*(producer.send(f"a-{i}".encode()) for i in range(10)))
        got = []
        for _ in range(10):
            msg = await consumer.receive(5000)
            await consumer.acknowledge(msg)
            got.append(msg.data())
        return got
    finally:
        await client.close()


@pytest.mark.parametrize("validate_hostname", [False, True])
def test_asyncio_client_over_tls(tls: EmbeddedBroker, pki: Pki, validate_hostname: bool) -> None:
    got = asyncio.run(_async_round_trip(tls.service_url_tls, pki.ca_cert, validate_hostname))
    assert got == [f"a-{i}".encode() for i in range(10)]


def test_asyncio_client_untrusted_ca_fails(tls: EmbeddedBroker, pki: Pki) -> None:
    async def attempt() -> None:
        client = sq_asyncio.Client(
            tls.service_url_tls,
            tls_trust_certs_file_path=str(pki.untrusted_ca_cert),
            operation_timeout_seconds=5,
        )
        try:
            with pytest.raises(ConnectError):
                await client.create_producer(_topic())
        finally:
            await client.close()

    started = time.monotonic()
    asyncio.run(attempt())
    assert time.monotonic() - started < 4
