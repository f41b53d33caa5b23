"""Cluster mode: several brokers over replicated storage and a shared metadata store.

Being built (see ``docs/cluster-design.md``); the broker uses the configuration store only
(``configurationMetadataStoreUrl``). Here so far:

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
  ledger, fencing without clocks, reads by record index, trimming.
"""
