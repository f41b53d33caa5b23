"""The broker's HTTP endpoints: Pulsar's ``/admin/v2`` API, HTTP lookups, metrics and the
dashboard, all served by the broker's :class:`~starquake.broker.web.WebServer`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from starquake.broker.admin import (
    brokers,
    compaction,
    dashboard,
    lookup,
    metrics,
    namespace_actions,
    partitions,
    permissions,
    policies,
    schemas,
    subscriptions,
    tenants,
    topic_messages,
    topic_policies,
    topics,
)

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService
    from starquake.broker.web import WebServer


def install(web: WebServer, service: BrokerService) -> None:
    """Add every endpoint to ``web``."""
    brokers.install(web, service)  # before tenants' /admin/v2/brokers/{cluster}
    tenants.install(web, service)
    policies.install(web, service)
    permissions.install(web, service)
    partitions.install(web, service)
    topics.install(web, service)
    topic_messages.install(web, service)
    namespace_actions.install(web, service)
    compaction.install(web, service)
    topic_policies.install(web, service)
    subscriptions.install(web, service)
    schemas.install(web, service)
    lookup.install(web, service)
    metrics.install(web, service)
    dashboard.install(web, service)
