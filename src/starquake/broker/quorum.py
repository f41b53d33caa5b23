"""How many copies cluster mode keeps: Pulsar's BookKeeper settings map onto
JetStream's replicated streams:

- ``managedLedgerDefaultWriteQuorum``: the copies of each entry, the streams' replica count
  (1, 3 or 5);
- ``managedLedgerDefaultAckQuorum``: JetStream acknowledges a record once a majority of its
  replicas hold it, so the ack quorum may be at most that majority (it is then met or
  exceeded);
- ``managedLedgerDefaultEnsembleSize``: at least the write quorum (Pulsar's rule); JetStream
  places every replica of a stream on its own node.

The key-value buckets of the cluster (registry, leases, managed-ledger and configuration
metadata) keep as many copies as the ledgers, so losing a node loses none of them either.
"""

from __future__ import annotations

from starquake.broker.config import BrokerConfig, ConfigError

__all__ = ["ledger_replicas"]


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
