"""The error and the start position that option parsing and offset parsing share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from starquake.client.bulk import Position
from starquake.client.topics import InvalidTopicNameError, normalize_topic

__all__ = ["PulsarOptionError", "StartSpec", "canonical", "checked_topic", "short"]

# Spark hands a data source its option names lowercased; errors name them as documented.
_NAMES = [
    "service.url",
    "admin.url",
    "topic",
    "topics",
    "topicsPattern",
    "startingOffsets",
    "endingOffsets",
    "startingTime",
    "endingTime",
    "startingTimestamp",
    "endingTimestamp",
    "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "includeHeaders",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "maxBytesPerTrigger",
    "failOnDataLoss",
    "maxRecordsPerTrigger",
    "maxOffsetsPerTrigger",
    "minPartitions",
    "pollTimeoutMs",
    "predefinedSubscription",
    "schema.decode",
    "writeId",
    "exactlyOnce",
    "schema.type",
    "schema.name",
    "sinkSubscription",
    "operationTimeoutSeconds",
    "operationTimeoutMs",
    "connectionTimeoutMs",
    "keepAliveIntervalSeconds",
    "listenerName",
    "authPluginClassName",
    "authParams",
    "useTls",
    "tlsTrustCertsFilePath",
    "tlsAllowInsecureConnection",
    "tlsHostnameVerificationEnable",
    "tlsCertificateFilePath",
    "tlsKeyFilePath",
    "receiverQueueSize",
    "privateKeyPath",
    "publicKeyPath",
    "encryptionKeys",
    "defaultCryptoKeyReader",
    "cryptoFailureAction",
    "sendTimeoutMs",
    "maxPendingMessages",
    "batchingMaxMessages",
    "batchingMaxBytes",
    "batchingMaxPublishDelayMicros",
    "batchingEnabled",
    "chunkingEnabled",
    "compressionType",
]
_CANONICAL = {name.lower(): name for name in _NAMES}


def canonical(key: str) -> str:
    """``key`` (lowercased by Spark) as the documentation spells it: ``maxrecordspertrigger``
    is ``maxRecordsPerTrigger``, ``pulsar.client.usetls`` is ``pulsar.client.useTls``; an
    unknown name stays as it is."""
    lowered = key.lower()
    for prefix in ("pulsar.client.", "pulsar.reader.", "pulsar.producer."):
        if lowered.startswith(prefix):
            rest = lowered[len(prefix) :]
            return prefix + _CANONICAL.get(rest, rest)
    return _CANONICAL.get(lowered, key)


class PulsarOptionError(ValueError):
    """An option of the ``pulsar`` data source is unknown, malformed or conflicts with another."""

    __module__ = "starquake.spark"  # as users import it


@dataclass(frozen=True, slots=True)
class StartSpec:
    """Where reading starts: ``earliest``, ``latest``, a publish time, per-partition publish
    times, or per-partition positions.

    ``positions`` maps a partition's full name to a position, ``times`` a partition's (or a
    topic's) full name to a publish time; ``default`` applies to partitions they do not name
    (``earliest`` or ``latest``).
    """

    kind: str  # "earliest" | "latest" | "time" | "times" | "positions"
    time_ms: int = 0
    positions: Mapping[str, Position] = field(default_factory=dict)
    default: str = "earliest"
    # "times": publish time per partition (or per topic, for all its partitions)
    times: Mapping[str, int] = field(default_factory=dict)
    option: str = ""  # the option it comes from, for errors
    # a start time on a partition with no message published at or after it: "latest" starts
    # the partition at its end, "error" fails the query (startingOffsetsByTimestampStrategy)
    strategy: str = "latest"


def checked_topic(key: str, text: str) -> str:
    """The full name of the topic ``text`` given in option ``key``; PulsarOptionError if bad."""
    try:
        return normalize_topic(text.strip())
    except InvalidTopicNameError as exc:
        raise PulsarOptionError(f"option {key!r}: {exc}") from None


def short(exc: Exception) -> Exception:
    """``exc`` again without its traceback: Spark shows the user the traceback of an error in
    a data source before its message, and the frames inside this package only push the one
    line that matters further down (raise it ``from None``)."""
    return type(exc)(str(exc))
