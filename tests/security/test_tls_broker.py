"""The broker's TLS ports: plaintext turned off, the URLs that lookups and the admin API give,
client certificates (required, optional, insecure), protocol versions and ciphers, and clear
start-up errors."""

from __future__ import annotations

import json
import logging
import ssl
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pulsar
import pytest
from raw_connection import RawConnection, T
from tls_certs import Pki
from tls_setup import client_context, tls_broker

from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.security.tls import openssl_cipher_name, peer_common_name
from starquake.broker.server import BrokerStartError
from starquake.client import Client as SqClient
from starquake.client.exceptions import ConnectError, Timeout

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
REFUSED = (ssl.SSLError, ConnectionError, OSError)


def _topic() -> str:
    return f"persistent://public/default/tlsb-{uuid.uuid4().hex[:10]}"


def _https_json(url: str, ca: Path) -> Any:
    context = ssl.create_default_context(cafile=str(ca))
    with urllib.request.urlopen(url, timeout=10, context=context) as resp:
        return json.loads(resp.read())


def _official(url: str, ca: Path, cert: tuple[Path, Path] | None = None, timeout: int = 10) -> Any:
    extra: dict[str, Any] = {}
    if cert is not None:
        extra = {
            "tls_certificate_file_path": str(cert[0]),
            "tls_private_key_file_path": str(cert[1]),
        }
    return pulsar.Client(
        url,
        tls_trust_certs_file_path=str(ca),
        operation_timeout_seconds=timeout,
        logger=QUIET,
        **extra,
    )


def _produces(client: Any) -> None:
    try:
        producer = client.create_producer(_topic(), block_if_queue_full=True)
        producer.send(b"x")
        producer.close()
    finally:
        client.close()


def _refused(client: Any) -> None:
    try:
        with pytest.raises(pulsar.PulsarException):
            client.create_producer(_topic())
    finally:
        client.close()


def _connect(port: int, context: ssl.SSLContext) -> None:
    """Connect over TLS and send CONNECT (raises if the broker refuses)."""
    with RawConnection(port, context) as raw:
        raw.handshake()


async def _peer_names(broker: EmbeddedBroker) -> list[str | None]:
    return [peer_common_name(cnx.transport) for cnx in list(broker.service.connections)]


# --- plaintext off, URLs -------------------------------------------------------------------


def test_only_tls_when_plaintext_ports_are_off(tmp_path: Path, pki: Pki) -> None:
    with tls_broker(tmp_path / "data", pki, brokerServicePort=-1, webServicePort=-1) as broker:
        assert broker.broker_port == -1
        assert broker.service_url == broker.service_url_tls
        assert broker.service_url.startswith("pulsar+ssl://127.0.0.1:")
        assert broker.web_service_url == broker.web_service_url_tls
        assert broker.web_service_url.startswith("https://127.0.0.1:")
        topic = _topic()
        # HTTP lookup (over HTTPS): only the TLS URLs
        answer = _https_json(
            f"{broker.web_service_url_tls}/lookup/v2/topic/{topic.replace('://', '/')}",
            pki.ca_cert,
        )
        assert answer["brokerUrl"] == ""
        assert answer["brokerUrlTls"] == broker.service_url_tls
        assert answer["httpUrl"] == ""
        assert answer["httpUrlTls"] == broker.web_service_url_tls
        # binary lookup: brokerServiceUrlTls (field 2), no brokerServiceUrl
        with RawConnection(broker.broker_port_tls, client_context(pki.ca_cert)) as raw:
            assert raw.handshake().type == T.CONNECTED
            response = raw.lookup(topic)
            assert response.brokerServiceUrlTls == broker.service_url_tls
            assert not response.HasField("brokerServiceUrl")
        # the cluster's registration and the broker list name the TLS addresses
        cluster = _https_json(
            f"{broker.web_service_url_tls}/admin/v2/clusters/standalone", pki.ca_cert
        )
        assert cluster["brokerServiceUrlTls"] == broker.service_url_tls
        assert cluster["serviceUrlTls"] == broker.web_service_url_tls
        assert "brokerServiceUrl" not in cluster and "serviceUrl" not in cluster
        brokers = _https_json(
            f"{broker.web_service_url_tls}/admin/v2/brokers/standalone", pki.ca_cert
        )
        assert brokers == [broker.web_service_url_tls.removeprefix("https://")]
        # and the official client works through either TLS URL
        _produces(_official(broker.service_url_tls, pki.ca_cert))
        _produces(_official(broker.web_service_url_tls, pki.ca_cert))


def test_lookups_carry_both_urls_when_both_ports_are_on(tmp_path: Path, pki: Pki) -> None:
    with tls_broker(tmp_path / "data", pki) as broker:
        topic = _topic()
        with urllib.request.urlopen(
            f"{broker.web_service_url}/lookup/v2/topic/{topic.replace('://', '/')}", timeout=10
        ) as resp:
            answer = json.loads(resp.read())
        assert answer["brokerUrl"] == broker.service_url
        assert answer["brokerUrlTls"] == broker.service_url_tls
        assert answer["httpUrl"] == broker.web_service_url
        assert answer["httpUrlTls"] == broker.web_service_url_tls
        with RawConnection(broker.broker_port_tls, client_context(pki.ca_cert)) as raw:
            raw.handshake()
            response = raw.lookup(topic)
            assert response.brokerServiceUrl == broker.service_url
            assert response.brokerServiceUrlTls == broker.service_url_tls


def test_advertised_listener_with_a_tls_url(tmp_path: Path, pki: Pki) -> None:
    listeners = "internal:pulsar://10.0.0.1:6650,internal:pulsar+ssl://10.0.0.1:6651"
    with tls_broker(tmp_path / "data", pki, advertisedListeners=listeners) as broker:
        raw = RawConnection(broker.broker_port_tls, client_context(pki.ca_cert))
        with raw:
            raw.handshake()
            response = raw.lookup(_topic(), listener="internal")
            assert response.brokerServiceUrl == "pulsar://10.0.0.1:6650"
            assert response.brokerServiceUrlTls == "pulsar+ssl://10.0.0.1:6651"


def test_startup_log_shows_the_tls_urls(
    tmp_path: Path, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    with (
        caplog.at_level(logging.INFO, logger="starquake.broker.server"),
        tls_broker(tmp_path / "data", pki) as broker,
    ):
        ready = [r.getMessage() for r in caplog.records if "ready on" in r.getMessage()]
        assert ready and broker.service_url_tls in ready[0]
        assert broker.web_service_url_tls in ready[0]


# --- client certificates -------------------------------------------------------------------


def test_required_client_certificate(tmp_path: Path, pki: Pki) -> None:
    settings = {
        "tlsTrustCertsFilePath": str(pki.ca_cert),
        "tlsRequireTrustedClientCertOnConnect": True,
    }
    with tls_broker(tmp_path / "data", pki, **settings) as broker:
        url = broker.service_url_tls
        _refused(_official(url, pki.ca_cert, timeout=3))
        _refused(_official(url, pki.ca_cert, pki.untrusted_client("mallory"), timeout=3))
        _produces(_official(url, pki.ca_cert, pki.client("alice")))
        # our client too
        cert, key = pki.client("bob")
        ours = SqClient(
            url,
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_certificate_file_path=str(cert),
            tls_private_key_file_path=str(key),
            operation_timeout_seconds=10,
        )
        _produces(ours)
        bare = SqClient(
            url, tls_trust_certs_file_path=str(pki.ca_cert), operation_timeout_seconds=3
        )
        try:
            # TLS 1.3: the broker drops the connection after the handshake, as a reset
            with pytest.raises((ConnectError, Timeout)):
                bare.create_producer(_topic())
        finally:
            bare.close()
        # the broker sees the verified common name of a connected client
        with RawConnection(
            broker.broker_port_tls, client_context(pki.ca_cert, pki.client("carol"))
        ) as raw:
            assert raw.handshake().type == T.CONNECTED
            assert "carol" in broker.call(_peer_names(broker))


def test_optional_client_certificate_when_a_trust_file_is_set(tmp_path: Path, pki: Pki) -> None:
    with tls_broker(tmp_path / "data", pki, tlsTrustCertsFilePath=str(pki.ca_cert)) as broker:
        port = broker.broker_port_tls
        with RawConnection(port, client_context(pki.ca_cert)) as raw:
            assert raw.handshake().type == T.CONNECTED
            assert broker.call(_peer_names(broker)) == [None]
        with RawConnection(port, client_context(pki.ca_cert, pki.client("dave"))) as raw:
            assert raw.handshake().type == T.CONNECTED
            assert "dave" in broker.call(_peer_names(broker))
        untrusted = client_context(pki.ca_cert, pki.untrusted_client("eve"))
        with pytest.raises(REFUSED):
            # refused in the handshake, or (TLS 1.3) on the first read after it
            _connect(port, untrusted)


def test_insecure_mode_lets_untrusted_certificates_in_without_a_role(
    tmp_path: Path, pki: Pki
) -> None:
    settings = {"tlsTrustCertsFilePath": str(pki.ca_cert), "tlsAllowInsecureConnection": True}
    with tls_broker(tmp_path / "data", pki, **settings) as broker:
        untrusted = client_context(pki.ca_cert, pki.untrusted_client("eve"))
        with RawConnection(broker.broker_port_tls, untrusted) as raw:
            assert raw.handshake().type == T.CONNECTED
            # the certificate no trusted CA signed gives no name to take a role from
            assert broker.call(_peer_names(broker)) == [None]
        _produces(_official(broker.service_url_tls, pki.ca_cert, pki.untrusted_client("eve")))


# --- protocols and ciphers -----------------------------------------------------------------


def test_tls13_only_refuses_a_tls12_client(tmp_path: Path, pki: Pki) -> None:
    with tls_broker(tmp_path / "data", pki, tlsProtocols="TLSv1.3") as broker:
        port = broker.broker_port_tls
        old = client_context(pki.ca_cert, maximum=ssl.TLSVersion.TLSv1_2)
        with pytest.raises(ssl.SSLError):
            RawConnection(port, old)
        with RawConnection(port, client_context(pki.ca_cert)) as raw:
            assert raw.sock.version() == "TLSv1.3"
            assert raw.handshake().type == T.CONNECTED
        _produces(_official(broker.service_url_tls, pki.ca_cert))


def test_tls12_only_refuses_a_tls13_client(tmp_path: Path, pki: Pki) -> None:
    with tls_broker(tmp_path / "data", pki, tlsProtocols="TLSv1.2") as broker:
        port = broker.broker_port_tls
        new = client_context(pki.ca_cert, minimum=ssl.TLSVersion.TLSv1_3)
        with pytest.raises(ssl.SSLError):
            RawConnection(port, new)
        with RawConnection(port, client_context(pki.ca_cert)) as raw:
            assert raw.sock.version() == "TLSv1.2"


def test_ciphers_in_iana_spelling(tmp_path: Path, pki: Pki) -> None:
    chosen = "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"
    settings = {"tlsProtocols": "TLSv1.2", "tlsCiphers": chosen}
    with tls_broker(tmp_path / "data", pki, **settings) as broker:
        port = broker.broker_port_tls
        with RawConnection(port, client_context(pki.ca_cert)) as raw:
            cipher = raw.sock.cipher()
            assert cipher is not None and cipher[0] == "ECDHE-ECDSA-AES256-GCM-SHA384"
        other = client_context(pki.ca_cert)
        other.set_ciphers("ECDHE-ECDSA-AES128-GCM-SHA256")
        with pytest.raises(ssl.SSLError):
            RawConnection(port, other)


@pytest.mark.parametrize(
    ("iana", "openssl"),
    [
        ("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
        ("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256", "ECDHE-ECDSA-CHACHA20-POLY1305"),
        ("TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA", "ECDHE-RSA-AES256-SHA"),
        ("TLS_RSA_WITH_AES_128_GCM_SHA256", "AES128-GCM-SHA256"),
        ("TLS_DHE_RSA_WITH_AES_128_CCM_8", "DHE-RSA-AES128-CCM8"),
        ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-AES128-GCM-SHA256"),
        ("TLS_AES_128_GCM_SHA256", None),
    ],
)
def test_cipher_names(iana: str, openssl: str | None) -> None:
    assert openssl_cipher_name(iana) == openssl


# --- start-up errors -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tlsCertificateFilePath": ""}, "tlsCertificateFilePath must be set"),
        ({"tlsKeyFilePath": ""}, "tlsKeyFilePath must be set"),
        ({"tlsCertificateFilePath": "/nonexistent/broker.pem"}, "/nonexistent/broker.pem"),
        ({"tlsTrustCertsFilePath": "/nonexistent/ca.pem"}, "tlsTrustCertsFilePath"),
        ({"tlsRequireTrustedClientCertOnConnect": True}, "needs tlsTrustCertsFilePath"),
        ({"tlsProtocols": "TLSv1.3,SSLv3"}, "tlsProtocols: unknown TLS version 'SSLv3'"),
        ({"tlsCiphers": "NO-SUCH-CIPHER"}, "tlsCiphers: unknown or unavailable"),
        ({"brokerServicePort": -1, "brokerServicePortTls": -1}, "no binary protocol port"),
    ],
)
def test_bad_tls_settings_stop_the_start(
    tmp_path: Path, pki: Pki, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(BrokerStartError, match=message.replace(".", r"\.")):
        tls_broker(tmp_path / "data", pki, **overrides).start()


def test_key_that_does_not_match_the_certificate(tmp_path: Path, pki: Pki) -> None:
    _cert, other_key = pki.client("someone")
    broker = tls_broker(tmp_path / "data", pki, tlsKeyFilePath=str(other_key))
    with pytest.raises(BrokerStartError, match="tlsCertificateFilePath/tlsKeyFilePath"):
        broker.start()


def test_web_tls_port_alone(tmp_path: Path, pki: Pki) -> None:
    """An HTTPS web port with only a plaintext binary port."""
    with tls_broker(tmp_path / "data", pki, brokerServicePortTls=-1) as broker:
        assert broker.service_url_tls == ""
        assert broker.broker_port_tls == -1
        tenants = _https_json(f"{broker.web_service_url_tls}/admin/v2/tenants", pki.ca_cert)
        assert "public" in tenants
