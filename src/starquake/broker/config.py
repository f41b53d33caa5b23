"""Broker configuration: Pulsar's ``broker.conf`` key names, types and defaults.

Values come, lowest precedence first, from the defaults below, a ``broker.conf``-style file
(``key=value`` lines, ``#`` comments), environment variables ``STARQUAKE_<key>``, and explicit
overrides (``-D key=value`` on the command line, or keyword arguments in the in-process API).
Unknown keys from a file are kept in :attr:`BrokerConfig.extra` (Pulsar's files carry hundreds of
keys we do not use); unknown keys given explicitly are an error, as a typo there is likely.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV_PREFIX = "STARQUAKE_"


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


@dataclass
class BrokerConfig:
    """Every setting the broker reads, named as in Pulsar's broker.conf."""

    # Where and how to listen.
    dataDir: str = "./data"
    bindAddress: str = "0.0.0.0"
    advertisedAddress: str = ""
    advertisedListeners: str = ""
    """Named listeners, ``name:pulsar://host:port,...``; a lookup may ask for one by name."""
    brokerServicePort: int = 6650
    """Plaintext binary protocol port (0: any free port; empty or -1: no plaintext port)."""
    webServicePort: int = 8080
    """Plaintext web port (0: any free port; empty or -1: no plaintext port)."""
    brokerServicePortTls: int = -1
    """TLS binary protocol port, ``pulsar+ssl://`` (0: any free port; empty or -1: off)."""
    webServicePortTls: int = -1
    """HTTPS web port (0: any free port; empty or -1: off)."""
    clusterName: str = "standalone"

    # Protocol and connections.
    maxMessageSize: int = 5 * 1024 * 1024
    keepAliveIntervalSeconds: int = 30
    maxPendingSendBytesPerConnection: int = 64 * 1024 * 1024

    # Topics and subscriptions.
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: str = "non-partitioned"
    defaultNumPartitions: int = 1
    allowAutoSubscriptionCreation: bool = True
    dispatcherMaxReadBatchSize: int = 100
    subscriptionKeySharedUseConsistentHashing: bool = True
    subscriptionKeySharedConsistentHashingReplicaPoints: int = 100
    brokerDeleteInactiveTopicsEnabled: bool = True
    """Delete topics that stay inactive (see ``brokerDeleteInactiveTopicsMode``)."""
    brokerDeleteInactiveTopicsFrequencySeconds: float = 60.0
    brokerDeleteInactiveTopicsMode: str = "delete_when_no_subscriptions"
    """``delete_when_no_subscriptions``: no producers, consumers or subscriptions;
    ``delete_when_subscriptions_caught_up``: no producers or consumers, and no backlog."""
    brokerDeleteInactiveTopicsMaxInactiveDurationSeconds: int = -1
    """How long a topic must stay inactive before it is deleted (-1: the check frequency)."""
    maxUnackedMessagesPerConsumer: int = 50000
    maxUnackedMessagesPerSubscription: int = 200000
    acknowledgmentAtBatchIndexLevelEnabled: bool = False
    delayedDeliveryEnabled: bool = True
    delayedDeliveryTickTimeMillis: int = 1000
    isDelayedDeliveryDeliverAtTimeStrict: bool = False
    brokerDeduplicationEnabled: bool = False
    brokerDeduplicationEntriesInterval: int = 1000
    """Entries persisted between two snapshots of a topic's deduplication state: a restart
    replays the entries after the last snapshot, so ledgers holding them are not trimmed."""
    nonPersistentMaxPendingBytesPerConnection: int = 8 * 1024 * 1024
    statsUpdateFrequencyInSecs: int = 60
    """Rates in the stats and metrics average over one to two of these intervals."""
    exposeTopicLevelMetricsInPrometheus: bool = True
    """``/metrics`` has topic and subscription series; false: namespace aggregates only."""
    ttlDurationDefaultInSeconds: int = 0
    """Message TTL of namespaces that set none (0: messages never expire)."""
    messageExpiryCheckIntervalInMinutes: float = 5.0
    topicLevelPoliciesEnabled: bool = True
    """Whether policies set on a topic override its namespace's."""

    # Retention and backlog quotas.
    defaultRetentionTimeInMinutes: int = 0
    """Retention of namespaces that set none (-1: forever, 0: acknowledged data goes)."""
    defaultRetentionSizeInMB: int = 0
    backlogQuotaCheckEnabled: bool = True
    backlogQuotaCheckIntervalInSeconds: float = 60.0
    backlogQuotaDefaultLimitBytes: int = -1
    """Backlog size quota of namespaces that set none (-1: no quota)."""
    backlogQuotaDefaultLimitSecond: int = -1
    """Backlog age quota of namespaces that set none (-1: no quota)."""
    backlogQuotaDefaultRetentionPolicy: str = "producer_request_hold"

    # Topic compaction.
    brokerServiceCompactionThresholdInBytes: int = 0
    """Compact a topic once its backlog since the last compaction passes this (0: never)."""
    brokerServiceCompactionMonitorIntervalInSeconds: float = 60.0
    topicCompactionRetainNullKey: bool = False
    """Whether the compacted view keeps messages that have no key."""

    # Schemas.
    schemaCompatibilityStrategy: str = "FULL"
    """Compatibility strategy of namespaces that set none (or set ``UNDEFINED``)."""
    isAllowAutoUpdateSchemaEnabled: bool = True
    """Whether a producer with a new, compatible schema registers it as a new version."""
    isSchemaValidationEnforced: bool = False
    """Whether producers without a schema are refused on topics that have one."""
    schemaDeletionPolicy: str = "delete"
    """What deleting a topic does to its schemas: ``delete`` every version (as Pulsar does) or
    ``keep`` them for a topic of the same name created later (a Starquake setting)."""

    # TLS.
    tlsCertificateFilePath: str = ""
    """The broker's certificate chain (PEM)."""
    tlsKeyFilePath: str = ""
    """The broker's private key (PEM)."""
    tlsTrustCertsFilePath: str = ""
    """CA certificates (PEM) that client certificates are checked against."""
    tlsAllowInsecureConnection: bool = False
    """Accept client certificates that the trusted CAs did not sign."""
    tlsRequireTrustedClientCertOnConnect: bool = False
    """Refuse TLS connections that present no trusted client certificate."""
    tlsProtocols: str = ""
    """Comma-separated TLS versions to accept, e.g. ``TLSv1.3,TLSv1.2`` (empty: the defaults)."""
    tlsCiphers: str = ""
    """Comma-separated cipher names (OpenSSL or IANA spelling; empty: the defaults)."""

    # Authentication.
    authenticationEnabled: bool = False
    authenticationProviders: str = ""
    """Comma-separated providers: Pulsar's class names
    (``org.apache.pulsar.broker.authentication.AuthenticationProviderToken``, ``...Basic``,
    ``...Tls``) or the method names ``token``, ``basic``, ``tls``."""
    authenticationRefreshCheckSeconds: int = 60
    """How often connections are checked for expired credentials."""
    anonymousUserRole: str = ""
    """Role given to clients that present no credentials (empty: they are refused)."""
    tokenSecretKey: str = ""
    """HS256 key of token authentication: ``data:;base64,...``, ``file:///path`` or a path."""
    tokenPublicKey: str = ""
    """Public key (RS256/ES256) of token authentication, in the same forms."""
    tokenPublicAlg: str = "RS256"
    tokenAuthClaim: str = "sub"
    """The token claim that names the role."""
    tokenAudienceClaim: str = ""
    tokenAudience: str = ""
    """When set, tokens must carry it in ``tokenAudienceClaim`` (default claim ``aud``)."""
    basicAuthConf: str = ""
    """htpasswd file of basic authentication (a path, ``file:///path`` or ``data:;base64,...``)."""

    # Authorization.
    authorizationEnabled: bool = False
    superUserRoles: str = ""
    """Comma-separated roles allowed everything."""
    authorizationAllowWildcardsMatching: bool = False
    """Whether granted roles may end or start with ``*`` to match many roles."""

    # Managed ledger (storage).
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerMaxSizePerLedgerMbytes: int = 2048
    managedLedgerMinLedgerRolloverTimeMinutes: float = 10.0
    managedLedgerMaxLedgerRolloverTimeMinutes: float = 240.0
    managedLedgerCacheSizeMB: int = 256
    managedLedgerCursorPositionFlushSeconds: float = 1.0
    managedLedgerTrimIntervalSeconds: float = 60.0
    journalSyncData: bool = True

    extra: dict[str, str] = field(default_factory=dict)

    @classmethod
    def keys(cls) -> list[str]:
        """Names of every known key."""
        return [f.name for f in dataclasses.fields(cls) if f.name != "extra"]

    def set(self, key: str, value: Any, *, strict: bool = True) -> None:
        """Set ``key`` from a string or a typed value, converting to the key's type."""
        fields = {f.name: f for f in dataclasses.fields(self) if f.name != "extra"}
        f = fields.get(key)
        if f is None:
            if strict:
                raise ConfigError(f"unknown configuration key {key!r}")
            self.extra[key] = str(value)
            return
        default = getattr(BrokerConfig, key)
        if key in _OPTIONAL_PORTS and str(value).strip() == "":
            value = -1  # Pulsar turns a port off by leaving its key empty
        setattr(self, key, _convert(key, value, type(default)))

    def update(self, values: Mapping[str, Any], *, strict: bool = True) -> None:
        """Set several keys at once (see :meth:`set`)."""
        for key, value in values.items():
            self.set(key, value, strict=strict)

    def validate(self) -> None:
        """Refuse values the broker cannot run with, naming the key (raises ConfigError)."""
        for key, (low, high) in _RANGES.items():
            value = getattr(self, key)
            if value < low or (high is not None and value > high):
                bound = f"from {low} to {high}" if high is not None else f"at least {low}"
                raise ConfigError(f"{key}: {value} is out of range (it must be {bound})")
        for key, choices in _CHOICES.items():
            if getattr(self, key) not in choices:
                raise ConfigError(
                    f"{key}: {getattr(self, key)!r} is not one of {', '.join(sorted(choices))}"
                )

    @property
    def advertised_host(self) -> str:
        """The host clients are told to connect to (loopback for a wildcard bind)."""
        if self.advertisedAddress:
            return self.advertisedAddress
        if self.bindAddress in ("0.0.0.0", "::", ""):
            return "127.0.0.1"
        return self.bindAddress


_PORT = (-1, 65535)  # 0: any free port; -1: no port
_OPTIONAL_PORTS = frozenset(
    {"brokerServicePort", "webServicePort", "brokerServicePortTls", "webServicePortTls"}
)
_RANGES: dict[str, tuple[float, float | None]] = {
    "brokerServicePort": _PORT,
    "webServicePort": _PORT,
    "brokerServicePortTls": _PORT,
    "webServicePortTls": _PORT,
    "authenticationRefreshCheckSeconds": (1, None),
    "maxMessageSize": (1, 2**31 - 1),
    "keepAliveIntervalSeconds": (1, None),
    "maxPendingSendBytesPerConnection": (0, None),
    "defaultNumPartitions": (1, None),
    "dispatcherMaxReadBatchSize": (1, None),
    "subscriptionKeySharedConsistentHashingReplicaPoints": (1, None),
    "maxUnackedMessagesPerConsumer": (0, None),
    "maxUnackedMessagesPerSubscription": (0, None),
    "delayedDeliveryTickTimeMillis": (1, None),
    "brokerDeduplicationEntriesInterval": (1, None),
    "nonPersistentMaxPendingBytesPerConnection": (0, None),
    "statsUpdateFrequencyInSecs": (1, None),
    "ttlDurationDefaultInSeconds": (0, None),
    "messageExpiryCheckIntervalInMinutes": (0.001, None),
    "brokerDeleteInactiveTopicsFrequencySeconds": (0.01, None),
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": (-1, None),
    "defaultRetentionTimeInMinutes": (-1, None),
    "defaultRetentionSizeInMB": (-1, None),
    "backlogQuotaCheckIntervalInSeconds": (0.01, None),
    "backlogQuotaDefaultLimitBytes": (-1, None),
    "backlogQuotaDefaultLimitSecond": (-1, None),
    "brokerServiceCompactionThresholdInBytes": (0, None),
    "brokerServiceCompactionMonitorIntervalInSeconds": (0.01, None),
    "managedLedgerMaxEntriesPerLedger": (1, None),
    "managedLedgerMaxSizePerLedgerMbytes": (1, None),
    "managedLedgerMinLedgerRolloverTimeMinutes": (0, None),
    "managedLedgerMaxLedgerRolloverTimeMinutes": (0, None),
    "managedLedgerCacheSizeMB": (0, None),
    "managedLedgerCursorPositionFlushSeconds": (0, None),
    "managedLedgerTrimIntervalSeconds": (0, None),
}
_CHOICES: dict[str, frozenset[str]] = {
    "allowAutoTopicCreationType": frozenset({"non-partitioned", "partitioned"}),
    "brokerDeleteInactiveTopicsMode": frozenset(
        {"delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"}
    ),
    "backlogQuotaDefaultRetentionPolicy": frozenset(
        {"producer_request_hold", "producer_exception", "consumer_backlog_eviction"}
    ),
    "tokenPublicAlg": frozenset({"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}),
}


def _convert(key: str, value: Any, kind: type) -> Any:
    if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
        return value
    text = str(value).strip()
    try:
        if kind is bool:
            lowered = text.lower()
            if lowered in ("true", "1", "yes", "on"):
                return True
            if lowered in ("false", "0", "no", "off"):
                return False
            raise ValueError(text)
        if kind is int:
            return int(text)
        if kind is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"{key}: {text!r} is not a valid {kind.__name__}") from None
    return text


def parse_conf_file(path: Path) -> dict[str, str]:
    """Read a ``broker.conf``: ``key=value`` lines; blank lines and ``#`` comments skipped."""
    values: dict[str, str] = {}
    for lineno, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ConfigError(f"{path}:{lineno}: expected key=value, got {raw!r}")
        key, value = line.split("=", 1)
        values[key.strip()] = value.strip()
    return values


def parse_overrides(items: list[str]) -> dict[str, str]:
    """Parse ``key=value`` strings from ``-D`` flags."""
    values: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"-D expects key=value, got {item!r}")
        key, value = item.split("=", 1)
        values[key.strip()] = value.strip()
    return values


def load_config(
    conf_file: Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> BrokerConfig:
    """Build a config from defaults, a file, ``STARQUAKE_<key>`` variables and overrides."""
    config = BrokerConfig()
    if conf_file is not None:
        config.update(parse_conf_file(conf_file), strict=False)
    env = os.environ if environ is None else environ
    known = set(BrokerConfig.keys())
    for name, value in env.items():
        if name.startswith(ENV_PREFIX) and name[len(ENV_PREFIX) :] in known:
            config.set(name[len(ENV_PREFIX) :], value)
    if overrides:
        config.update(overrides)
    config.validate()
    return config
