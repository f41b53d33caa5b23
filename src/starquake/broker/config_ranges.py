"""The allowed values of the broker's configuration keys: the range of every numeric key and
the choices of the enumerated ones (checked when a configuration is loaded)."""

from __future__ import annotations

MAX_PARTITIONS = 10_000
"""The most partitions any partitioned topic can have, whatever the configuration says: each
partition is a topic, and listing or deleting a partitioned topic touches every one."""

_PORT = (-1, 65535)  # 0: any free port; -1: no port
OPTIONAL_PORTS = frozenset(
    {"brokerServicePort", "webServicePort", "brokerServicePortTls", "webServicePortTls"}
)
_INT = 2**31 - 1  # the largest value of a Java int, the type of most of Pulsar's keys
_LONG = 2**63 - 1
_YEAR_SECONDS = 365 * 24 * 3600
_YEAR_MINUTES = 365 * 24 * 60
_INTERVAL_SECONDS = (0.01, _YEAR_SECONDS)
"""A periodic task's interval: short enough to be useful, long enough not to spin."""
RANGES: dict[str, tuple[float, float]] = {
    "brokerServicePort": _PORT,
    "webServicePort": _PORT,
    "brokerServicePortTls": _PORT,
    "webServicePortTls": _PORT,
    "authenticationRefreshCheckSeconds": (1, _YEAR_SECONDS),
    "authenticationRefusalLingerSeconds": (0, 60),
    "passwordCheckCpuPercent": (1, 100),
    "maxMessageSize": (1, _INT),
    "keepAliveIntervalSeconds": (1, _YEAR_SECONDS),
    "metadataStoreOperationTimeoutSeconds": (1, 3600),
    "starquakeOwnershipLeaseSeconds": (1, 3600),
    "starquakeLedgerPreallocationMB": (0, 1024),
    "journalBufferedWritesThreshold": (0, _LONG),
    "managedLedgerDefaultEnsembleSize": (1, 5),
    "managedLedgerDefaultWriteQuorum": (1, 5),
    "managedLedgerDefaultAckQuorum": (1, 5),
    "starquakeLedgerStreams": (1, 64),
    "maxPendingSendBytesPerConnection": (0, _LONG),
    "defaultNumPartitions": (1, MAX_PARTITIONS),
    "defaultNumberOfNamespaceBundles": (1, 128),  # MAX_BUNDLES
    "maxNumPartitionsPerPartitionedTopic": (0, MAX_PARTITIONS),
    "dispatcherMaxReadBatchSize": (1, _INT),
    "dispatcherMaxReadSizeBytes": (1, _INT),
    "activeConsumerFailoverDelayTimeMillis": (-_INT - 1, 3_600_000),  # <= 0: no wait
    "dispatcherReadFailureBackoffInitialTimeInMs": (1, 3_600_000),
    "dispatcherReadFailureBackoffMaxTimeInMs": (1, 3_600_000),
    "subscriptionKeySharedConsistentHashingReplicaPoints": (1, _INT),
    "maxUnackedMessagesPerConsumer": (0, _INT),
    "maxUnackedMessagesPerSubscription": (0, _INT),
    "delayedDeliveryTickTimeMillis": (1, _YEAR_SECONDS * 1000),
    "brokerDeduplicationEntriesInterval": (1, _INT),
    "transactionBufferSnapshotMaxTransactionCount": (1, _INT),
    "transactionBufferSnapshotMinTimeInMillis": (0, _LONG),
    "nonPersistentMaxPendingBytesPerConnection": (0, _LONG),
    "statsUpdateFrequencyInSecs": (1, _YEAR_SECONDS),
    "ttlDurationDefaultInSeconds": (0, _INT),
    "messageExpiryCheckIntervalInMinutes": (0.001, _YEAR_MINUTES),
    "brokerDeleteInactiveTopicsFrequencySeconds": _INTERVAL_SECONDS,
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": (-1, _INT),
    "defaultRetentionTimeInMinutes": (-1, _INT),
    "defaultRetentionSizeInMB": (-1, _LONG),
    "backlogQuotaCheckIntervalInSeconds": _INTERVAL_SECONDS,
    "backlogQuotaDefaultLimitBytes": (-1, _LONG),
    "backlogQuotaDefaultLimitSecond": (-1, _INT),
    "brokerServiceCompactionThresholdInBytes": (0, _LONG),
    "brokerServiceCompactionMonitorIntervalInSeconds": _INTERVAL_SECONDS,
    "managedLedgerMaxEntriesPerLedger": (1, _INT),
    "managedLedgerMaxSizePerLedgerMbytes": (1, _INT),
    "managedLedgerMinLedgerRolloverTimeMinutes": (0, _YEAR_MINUTES),
    "managedLedgerMaxLedgerRolloverTimeMinutes": (0, _YEAR_MINUTES),
    "managedLedgerCacheSizeMB": (0, _INT),
    "managedLedgerCacheEvictionWatermark": (0.0, 1.0),
    "managedLedgerCacheEvictionIntervalMs": (1, 3_600_000),
    "managedLedgerCacheEvictionTimeThresholdMillis": (0, _LONG),
    "managedLedgerCursorBackloggedThreshold": (0, _LONG),
    "managedLedgerCursorPositionFlushSeconds": _INTERVAL_SECONDS,
    "managedLedgerTrimIntervalSeconds": _INTERVAL_SECONDS,
    "tokenAllowedClockSkewSeconds": (0, _YEAR_SECONDS),
    "brokerMaxConnections": (0, _INT),
    "maxHttpServerConnections": (0, _INT),
    "httpServerAcceptQueueSize": (1, _INT),
    "httpServerIdleTimeoutSeconds": (0.01, _YEAR_SECONDS),
    "httpServerRequestBodyTimeoutSeconds": (0.01, _YEAR_SECONDS),
}
"""Allowed range (inclusive) of every numeric key; every int and float key must be listed."""
CHOICES: dict[str, frozenset[str]] = {
    "allowAutoTopicCreationType": frozenset({"non-partitioned", "partitioned"}),
    "brokerDeleteInactiveTopicsMode": frozenset(
        {"delete_when_no_subscriptions", "delete_when_subscriptions_caught_up"}
    ),
    "backlogQuotaDefaultRetentionPolicy": frozenset(
        {"producer_request_hold", "producer_exception", "consumer_backlog_eviction"}
    ),
    "tokenPublicAlg": frozenset({"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}),
}


def nats_servers(value: str) -> list[str] | None:
    """The servers of a ``nats://[credentials@]host:port[,host:port...]`` setting (none when
    it is empty); None when it has another form. Credentials (``user:password`` or a token)
    before the first host are NATS's for every host."""
    url = value.strip()
    if not url:
        return []
    scheme, sep, hosts = url.partition("://")
    servers = [h.strip() for h in hosts.split(",") if h.strip()]
    if scheme != "nats" or not sep or not servers or any("/" in h for h in servers):
        return None
    credentials, at, _ = servers[0].rpartition("@")
    if at:
        servers = [s if "@" in s else f"{credentials}@{s}" for s in servers]
    return [f"nats://{host}" for host in servers]
