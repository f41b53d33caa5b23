"""Broker configuration: Pulsar's ``broker.conf`` key names, types and defaults.

Values come, lowest precedence first, from the defaults below, a ``broker.conf``-style file
(``key=value`` lines, ``#`` comments), environment variables ``STARQUAKE_<key>``, and explicit
overrides (``-D key=value`` on the command line, or keyword arguments in the in-process API).
Unknown keys from a file are kept in :attr:`BrokerConfig.extra` (Pulsar's files carry hundreds of
keys we do not use); unknown keys given explicitly are an error, as a typo there is likely.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starquake.broker import pulsar_settings
from starquake.broker.config_env import ENV_PREFIX as ENV_PREFIX
from starquake.broker.config_env import environment_settings
from starquake.broker.config_ranges import (
    CHOICES,
    MAX_PARTITIONS,
    OPTIONAL_PORTS,
    RANGES,
    nats_servers,
)
from starquake.broker.config_text import ConfigError as ConfigError
from starquake.broker.config_text import parse_conf_file
from starquake.broker.config_text import parse_overrides as parse_overrides
from starquake.common.redact import redact_url

log = logging.getLogger(__name__)


@dataclass
class BrokerConfig:
    """Every setting the broker reads, named as in Pulsar's broker.conf."""

    # Where and how to listen.
    dataDir: str = "./data"
    dataDirPermissions: str = "700"
    """Octal mode of the data directory (a Starquake setting): one the broker creates gets it,
    an existing one loses the bits beyond it, and the standalone broker creates files inside
    with no more (default: owner only)."""
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
    configurationMetadataStoreUrl: str = ""
    """Where the configuration metadata (clusters, tenants, namespaces and their policies,
    partitioned topics, topic policies, schemas) is kept: ``nats://host:port[,...]``, in the
    JetStream key-value bucket ``sq_metadata`` that brokers sharing it all see; empty, where
    ``metadataStoreUrl`` says (as Pulsar), else in the broker's own store (``dataDir``)."""
    metadataStoreUrl: str = ""
    """``nats://host:port[,...]``: cluster mode. The broker joins the cluster whose broker
    registry and bundle ownership these JetStream nodes keep, and its topics' entries, cursors
    and state are stored there, so that any broker can serve any topic (empty: standalone,
    everything in ``dataDir``)."""
    managedLedgerDefaultEnsembleSize: int = 1
    """Cluster mode: storage nodes a ledger is spread over; JetStream keeps every copy of a
    stream on its own node, so this only has to be at least the write quorum."""
    managedLedgerDefaultWriteQuorum: int = 1
    """Cluster mode: copies JetStream keeps of each entry (1, 3 or 5: its streams' replicas)."""
    managedLedgerDefaultAckQuorum: int = 1
    """Cluster mode: copies that must hold an entry before its send receipt; JetStream answers
    at a majority of the write quorum, so at most that."""
    starquakeLedgerStreams: int = 4
    """Cluster mode: JetStream streams the ledgers are spread over (each a Raft group); the
    same on every broker of a cluster."""
    starquakeOwnershipLeaseSeconds: float = 20.0
    """Seconds a bundle stays with a broker that stopped renewing (renewed every third)."""
    metadataStoreOperationTimeoutSeconds: int = 30
    """Seconds a configuration store write (and the connection at start) may take."""

    # Protocol and connections.
    maxMessageSize: int = 5 * 1024 * 1024
    keepAliveIntervalSeconds: int = 30
    """Seconds between keep-alive checks of a binary connection: a connection that has not
    completed its CONNECT handshake by the first check is closed, as is one that did not
    answer the previous check's PING."""
    maxPendingSendBytesPerConnection: int = 64 * 1024 * 1024
    brokerMaxConnections: int = 0
    """Binary connections open at once; a connection beyond is closed at once (0: no limit)."""

    # The web port's connections.
    maxHttpServerConnections: int = 2048
    """Web connections open at once; beyond, new ones wait in the accept queue (0: no limit)."""
    httpServerAcceptQueueSize: int = 8192
    """Backlog of the web ports' listening sockets (the kernel caps it at ``somaxconn``)."""
    httpServerIdleTimeoutSeconds: float = 30.0
    """A web connection must deliver a complete request head within this many seconds of
    opening or of its previous response, or it is closed (a Starquake setting: the idle
    timeout of Pulsar's web server is 30 s)."""
    httpServerRequestBodyTimeoutSeconds: float = 30.0
    """A request body must arrive in full within this many seconds of its head, or the
    request is answered 408 and the connection closed (a Starquake setting)."""

    # Topics and subscriptions.
    defaultNumberOfNamespaceBundles: int = 4
    """Bundles (topic-name hash ranges) of a namespace; in a cluster one broker serves each."""
    allowAutoTopicCreation: bool = True
    allowAutoTopicCreationType: str = "non-partitioned"
    defaultNumPartitions: int = 1
    """Partitions of a topic auto-created as partitioned (at most the limit just below)."""
    maxNumPartitionsPerPartitionedTopic: int = 0
    """Most partitions a partitioned topic may have (creating, growing or auto-creating past it
    is refused with 406). 0, as in Pulsar: no limit of its own (still :data:`MAX_PARTITIONS`)."""
    allowAutoSubscriptionCreation: bool = True
    dispatcherMaxReadBatchSize: int = 100
    dispatcherMaxReadSizeBytes: int = 5 * 1024 * 1024
    """Bytes of entries a dispatcher reads at most per round (beyond them by one entry at most:
    a read returns at least one entry)."""
    preciseDispatcherFlowControl: bool = False
    """How an Exclusive or Failover dispatcher counts a consumer's permits when it reads, as in
    Pulsar. False (Pulsar's default): a permit stands for an entry: it reads as many entries as
    the consumer has permits (at most ``dispatcherMaxReadBatchSize`` and
    ``dispatcherMaxReadSizeBytes``) and sends them all, so a consumer of batched messages may be
    sent more messages than its receiver queue holds (the permits go below zero and the next
    read waits until FLOWs bring them above it). True: it reads only the entries the permits
    take at the messages per entry seen so far and stops at the first entry that uses the last
    permit. Shared and Key_Shared consumers are sent what their permits take either way."""
    activeConsumerFailoverDelayTimeMillis: int = 1000
    """Failover: after the active consumer changes (the first consumer too), the dispatcher
    waits this long before it rewinds to the first unacknowledged message and sends to the new
    active consumer, and tells the consumers which one is active only then, as Pulsar does: the
    consumer that was active has that time to acknowledge what it received, which the new one
    would otherwise get again. 0 or less: at once. Exclusive subscriptions never wait."""
    dispatcherReadFailureBackoffInitialTimeInMs: int = 15000
    """Wait after a failed dispatcher read, doubled per failure up to the max below."""
    dispatcherReadFailureBackoffMaxTimeInMs: int = 60000
    subscriptionKeySharedUseConsistentHashing: bool = True
    subscriptionKeySharedConsistentHashingReplicaPoints: int = 100
    brokerDeleteInactiveTopicsEnabled: bool = True  # see brokerDeleteInactiveTopicsMode
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
    transactionCoordinatorEnabled: bool = False
    """Transactions: the coordinators run, topics hold back uncommitted messages."""
    transactionBufferSnapshotMaxTransactionCount: int = 1000
    """Transactions ended on a topic after which its transaction buffer takes a snapshot."""
    transactionBufferSnapshotMinTimeInMillis: int = 5000
    """Or the time after the last snapshot after which the next end takes one."""
    brokerDeduplicationEntriesInterval: int = 1000
    """Entries between two snapshots of a topic's deduplication state (replayed at restart)."""
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
    authenticateMetricsEndpoint: bool = False
    """Whether ``/metrics`` needs credentials too (with ``authenticationEnabled``); by default
    it is served to anyone, as in Pulsar."""
    authenticationRefreshCheckSeconds: int = 60
    """How often connections are checked for expired credentials."""
    authenticationRefusalLingerSeconds: float = 2.0
    """A connection refused for its credentials gets its error at once and is closed this many
    seconds later, reading nothing meanwhile, so that a client retrying in a loop cannot open
    hundreds of connections a second (a Starquake setting; 0: close at once; beyond 4096 such
    connections, new refusals close at once)."""
    passwordCheckCpuPercent: int = 10
    """Most CPU the basic-auth password checks (bcrypt) take, in percent of one core, averaged
    over a few seconds; checks beyond wait their turn, or are refused at once when their
    user's or address's places are full (a Starquake setting)."""
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
    tokenAllowedClockSkewSeconds: int = 0
    """Seconds a token is still accepted after its ``exp`` (and before its ``nbf``), for
    clocks that differ between token issuer and broker."""
    basicAuthConf: str = ""
    """htpasswd file of basic authentication: a path, ``file:///path``, ``data:;base64,...`` or
    the file's content in base64. When empty, Pulsar's system property
    ``pulsar.auth.basic.conf`` is taken: ``-D pulsar.auth.basic.conf=...`` or
    ``-Dpulsar.auth.basic.conf=...`` in ``$PULSAR_EXTRA_OPTS``."""

    # Authorization.
    authorizationEnabled: bool = False
    superUserRoles: str = ""
    """Comma-separated roles allowed everything."""
    authorizationAllowWildcardsMatching: bool = False
    """Whether granted roles may end or start with ``*`` to match many roles."""
    brokerClientAuthenticationPlugin: str = ""
    """Authentication of the broker's own admin client (Pulsar's plugin class name). Pulsar's
    standalone creates ``public/default`` through that client at first start; with
    authorization on, Starquake creates it only when this is set (taken to be a super user's
    credentials, as deployments configure it) or ``anonymousUserRole`` is a super user."""
    brokerClientAuthenticationParameters: str = ""
    """The parameters of ``brokerClientAuthenticationPlugin`` (e.g. ``token:...``): the
    credentials a broker of a cluster presents to the others when it ends transactions on
    their topics (a super user's, with authorization on). Never logged."""
    brokerClientTlsEnabled: bool = False
    """Cluster mode: connect to the other brokers over TLS (their ``pulsar+ssl://`` URL)."""
    brokerClientTrustCertsFilePath: str = ""
    """CA certificates (PEM) the other brokers' certificates must chain to (empty: as in
    Pulsar, ``tlsCertificateFilePath``)."""
    brokerClientCertificateFilePath: str = ""
    """Client certificate (PEM) presented to the other brokers (with TLS), if any."""
    brokerClientKeyFilePath: str = ""
    """Private key (PEM) of ``brokerClientCertificateFilePath``."""

    # Managed ledger (storage).
    managedLedgerMaxEntriesPerLedger: int = 50000
    managedLedgerMaxSizePerLedgerMbytes: int = 2048
    managedLedgerMinLedgerRolloverTimeMinutes: float = 10.0
    managedLedgerMaxLedgerRolloverTimeMinutes: float = 240.0
    managedLedgerCacheSizeMB: int = 256
    """Recent entries kept in memory for the consumers at the tail (with their bookkeeping)."""
    managedLedgerCacheEvictionWatermark: float = 0.9
    """Over its size, the cache evicts its oldest entries down to this fraction of it."""
    managedLedgerCacheEvictionIntervalMs: int = 10
    """How often entries cached longer than the time threshold are evicted."""
    managedLedgerCacheEvictionTimeThresholdMillis: int = 1000
    """Entries cached longer than this are evicted."""
    managedLedgerCursorBackloggedThreshold: int = 1000
    """Cursors this many entries behind (at each stats update) get no new entries cached."""
    managedLedgerCursorPositionFlushSeconds: float = 1.0
    managedLedgerTrimIntervalSeconds: float = 60.0
    journalSyncData: bool = True
    journalBufferedWritesThreshold: int = 2 * 1024 * 1024
    """Bytes of appends one group commit (write + fsync) takes at most; the rest goes to
    the next commit. 0: a commit takes everything buffered."""
    starquakeLedgerPreallocationMB: int = 1
    """Largest step by which the file of a topic's current ledger is zero-filled ahead of its
    writes (steps as large as the file, from 64 KB): an fsync over written blocks flushes data
    only, not the file system's journal as at the end of a file. The commit that fills a step
    flushes its zeros too, so a larger step is a longer pause. 0: files grow write by write."""

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
            if strict and key not in SYSTEM_PROPERTIES and not pulsar_settings.pulsar_key(key):
                raise ConfigError(f"unknown configuration key {key!r}{did_you_mean(key)}")
            self.extra[key] = str(value)
            return
        default = getattr(BrokerConfig, key)
        if key in OPTIONAL_PORTS and str(value).strip() == "":
            value = -1  # Pulsar turns a port off by leaving its key empty
        setattr(self, key, _convert(key, value, type(default)))

    def update(self, values: Mapping[str, Any], *, strict: bool = True) -> None:
        """Set several keys at once (see :meth:`set`)."""
        for key, value in values.items():
            self.set(key, value, strict=strict)

    def validate(self) -> None:
        """Refuse values the broker cannot run with, naming the key (raises ConfigError)."""
        for key, (low, high) in RANGES.items():
            value = getattr(self, key)
            # nan compares false with everything, so it is refused on its own (as is inf)
            if not math.isfinite(value) or not low <= value <= high:
                raise ConfigError(
                    f"{key}: {value} is out of range "
                    f"(it must be from {_number(low)} to {_number(high)})"
                )
        for key, choices in CHOICES.items():
            if getattr(self, key) not in choices:
                raise ConfigError(
                    f"{key}: {getattr(self, key)!r} is not one of {', '.join(sorted(choices))}"
                )
        _ = self.data_dir_mode
        _ = self.configuration_store_servers
        _ = self.metadata_store_servers
        refused = pulsar_settings.refusal(self.extra)
        if refused is not None:
            raise ConfigError(refused)

    @property
    def data_dir_mode(self) -> int:
        """The mode of ``dataDirPermissions`` (octal, e.g. ``700`` or ``0750``); it must give
        the owner read, write and search (ConfigError otherwise)."""
        text = self.dataDirPermissions
        try:
            mode = int(text.strip(), 8)
        except ValueError:
            raise ConfigError(
                f"dataDirPermissions: {text!r} is not an octal mode such as 700 or 750"
            ) from None
        if mode & ~0o777 or mode & 0o700 != 0o700:
            raise ConfigError(
                f"dataDirPermissions: {text!r} must be at most 777 and give the owner rwx (7..)"
            )
        return mode

    @property
    def configuration_store_servers(self) -> list[str]:
        """The servers of ``configurationMetadataStoreUrl`` (``nats://host:port`` each; none
        when it is empty); ConfigError for another form."""
        return self._servers("configurationMetadataStoreUrl") or self.metadata_store_servers

    @property
    def metadata_store_servers(self) -> list[str]:
        """The servers of ``metadataStoreUrl``, as for the configuration store."""
        return self._servers("metadataStoreUrl")

    def _servers(self, key: str) -> list[str]:
        servers = nats_servers(getattr(self, key))
        if servers is None:
            value = redact_url(getattr(self, key))
            raise ConfigError(f"{key}: {value!r} is not nats://[credentials@]host:port[,...]")
        return servers

    @property
    def partition_limit(self) -> int:
        """The most partitions a partitioned topic may have here."""
        configured = self.maxNumPartitionsPerPartitionedTopic
        return min(configured, MAX_PARTITIONS) if configured > 0 else MAX_PARTITIONS

    @property
    def advertised_host(self) -> str:
        """The host clients are told to connect to (loopback for a wildcard bind)."""
        if self.advertisedAddress:
            return self.advertisedAddress
        if self.bindAddress in ("0.0.0.0", "::", ""):
            return "127.0.0.1"
        return self.bindAddress


def _number(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def close_key(name: str) -> str | None:
    """The configuration key ``name`` is most likely a misspelling of (None if none is close)."""
    keys = BrokerConfig.keys()
    by_case = {k.lower(): k for k in keys}
    if name.lower() in by_case:
        return by_case[name.lower()]
    found = difflib.get_close_matches(name, keys, n=1, cutoff=0.8)
    return found[0] if found else None


def did_you_mean(name: str) -> str:
    """``"; did you mean KEY?"`` for the key closest to ``name``, or ``""``."""
    key = close_key(name)
    return f"; did you mean {key}?" if key else ""


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
    for key, value in environment_settings(env, set(BrokerConfig.keys()), close_key).items():
        config.set(key, value)
    if overrides:
        config.update(overrides)
    if not config.basicAuthConf:
        config.basicAuthConf = _system_property(BASIC_AUTH_PROPERTY, config, env)
    config.validate()
    return config


BASIC_AUTH_PROPERTY = "pulsar.auth.basic.conf"
SYSTEM_PROPERTIES = frozenset({BASIC_AUTH_PROPERTY})
"""Java system properties Pulsar's broker reads, accepted as ``-D name=value`` too."""


def _system_property(name: str, config: BrokerConfig, env: Mapping[str, str]) -> str:
    """The Java system property ``name`` as Pulsar's broker would see it: ``-D name=value``
    given to us, else ``-Dname=value`` in ``$PULSAR_EXTRA_OPTS`` (the JVM options Pulsar's
    ``bin/pulsar`` passes on; the last one wins); "" if neither sets it."""
    if name in config.extra:
        return config.extra[name]
    opts = env.get("PULSAR_EXTRA_OPTS", "")
    try:
        words = shlex.split(opts)
    except ValueError:  # unbalanced quotes: the shell would not have run it either
        raise ConfigError(f"PULSAR_EXTRA_OPTS: cannot split {opts!r} into options") from None
    value = ""
    for word in words:
        if word.startswith(f"-D{name}="):
            value = word[len(name) + 3 :]
    return value
