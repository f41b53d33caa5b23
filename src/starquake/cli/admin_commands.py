"""``starquake admin``: Pulsar's admin REST API from the command line, as ``pulsar-admin``.

The group and what its commands share are in ``admin_group``; each ``admin_*`` module adds the
commands of one area, and importing them here builds the whole command tree.
"""

from __future__ import annotations

from starquake.cli import (  # noqa: F401
    admin_brokers,
    admin_compaction,
    admin_namespaces,
    admin_permissions,
    admin_policies,
    admin_schemas,
    admin_subscriptions,
    admin_tenants,
    admin_topic_messages,
    admin_topics,
    admin_transactions,
)
from starquake.cli.admin_group import admin

__all__ = ["admin"]
