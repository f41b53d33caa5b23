"""Cluster mode's ledger storage: the broker's managed ledgers in JetStream.

With ``metadataStoreUrl`` set, the broker's topics keep their entries and cursors in the
JetStream nodes it names (:class:`~starquake.cluster.js_factory.JetStreamLedgerFactory`), so
that whichever broker owns a topic's bundle can load it. Pulsar's BookKeeper settings map onto
JetStream's replicated streams as :mod:`starquake.broker.quorum` says.
"""

from __future__ import annotations

from pathlib import Path

from starquake.broker.config import BrokerConfig, ConfigError
from starquake.broker.quorum import ledger_replicas
from starquake.broker.storage_setup import storage_config
from starquake.cluster.jetstream import storage_errors
from starquake.cluster.js_factory import JetStreamLedgerFactory
from starquake.storage import ABSENT, BadVersionError

__all__ = ["open_cluster_ledgers"]

# How long an append or fence waits for JetStream. A stream whose leader died does not answer
# until the survivors elect another (4-9 s): an append waiting out a long timeout kept its
# producers stalled seconds past the election, while one that gives up early is retried (the
# topic is loaded again, waiting for the store) within a moment of it. A slow answer that
# was in fact stored costs a reload; the fence then finds the record.
LEDGER_REQUEST_TIMEOUT = 3.0

_RECORD_BYTES = 1024 * 1024
_RECORD_OVERHEAD = 1024
"""Room for a record's framing beside its largest entry."""


async def open_cluster_ledgers(config: BrokerConfig) -> JetStreamLedgerFactory:
    """The managed ledgers in the JetStream nodes of ``metadataStoreUrl`` (cluster mode only).
    ConfigError for quorum settings JetStream cannot honour or a store of another cluster;
    StorageError when the nodes do not answer within ``metadataStoreOperationTimeoutSeconds``."""
    factory = await JetStreamLedgerFactory.connect(
        config.metadata_store_servers,
        Path(config.dataDir) / "ledgers",
        streams=config.starquakeLedgerStreams,
        replicas=ledger_replicas(config),
        request_timeout=LEDGER_REQUEST_TIMEOUT,
        give_up_after=config.metadataStoreOperationTimeoutSeconds,
        config=storage_config(config),
        max_record_bytes=max(_RECORD_BYTES, config.maxMessageSize + _RECORD_OVERHEAD),
        cursor_flush_seconds=0,  # the broker stores cursors every flush interval
    )
    try:
        await _claim_store(factory, config.clusterName)
    except BaseException:
        await factory.close()
        raise
    return factory


CLUSTER_NAME_KEY = "/starquake/cluster-name"


async def _claim_store(factory: JetStreamLedgerFactory, cluster: str) -> None:
    """Record ``cluster`` as the one cluster whose topics this store keeps, or check that it
    is the one recorded: the managed ledgers are named by topic alone, so the brokers of two
    clusters on one store would serve the same topics and fence each other's ledgers.
    ConfigError naming both when another cluster has it."""
    with storage_errors("recording the cluster's name"):
        try:
            await factory.metadata.put(CLUSTER_NAME_KEY, cluster.encode(), ABSENT)
            return
        except BadVersionError:
            stored = await factory.metadata.get(CLUSTER_NAME_KEY)
    if stored is not None and stored.decode() != cluster:
        raise ConfigError(
            f"clusterName {cluster}: this store keeps the topics of cluster "
            f"{stored.decode()} (give every broker of a cluster the same clusterName, and "
            "each cluster its own store)"
        )
