"""Cluster mode: several brokers over replicated storage and a shared metadata store.

Being built (see ``docs/cluster-design.md``); a broker given ``metadataStoreUrl`` uses all of
it: membership, lookup, the shared configuration store and its ledgers in JetStream. Here:

- ``bundles.py``: how a namespace's topics are divided into bundles, the unit of ownership;
- ``nodes.py``: local NATS JetStream nodes (``nats-server``) for a development cluster and tests;
- ``jetstream.py``: connecting to JetStream and opening key-value buckets;
- ``kv_metadata.py``: the metadata store on a JetStream key-value bucket (versioned
  compare-and-set, children, watches);
- ``config_store.py``: the configuration metadata in JetStream behind the synchronous metadata
  store names, read from a replica kept by watches (a store thread);
- ``leases.py``: leases that end when not renewed (bundle ownership, broker registry, leader);
- ``registry.py``: the live brokers, their URLs and load reports; the least-loaded choice;
- ``ownership.py``: one owner per namespace bundle through its lease;
- ``leader.py``: the leader broker, which chooses owners for unowned bundles;
- ``lookup.py``: which broker serves a topic (connect here, or redirect to the owner);
- ``js_ledgers.py``: ledgers as chains of records in shared JetStream streams, one writer per
  ledger, fencing without clocks, reads by record index, trimming;
- ``js_factory.py``, ``js_managed_ledger.py``, ``js_ml_reads.py``, ``js_recovery.py``,
  ``js_ml_metadata.py``: the ManagedLedger contract on those ledgers (the broker's ledger
  storage in cluster mode);
- ``membership.py``: one broker's part in a cluster (registration, leases, lost bundles).
"""
