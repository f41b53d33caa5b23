"""A client for a Pulsar broker's admin REST API (``/admin/v2``), over the standard library.

::

    from starquake.admin import PulsarAdmin

    admin = PulsarAdmin("http://localhost:8080")
    admin.tenants.create("acme", allowed_clusters=["standalone"])
    admin.namespaces.create("acme/orders")
    admin.topics.create_partitioned("acme/orders/events", 4)
    stats = admin.topics.stats("acme/orders/events-partition-0")

It works against any broker that serves Pulsar's admin API, Starquake's or Apache Pulsar's.
"""

from __future__ import annotations

# The client module's __all__ is the package's API.
from starquake.admin.client import *  # noqa: F403
from starquake.admin.client import __all__ as __all__
