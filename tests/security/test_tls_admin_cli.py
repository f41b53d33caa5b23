"""HTTPS admin and the command line over TLS: ``PulsarAdmin`` with the trusted CA (refused with
an untrusted one), a client certificate for a broker that requires one, and ``starquake admin``
/ ``client`` / ``perf`` with ``--tls-trust-cert-path``, ``--tls-allow-insecure`` and
``--tls-enable-hostname-verification``; ``starquake standalone`` with TLS ports."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from broker_process import BrokerProcess, free_port
from tls_certs import Pki
from tls_setup import tls_broker

from starquake.admin.client import AdminConnectError, PulsarAdmin
from starquake.broker.embedded import EmbeddedBroker
from starquake.common.tls import TlsSettingsError


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[EmbeddedBroker]:
    data = tmp_path_factory.mktemp("tls") / "data"
    with tls_broker(data, pki, brokerServicePort=-1, webServicePort=-1) as running:
        yield running


def starquake(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starquake.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


# --- PulsarAdmin ---------------------------------------------------------------------------


def test_admin_over_https_with_the_trusted_ca(tls: EmbeddedBroker, pki: Pki) -> None:
    admin = PulsarAdmin(
        tls.web_service_url_tls, tls_trust_certs_file_path=str(pki.ca_cert), timeout=10
    )
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    admin.tenants.create(tenant)
    assert tenant in admin.tenants.list()
    strict = PulsarAdmin(
        tls.web_service_url_tls,
        tls_trust_certs_file_path=str(pki.ca_cert),
        tls_validate_hostname=True,
        timeout=10,
    )
    assert "public" in strict.tenants.list()


def test_admin_over_https_refuses_an_untrusted_ca(tls: EmbeddedBroker, pki: Pki) -> None:
    admin = PulsarAdmin(
        tls.web_service_url_tls, tls_trust_certs_file_path=str(pki.untrusted_ca_cert), timeout=10
    )
    with pytest.raises(AdminConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        admin.tenants.list()
    system_cas = PulsarAdmin(tls.web_service_url_tls, timeout=10)
    with pytest.raises(AdminConnectError):
        system_cas.tenants.list()
    insecure = PulsarAdmin(
        tls.web_service_url_tls,
        tls_trust_certs_file_path=str(pki.untrusted_ca_cert),
        tls_allow_insecure_connection=True,
        timeout=10,
    )
    assert "public" in insecure.tenants.list()


def test_admin_tls_file_errors(tls: EmbeddedBroker, tmp_path: Path) -> None:
    with pytest.raises(TlsSettingsError, match="tls_trust_certs_file_path"):
        PulsarAdmin(tls.web_service_url_tls, tls_trust_certs_file_path=str(tmp_path / "no.pem"))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(TlsSettingsError, match=r"garbage\.pem"):
        PulsarAdmin(tls.web_service_url_tls, tls_trust_certs_file_path=str(garbage))


def test_admin_host_name_validation(tmp_path: Path, pki: Pki) -> None:
    with tls_broker(tmp_path / "data", pki, bindAddress="127.0.0.2") as broker:
        url = broker.web_service_url_tls
        assert url.startswith("https://127.0.0.2:")
        strict = PulsarAdmin(
            url, tls_trust_certs_file_path=str(pki.ca_cert), tls_validate_hostname=True
        )
        with pytest.raises(AdminConnectError):
            strict.tenants.list()
        lenient = PulsarAdmin(url, tls_trust_certs_file_path=str(pki.ca_cert))
        assert "public" in lenient.tenants.list()


def test_admin_client_certificate(tmp_path: Path, pki: Pki) -> None:
    settings = {
        "tlsTrustCertsFilePath": str(pki.ca_cert),
        "tlsRequireTrustedClientCertOnConnect": True,
    }
    with tls_broker(tmp_path / "data", pki, **settings) as broker:
        url = broker.web_service_url_tls
        cert, key = pki.client("admin")
        with_cert = PulsarAdmin(
            url,
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_certificate_file_path=str(cert),
            tls_private_key_file_path=str(key),
        )
        assert "public" in with_cert.tenants.list()
        without = PulsarAdmin(url, tls_trust_certs_file_path=str(pki.ca_cert))
        with pytest.raises(AdminConnectError):
            without.tenants.list()
        bad_cert, bad_key = pki.untrusted_client("admin")
        untrusted = PulsarAdmin(
            url,
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_certificate_file_path=str(bad_cert),
            tls_private_key_file_path=str(bad_key),
        )
        with pytest.raises(AdminConnectError):
            untrusted.tenants.list()


# --- the command line ----------------------------------------------------------------------


def test_cli_admin_over_https(tls: EmbeddedBroker, pki: Pki) -> None:
    url = tls.web_service_url_tls
    ok = starquake(
        "admin", "--admin-url", url, "--tls-trust-cert-path", str(pki.ca_cert),
        "--tls-enable-hostname-verification", "tenants", "list",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert "public" in json.loads(ok.stdout)

    untrusted = starquake(
        "admin", "--admin-url", url, "--tls-trust-cert-path", str(pki.untrusted_ca_cert),
        "tenants", "list",
    )  # fmt: skip
    assert untrusted.returncode == 3
    assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr

    insecure = starquake("admin", "--admin-url", url, "--tls-allow-insecure", "tenants", "list")
    assert insecure.returncode == 0, insecure.stderr


def test_cli_client_and_perf_over_tls(tls: EmbeddedBroker, pki: Pki) -> None:
    url = tls.service_url_tls
    ca = str(pki.ca_cert)
    topic = f"cli-tls-{uuid.uuid4().hex[:8]}"
    produced = starquake(
        "client", "--url", url, "--tls-trust-cert-path", ca, "--output", "json",
        "produce", topic, "-m", "one", "-m", "two",
    )  # fmt: skip
    assert produced.returncode == 0, produced.stderr
    assert json.loads(produced.stdout)["produced"] == 2
    consumed = starquake(
        "client", "--url", url, "--tls-trust-cert-path", ca, "consume", topic,
        "-s", "sub", "-p", "Earliest", "-n", "2", "--output", "json", "--timeout", "30",
    )  # fmt: skip
    assert consumed.returncode == 0, consumed.stderr
    assert [json.loads(line)["payload"] for line in consumed.stdout.splitlines()] == [
        "one",
        "two",
    ]
    perf = starquake(
        "perf", "--url", url, "--tls-trust-cert-path", ca, "produce", topic,
        "-r", "0", "-m", "200", "-s", "16", "--json",
    )  # fmt: skip
    assert perf.returncode == 0, perf.stderr
    assert json.loads(perf.stdout)["messages"] == 200
    # pulsar-perf's place and name for the option: on the command, --trust-cert-file
    perf = starquake(
        "perf", "produce", "-u", url, "--trust-cert-file", ca, topic,
        "-r", "0", "-m", "10", "-i", "0", "--json",
    )  # fmt: skip
    assert perf.returncode == 0, perf.stderr
    # a flag given to the group holds for the command, which has the option too
    perf = starquake(
        "perf", "--url", url, "--tls-allow-insecure", "consume", topic,
        "-ss", "s", "-sp", "Earliest", "-m", "212", "-i", "0", "--json",
    )  # fmt: skip
    assert perf.returncode == 0, perf.stderr
    assert json.loads(perf.stdout)["messages"] == 212

    refused = starquake(
        "client", "--url", url, "--tls-trust-cert-path", str(pki.untrusted_ca_cert),
        "produce", topic, "-m", "x",
    )  # fmt: skip
    assert refused.returncode != 0
    assert "CERTIFICATE_VERIFY_FAILED" in refused.stderr


# --- starquake standalone (a process, on uvloop) ----------------------------------------------


def test_standalone_with_tls(tmp_path: Path, pki: Pki) -> None:
    tls_port, https_port = free_port(), free_port()
    proc = BrokerProcess(
        tmp_path / "data",
        f"brokerServicePortTls={tls_port}",
        f"webServicePortTls={https_port}",
        f"tlsCertificateFilePath={pki.broker_cert}",
        f"tlsKeyFilePath={pki.broker_key}",
        log_level="INFO",
    )
    proc.start()
    try:
        client = pulsar.Client(
            f"pulsar+ssl://localhost:{tls_port}",
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_validate_hostname=True,
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            producer = client.create_producer(f"tls-sa-{uuid.uuid4().hex[:8]}")
            producer.send(b"over uvloop")
        finally:
            client.close()
        admin = PulsarAdmin(
            f"https://localhost:{https_port}",
            tls_trust_certs_file_path=str(pki.ca_cert),
            tls_validate_hostname=True,
        )
        assert "public" in admin.tenants.list()
        proc.stop()
    finally:
        proc.cleanup()
    ready = [line for line in proc.log().splitlines() if "ready on" in line]
    assert ready and f"pulsar+ssl://127.0.0.1:{tls_port}" in ready[0]
    assert f"https://127.0.0.1:{https_port}" in ready[0]


def test_standalone_tls_without_a_certificate_is_a_clear_error(tmp_path: Path) -> None:
    result = starquake(
        "standalone", "--data-dir", str(tmp_path / "data"), "--bind-address", "127.0.0.1",
        "--broker-port", "0", "--web-port", "0", "-D", "brokerServicePortTls=0",
    )  # fmt: skip
    assert result.returncode == 1
    assert "tlsCertificateFilePath must be set" in result.stderr
