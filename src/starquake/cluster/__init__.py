"""Cluster mode: several brokers over replicated storage and a shared metadata store.

Being built (see ``docs/cluster-design.md``). Here so far: ``bundles.py``, how a namespace's
topics are divided into bundles, the unit of ownership.
"""
