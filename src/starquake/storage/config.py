"""Tuning of the managed ledgers of a factory (defaults are Pulsar's)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ManagedLedgerConfig"]


@dataclass
class ManagedLedgerConfig:
    """Tuning of the managed ledgers (defaults are Pulsar's)."""

    max_entries_per_ledger: int = 50000
    """``managedLedgerMaxEntriesPerLedger``"""
    max_size_per_ledger_bytes: int = 2048 * 1024 * 1024
    """``managedLedgerMaxSizePerLedgerMbytes``"""
    min_rollover_seconds: float = 600.0
    """``managedLedgerMinLedgerRolloverTimeMinutes``"""
    max_rollover_seconds: float = 14400.0
    """``managedLedgerMaxLedgerRolloverTimeMinutes``"""
    cache_max_bytes: int = 256 * 1024 * 1024
    """Tail-read cache shared by all ledgers of a factory (recent entries; oldest evicted)."""
    cache_eviction_watermark: float = 0.9
    """``managedLedgerCacheEvictionWatermark``: over its size, the cache evicts down to this
    fraction of it."""
    ledger_id_reserve: int = 1000
    """Ledger ids reserved per metadata write."""
    max_open_write_files: int = 0
    """Current ledgers' files kept open for writing at most; the least recently written idle
    ones are closed over it and opened again by the commit of their next appends, which
    waits for a later commit when all are being written (0: half the process's open-file
    limit, so that topics beyond it do not run the broker out of descriptors)."""
    journal_sync: bool = True
    """``journalSyncData``: fsync appends before they are acknowledged. Off, a receipt only
    means the entry reached the operating system: it survives the broker's crash (kill -9) but
    not the machine's."""
    preallocate_max_bytes: int = 1024 * 1024
    """The largest step by which a current ledger's file is zero-filled ahead of its writes
    (steps as large as the file, from 64 KB), so that each fsync flushes data, not the file
    system's journal; 0: files grow with each write. Only with ``journal_sync``. The commit
    that fills a step also flushes its zeros: a larger step delays that commit longer (on
    ext4 here, 1 MB about 1 ms, 4 MB 7-8 ms)."""
    commit_max_bytes: int = 2 * 1024 * 1024
    """``journalBufferedWritesThreshold``: the bytes of appends one group commit takes at
    most (at least one entry); the rest waits for the next commit, written while this one is
    synced. Bounded commits keep receipts flowing back while the next bytes are written,
    instead of one long write and fsync of everything buffered. 0: no limit."""
