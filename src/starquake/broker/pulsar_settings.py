"""Pulsar ``broker.conf`` security keys that Starquake has no setting for.

A key that changes who gets in is never silently ignored: the security keys of Pulsar's
``broker.conf`` that Starquake implements are :class:`~starquake.broker.config.BrokerConfig`
settings; the others are listed here.

- :data:`REFUSED`: keys Starquake cannot honour. Pulsar's default value (or an empty value) is
  accepted, since it asks for nothing Starquake does not do; any other value stops the broker
  at start with one line naming the key.
- :data:`NOT_USED`: keys that configure something Starquake's broker does not have (its own
  client connections to brokers, the JVM's TLS provider). Any value is accepted; the broker
  logs one line at start saying the key has no effect.

Both kinds are accepted as ``-D key=value`` too (not refused as unknown keys).
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["NOT_USED", "REFUSED", "not_used_notice", "pulsar_key", "refusal"]

_KEYSTORE = (
    "TLS from a Java KeyStore is not supported; use PEM files (tlsCertificateFilePath, "
    "tlsKeyFilePath, tlsTrustCertsFilePath)"
)
_SASL = "SASL (Kerberos) authentication is not supported"

REFUSED: dict[str, tuple[str, str]] = {
    # key: (Pulsar's default, why Starquake cannot honour another value)
    "authorizationProvider": (
        "org.apache.pulsar.broker.authorization.PulsarAuthorizationProvider",
        "only Pulsar's default authorization provider is built in",
    ),
    "proxyRoles": ("", "the broker does not take a proxy's original principal"),
    "authenticateOriginalAuthData": (
        "false",
        "the broker does not take a proxy's original principal or credentials",
    ),
    "athenzDomainNames": ("", "Athenz authentication is not supported"),
    "tokenSettingPrefix": ("", "token settings are read without a prefix"),
    "saslJaasClientAllowedIds": (".*pulsar.*", _SASL),
    "saslJaasServerSectionName": ("PulsarBroker", _SASL),
    "saslJaasServerRoleTokenSignerSecretPath": ("", _SASL),
    "tlsEnabledWithKeyStore": ("false", _KEYSTORE),
    "tlsKeyStoreType": ("JKS", _KEYSTORE),
    "tlsKeyStore": ("", _KEYSTORE),
    "tlsKeyStorePassword": ("", _KEYSTORE),
    "tlsTrustStoreType": ("JKS", _KEYSTORE),
    "tlsTrustStore": ("", _KEYSTORE),
    "tlsTrustStorePassword": ("", _KEYSTORE),
    "webServiceTlsProtocols": (
        "",
        "the web port has no TLS settings of its own; tlsProtocols applies to both ports",
    ),
    "webServiceTlsCiphers": (
        "",
        "the web port has no TLS settings of its own; tlsCiphers applies to both ports",
    ),
    "haProxyProtocolEnabled": ("false", "the PROXY protocol header is not read"),
    "webServiceTrustXForwardedFor": ("false", "X-Forwarded-For is not trusted"),
    "httpRequestsLimitEnabled": ("false", "HTTP request rate limiting is not built"),
    "brokerMaxConnectionsPerIp": ("0", "a limit on connections per address is not built"),
}
"""Keys whose non-default values stop the broker at start."""

_NO_CLIENT = "the broker's own client (in a cluster, to the other brokers) does not use it"
_JVM = "it chooses a Java TLS implementation"

NOT_USED: dict[str, tuple[str, str]] = {
    **{
        key: (default, _NO_CLIENT)
        for key, default in (
            ("brokerClientTlsEnabledWithKeyStore", "false"),
            ("brokerClientSslProvider", ""),
            ("brokerClientTlsKeyStoreType", "JKS"),
            ("brokerClientTlsKeyStore", ""),
            ("brokerClientTlsKeyStorePassword", ""),
            ("brokerClientTlsTrustStoreType", "JKS"),
            ("brokerClientTlsTrustStore", ""),
            ("brokerClientTlsTrustStorePassword", ""),
            ("brokerClientTlsCiphers", ""),
            ("brokerClientTlsProtocols", ""),
            ("tlsHostnameVerificationEnabled", "false"),
        )
    },
    # Pulsar still reads it (its own default broker.conf and the official clients' test
    # configuration set it) but serves TLS on the ports that are set, whatever it says
    "tlsEnabled": (
        "false",
        "it is deprecated in Pulsar: TLS is served on brokerServicePortTls and "
        "webServicePortTls when they are set",
    ),
    "tlsProvider": ("", _JVM),
    "webServiceTlsProvider": ("Conscrypt", _JVM),
    "tlsCertRefreshCheckDurationSec": (
        "300",
        "certificate files are read once, at start: restart the broker after replacing them",
    ),
    "httpRequestsMaxPerSecond": ("100.0", "HTTP request rate limiting is not built"),
}
"""Keys accepted with any value, without effect: (Pulsar's default, why); another value than
the default gets one line at start."""

_FALSE = frozenset({"false", "0", "no", "off"})


def _is_default(value: str, default: str) -> bool:
    given = value.strip()
    if not given or given == default:
        return True
    if default == "false":
        return given.lower() in _FALSE
    try:
        return float(given) == float(default)
    except ValueError:
        return False


def refusal(extra: Mapping[str, str]) -> str | None:
    """The line refusing the first key of ``extra`` set to what Starquake cannot honour, or
    None when every such key has its default."""
    for key, (default, why) in REFUSED.items():
        value = extra.get(key)
        if value is not None and not _is_default(value, default):
            shown = f" or {key}={default}" if default else ""
            return f"{key}={value} is not supported: {why} (remove the setting{shown})"
    return None


def not_used_notice(extra: Mapping[str, str]) -> list[str]:
    """One line per key of ``extra`` set to another value than Pulsar's default that has no
    effect here, saying why (without the value)."""
    return [
        f"{key} has no effect: {why}"  # no value: it may be a password or token
        for key, (default, why) in NOT_USED.items()
        if key in extra and not _is_default(extra[key], default)
    ]


def pulsar_key(key: str) -> bool:
    """Whether ``key`` is one of Pulsar's keys listed here (not a typo)."""
    return key in REFUSED or key in NOT_USED
