"""Opening the broker's storage in its data directory: the directory lock, the metadata store,
the stored resources and the managed-ledger factory."""

from __future__ import annotations

from pathlib import Path

from starquake.broker.config import BrokerConfig
from starquake.broker.config_sync import CONFIGURATION_PREFIXES
from starquake.broker.data_dir import prepare_data_dir
from starquake.broker.ledger_storage import FileLedgerStorage, LedgerStorage
from starquake.broker.resource_keys import TOPIC_STATE_PREFIXES
from starquake.broker.resources import PulsarResources
from starquake.storage import (
    DataDirectoryLock,
    ManagedLedgerConfig,
    ManagedLedgerFactory,
    MetadataStore,
    SqliteMetadataStore,
    StorageFaults,
    make_dirs,
)
from starquake.storage.routed_metadata import RoutedMetadataStore


def storage_config(config: BrokerConfig) -> ManagedLedgerConfig:
    """The managed-ledger settings that the broker configuration asks for."""
    return ManagedLedgerConfig(
        max_entries_per_ledger=config.managedLedgerMaxEntriesPerLedger,
        max_size_per_ledger_bytes=config.managedLedgerMaxSizePerLedgerMbytes * 1024 * 1024,
        min_rollover_seconds=config.managedLedgerMinLedgerRolloverTimeMinutes * 60,
        max_rollover_seconds=config.managedLedgerMaxLedgerRolloverTimeMinutes * 60,
        cache_max_bytes=config.managedLedgerCacheSizeMB * 1024 * 1024,
        cache_eviction_watermark=config.managedLedgerCacheEvictionWatermark,
        journal_sync=config.journalSyncData,
        preallocate_max_bytes=config.starquakeLedgerPreallocationMB * 1024 * 1024,
        commit_max_bytes=config.journalBufferedWritesThreshold,
    )


def open_storage(
    config: BrokerConfig,
    faults: StorageFaults | None,
    configuration_store: MetadataStore | None = None,
    ledger_storage: LedgerStorage | None = None,
) -> tuple[DataDirectoryLock, MetadataStore, PulsarResources, LedgerStorage]:
    """Lock ``dataDir`` and open what is stored there; on failure, what was opened is closed
    (and the lock released) before the error propagates. ``faults``: tests only.
    ``configuration_store``: the store shared by brokers for the configuration metadata
    (closed with the rest); the per-topic state of ``TOPIC_STATE_PREFIXES`` goes there too
    when ``ledger_storage`` (the managed ledgers, when not in ``dataDir``) is given, so that
    any broker can load any topic."""
    data = Path(config.dataDir)
    prepare_data_dir(data, config.data_dir_mode)
    lock = DataDirectoryLock(data)
    metadata: MetadataStore
    try:
        make_dirs(data / "ledgers")
        metadata = SqliteMetadataStore(data / "metadata.db", faults)
    except BaseException:
        lock.release()
        raise
    if configuration_store is not None:
        shared = CONFIGURATION_PREFIXES
        if ledger_storage is not None:
            shared = (*shared, *TOPIC_STATE_PREFIXES)
        metadata = RoutedMetadataStore(metadata, configuration_store, shared)
    try:
        # a damaged stored value (tenant, namespace, partitioned topic, policies, ledger
        # ids) stops the start naming its key rather than being acted on
        resources = PulsarResources(metadata, config.clusterName)
        if ledger_storage is None:
            factory = ManagedLedgerFactory(
                data / "ledgers", metadata, storage_config(config), faults=faults
            )
            ledger_storage = FileLedgerStorage(factory, metadata)
    except BaseException:
        metadata.close()
        lock.release()
        raise
    return lock, metadata, resources, ledger_storage
