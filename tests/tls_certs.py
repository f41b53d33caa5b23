"""Test certificates: a CA, a broker certificate and client certificates, made fresh per test.

``make_pki(directory)`` writes PEM files (P-256 keys) and returns their paths:

- ``ca_cert``: the trusted CA; ``broker_cert``/``broker_key``: signed by it, valid for
  ``localhost`` and ``127.0.0.1``.
- ``client(cn)``: a client certificate and key signed by the CA with common name ``cn`` (the
  role that TLS authentication gives).
- ``untrusted_ca_cert``: another CA, which signed nothing the broker serves; and
  ``untrusted_client(cn)``, a client certificate it signed.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class _Authority:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _name(cn: str) -> x509.Name:
    """``CN=cn``; a ``cn`` of ``a,b`` gives a subject of two RDNs, ``CN=a`` then ``CN=b``."""
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, part) for part in cn.split(",")])


def _new_ca(cn: str) -> _Authority:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(_name(cn))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _Authority(cert, key)


def _issue(
    ca: _Authority, cn: str, *, server: bool
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
            critical=False,
        )
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.DNSName("localhost"),
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                ]
            ),
            critical=False,
        )
    return builder.sign(ca.key, hashes.SHA256()), key


def _write_cert(path: Path, cert: x509.Certificate) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


class Pki:
    """PEM files of one test's certificates (see the module docstring)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self._ca = _new_ca("starquake-test-ca")
        self._untrusted = _new_ca("starquake-untrusted-ca")
        self.ca_cert = _write_cert(directory / "ca.cert.pem", self._ca.cert)
        self.untrusted_ca_cert = _write_cert(
            directory / "untrusted-ca.cert.pem", self._untrusted.cert
        )
        cert, key = _issue(self._ca, "localhost", server=True)
        self.broker_cert = _write_cert(directory / "broker.cert.pem", cert)
        self.broker_key = _write_key(directory / "broker.key-pk8.pem", key)

    def client(self, cn: str) -> tuple[Path, Path]:
        """(certificate, key) of a client certificate for ``cn`` signed by the trusted CA."""
        return self._client(self._ca, cn, "client")

    def untrusted_client(self, cn: str) -> tuple[Path, Path]:
        """(certificate, key) of a client certificate for ``cn`` signed by the untrusted CA."""
        return self._client(self._untrusted, cn, "untrusted")

    def _client(self, ca: _Authority, cn: str, prefix: str) -> tuple[Path, Path]:
        cert, key = _issue(ca, cn, server=False)
        return (
            _write_cert(self.directory / f"{prefix}-{cn}.cert.pem", cert),
            _write_key(self.directory / f"{prefix}-{cn}.key-pk8.pem", key),
        )


def make_pki(directory: Path) -> Pki:
    """Fresh certificates under ``directory``."""
    return Pki(directory)
