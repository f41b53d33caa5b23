"""Cluster mode's ledger storage: the broker's managed ledgers in JetStream.

With ``metadataStoreUrl`` set, the broker's topics keep their entries and cursors in the
JetStream nodes it names (:class:`~starquake.cluster.js_factory.JetStreamLedgerFactory`), so
that whichever broker owns a topic's bundle can load it. Pulsar's BookKeeper settings map onto
JetStream's replicated streams:

- ``managedLedgerDefaultWriteQuorum``: the copies of each entry, the streams' replica count
  (1, 3 or 5);
- ``managedLedgerDefaultAckQuorum``: JetStream acknowledges a record once a majority of its
  replicas hold it, so the ack quorum may be at most that majority (it is then met or
  exceeded);
- ``managedLedgerDefaultEnsembleSize``: at least the write quorum (Pulsar's rule); JetStream
  places every replica of a stream on its own node.
"""

from __future__ import annotations

from pathlib import Path

from starquake.broker.config import BrokerConfig, ConfigError
from starquake.broker.storage_setup import storage_config
from starquake.cluster.js_factory import JetStreamLedgerFactory

__all__ = ["ledger_replicas", "open_cluster_ledgers"]

_RECORD_BYTES = 1024 * 1024
_RECORD_OVERHEAD = 1024
"""Room for a record's framing beside its largest entry."""


def ledger_replicas(config: BrokerConfig) -> int:
    """The replica count of the ledger streams the quorum settings ask for (ConfigError
    naming the keys when JetStream cannot honour them)."""
    ensemble = config.managedLedgerDefaultEnsembleSize
    write = config.managedLedgerDefaultWriteQuorum
    ack = config.managedLedgerDefaultAckQuorum
    if write not in (1, 3, 5):
        raise ConfigError(
            f"managedLedgerDefaultWriteQuorum: {write}: JetStream keeps 1, 3 or 5 copies"
        )
    if ensemble < write:
        raise ConfigError(
            f"managedLedgerDefaultEnsembleSize ({ensemble}) must be at least "
            f"managedLedgerDefaultWriteQuorum ({write})"
        )
    majority = write // 2 + 1
    if ack > majority:
        raise ConfigError(
            f"managedLedgerDefaultAckQuorum ({ack}) is more than a majority of "
            f"managedLedgerDefaultWriteQuorum ({write}): JetStream acknowledges an entry "
            f"once {majority} copies hold it"
        )
    return write


async def open_cluster_ledgers(config: BrokerConfig) -> JetStreamLedgerFactory | None:
    """The managed ledgers in the JetStream nodes of ``metadataStoreUrl`` (None when it is
    empty: standalone). ConfigError for quorum settings JetStream cannot honour; StorageError
    when the nodes do not answer within ``metadataStoreOperationTimeoutSeconds``."""
    servers = config.metadata_store_servers
    if not servers:
        return None
    return await JetStreamLedgerFactory.connect(
        servers,
        Path(config.dataDir) / "ledgers",
        streams=config.starquakeLedgerStreams,
        replicas=ledger_replicas(config),
        give_up_after=config.metadataStoreOperationTimeoutSeconds,
        config=storage_config(config),
        max_record_bytes=max(_RECORD_BYTES, config.maxMessageSize + _RECORD_OVERHEAD),
        cursor_flush_seconds=0,  # the broker stores cursors every flush interval
    )
