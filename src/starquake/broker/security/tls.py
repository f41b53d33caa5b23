"""TLS of the broker's ``pulsar+ssl://`` and ``https://`` ports, from Pulsar's ``tls*`` keys.

:func:`server_ssl_context` builds the one ``ssl.SSLContext`` both TLS ports share:

- ``tlsCertificateFilePath`` / ``tlsKeyFilePath``: the broker's certificate chain and private key
  (PEM; PKCS#8, PKCS#1 or SEC1 keys, unencrypted). Both are needed once a TLS port is on.
- ``tlsTrustCertsFilePath``: the CA certificates that client certificates are checked against.
  Without it the broker does not ask clients for certificates.
- ``tlsRequireTrustedClientCertOnConnect``: a client must present a certificate that a trusted
  CA signed, or the handshake fails (needs ``tlsTrustCertsFilePath``).
- Otherwise, with a trust file, a client certificate is optional: a client without one connects,
  a client with a certificate that a trusted CA signed connects with that certificate verified
  (TLS authentication takes its role from it), and a client with a certificate no trusted CA
  signed is refused in the handshake.
- ``tlsAllowInsecureConnection``: clients whose certificates no trusted CA signed still connect,
  as with Pulsar. Python's ``ssl`` module cannot accept an unverified client certificate and
  still read it, so in this mode (unless ``tlsRequireTrustedClientCertOnConnect`` is on, which
  wins) the broker does not ask clients for certificates at all: every client connects, and TLS
  authentication has no certificate to take a role from. A common name that no trusted CA
  vouched for is never taken as a role (Pulsar would take it).
- ``tlsProtocols``: the TLS versions to accept, e.g. ``TLSv1.3,TLSv1.2`` (from the lowest listed
  to the highest; empty: OpenSSL's defaults).
- ``tlsCiphers``: the cipher suites of TLS 1.2 and below, in OpenSSL (``ECDHE-RSA-AES128-GCM-
  SHA256``) or IANA (``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256``) spelling. TLS 1.3 suites
  (``TLS_AES_128_GCM_SHA256``, ...) are accepted but not narrowed: Python's ``ssl`` module
  always offers OpenSSL's TLS 1.3 suites.

Every problem (a missing, unreadable or malformed file; an unknown protocol or cipher) is a
:class:`ConfigError` naming the key.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starquake.broker.config import BrokerConfig, ConfigError

if TYPE_CHECKING:
    from aiohttp import web

log = logging.getLogger(__name__)

_VERSIONS: dict[str, ssl.TLSVersion] = {
    "tlsv1": ssl.TLSVersion.TLSv1,
    "tlsv1.0": ssl.TLSVersion.TLSv1,
    "tlsv1.1": ssl.TLSVersion.TLSv1_1,
    "tlsv1.2": ssl.TLSVersion.TLSv1_2,
    "tlsv1.3": ssl.TLSVersion.TLSv1_3,
}
_TLS13_SUITES = frozenset(
    {
        "TLS_AES_128_GCM_SHA256",
        "TLS_AES_256_GCM_SHA384",
        "TLS_CHACHA20_POLY1305_SHA256",
        "TLS_AES_128_CCM_SHA256",
        "TLS_AES_128_CCM_8_SHA256",
    }
)
# IANA key exchange / authentication -> OpenSSL prefix ("" for plain RSA key exchange)
_IANA_KX = {
    "ECDHE_ECDSA": "ECDHE-ECDSA-",
    "ECDHE_RSA": "ECDHE-RSA-",
    "DHE_RSA": "DHE-RSA-",
    "DHE_DSS": "DHE-DSS-",
    "RSA": "",
    "ECDHE_PSK": "ECDHE-PSK-",
    "DHE_PSK": "DHE-PSK-",
    "RSA_PSK": "RSA-PSK-",
    "PSK": "PSK-",
}


def tls_ports_on(config: BrokerConfig) -> bool:
    """Whether the TLS binary port or the HTTPS port is on."""
    return config.brokerServicePortTls >= 0 or config.webServicePortTls >= 0


def tls_versions(text: str) -> tuple[ssl.TLSVersion, ssl.TLSVersion] | None:
    """(lowest, highest) of the comma-separated ``tlsProtocols`` (None when empty)."""
    versions: list[ssl.TLSVersion] = []
    for item in text.split(","):
        name = item.strip()
        if not name:
            continue
        version = _VERSIONS.get(name.lower())
        if version is None:
            raise ConfigError(
                f"tlsProtocols: unknown TLS version {name!r} "
                "(expected TLSv1.3, TLSv1.2, TLSv1.1 or TLSv1)"
            )
        versions.append(version)
    if not versions:
        return None
    return min(versions), max(versions)


def openssl_cipher_name(name: str) -> str | None:
    """The OpenSSL name of a TLS 1.2 cipher suite given in IANA or OpenSSL spelling; None for
    a TLS 1.3 suite (which cannot be narrowed)."""
    if name in _TLS13_SUITES:
        return None
    if not name.startswith("TLS_") or "_WITH_" not in name:
        return name  # already OpenSSL's spelling (checked by the caller)
    kx, _, rest = name[len("TLS_") :].partition("_WITH_")
    prefix = _IANA_KX.get(kx)
    if prefix is None:
        return name  # unknown; the caller reports it
    parts = rest.split("_")
    # AES_128_GCM_SHA256, AES_256_CBC_SHA, CHACHA20_POLY1305_SHA256, AES_128_CCM_8, ...
    if parts[0] == "CHACHA20" and parts[1:2] == ["POLY1305"]:
        return f"{prefix}CHACHA20-POLY1305"
    if len(parts) < 3 or not parts[1].isdigit():
        return name
    algorithm, bits, mode, mac = parts[0], parts[1], parts[2], parts[3:]
    body = f"{algorithm}{bits}"
    if mode == "CCM":
        tail = "-CCM8" if mac == ["8"] else "-CCM"
        return f"{prefix}{body}{tail}"
    if mode == "GCM":
        return f"{prefix}{body}-GCM-{'-'.join(mac)}" if mac else f"{prefix}{body}-GCM"
    if mode == "CBC" and mac:
        return f"{prefix}{body}-{'-'.join(mac)}"
    return name


def openssl_ciphers(text: str) -> list[str]:
    """The OpenSSL names of the comma-separated ``tlsCiphers`` (TLS 1.3 suites left out)."""
    names: list[str] = []
    probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    for item in text.split(","):
        given = item.strip()
        if not given:
            continue
        name = openssl_cipher_name(given)
        if name is None:
            continue
        try:
            probe.set_ciphers(name)
        except ssl.SSLError:
            raise ConfigError(f"tlsCiphers: unknown or unavailable cipher {given!r}") from None
        names.append(name)
    return names


def _read(key: str, path: str) -> None:
    """Fail with a ConfigError naming ``key`` unless ``path`` is a readable file."""
    try:
        with Path(path).open("rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot read {path}: {exc.strerror or exc}") from None


def server_ssl_context(config: BrokerConfig) -> ssl.SSLContext:
    """The SSL context of the broker's TLS ports (reads files: call it off the event loop)."""
    if not config.tlsCertificateFilePath or not config.tlsKeyFilePath:
        missing = "tlsKeyFilePath" if config.tlsCertificateFilePath else "tlsCertificateFilePath"
        raise ConfigError(
            f"{missing} must be set when brokerServicePortTls or webServicePortTls is on"
        )
    _read("tlsCertificateFilePath", config.tlsCertificateFilePath)
    _read("tlsKeyFilePath", config.tlsKeyFilePath)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(config.tlsCertificateFilePath, config.tlsKeyFilePath)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"tlsCertificateFilePath/tlsKeyFilePath: {config.tlsCertificateFilePath} and "
            f"{config.tlsKeyFilePath} are not a PEM certificate and its unencrypted private key "
            f"({exc.reason or exc})"
        ) from None
    _client_verification(context, config)
    versions = tls_versions(config.tlsProtocols)
    if versions is not None:
        context.minimum_version, context.maximum_version = versions
    ciphers = openssl_ciphers(config.tlsCiphers)
    if ciphers:
        context.set_ciphers(":".join(ciphers))
    return context


def _client_verification(context: ssl.SSLContext, config: BrokerConfig) -> None:
    trust = config.tlsTrustCertsFilePath
    if not trust:
        if config.tlsRequireTrustedClientCertOnConnect:
            raise ConfigError(
                "tlsRequireTrustedClientCertOnConnect needs tlsTrustCertsFilePath "
                "(the CAs that sign client certificates)"
            )
        context.verify_mode = ssl.CERT_NONE
        return
    _read("tlsTrustCertsFilePath", trust)
    try:
        context.load_verify_locations(cafile=trust)
    except ssl.SSLError as exc:
        raise ConfigError(
            f"tlsTrustCertsFilePath: {trust} holds no PEM CA certificate ({exc.reason or exc})"
        ) from None
    if config.tlsRequireTrustedClientCertOnConnect:
        context.verify_mode = ssl.CERT_REQUIRED
    elif config.tlsAllowInsecureConnection:
        context.verify_mode = ssl.CERT_NONE
    else:
        context.verify_mode = ssl.CERT_OPTIONAL


async def load_server_ssl_context(config: BrokerConfig) -> ssl.SSLContext | None:
    """The TLS ports' context, built in a worker thread; None when no TLS port is on."""
    if not tls_ports_on(config):
        return None
    return await asyncio.to_thread(server_ssl_context, config)


def peer_common_name(transport: asyncio.BaseTransport | None) -> str | None:
    """The common name of the client certificate that a trusted CA signed, on a TLS
    connection; None on plaintext, without a certificate, or when certificates are not
    verified (``tlsAllowInsecureConnection``). The role of TLS authentication."""
    if transport is None:
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    if not isinstance(ssl_object, ssl.SSLObject | ssl.SSLSocket):
        return None
    # getpeercert() gives a dictionary only for a certificate the handshake verified
    cert = ssl_object.getpeercert()
    if not cert:
        return None
    return subject_common_name(cert.get("subject", ()))


def subject_common_name(subject: Any) -> str | None:
    """The common name Pulsar's TLS authentication takes from a certificate subject (the
    RDNs as ``getpeercert()`` gives them, in certificate order): Pulsar reads the subject's
    RFC 2253 form, which lists the RDNs last first, and takes its first non-empty CN, so with
    several CNs the role is the last one in the certificate."""
    for rdn in reversed(tuple(subject)):
        for attribute in rdn:
            if attribute[0] == "commonName" and attribute[1]:
                return str(attribute[1])
    return None


def request_common_name(request: web.BaseRequest) -> str | None:
    """:func:`peer_common_name` of the connection that carried a web request."""
    return peer_common_name(request.transport)
