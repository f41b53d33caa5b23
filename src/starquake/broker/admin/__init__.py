"""The broker's HTTP endpoints: Pulsar's ``/admin/v2`` API, HTTP lookups, metrics and the
dashboard, all served by the broker's :class:`~starquake.broker.web.WebServer`.

:data:`ROUTES` is the one table of every endpoint (see :mod:`~starquake.broker.admin.routing`):
the web server serves it in order (the first route matching a request wins), the authorization
of web requests reads what each route needs from it, and ``docs/admin-endpoints.md`` is
generated from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starquake.broker.admin import (
    brokers,
    compaction,
    dashboard,
    dashboard_api,
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
    transactions,
)
from starquake.broker.admin.routing import Route, install_routes, route_for

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService
    from starquake.broker.web import Need, WebServer

__all__ = ["ROUTES", "Route", "install", "need_of"]

ROUTES: tuple[Route, ...] = (
    *brokers.ROUTES,  # before tenants' /admin/v2/brokers/{cluster}
    *tenants.ROUTES,
    *policies.ROUTES,
    *permissions.ROUTES,
    *partitions.ROUTES,
    *topics.ROUTES,
    *topic_messages.ROUTES,
    *namespace_actions.ROUTES,
    *compaction.ROUTES,
    *topic_policies.ROUTES,
    *subscriptions.ROUTES,
    *transactions.ROUTES,
    *schemas.ROUTES,
    *lookup.ROUTES,
    *metrics.ROUTES,
    *dashboard_api.ROUTES,
    *dashboard.ROUTES,
)
"""Every endpoint of the web port, in the order they are matched."""


def install(web: WebServer, service: BrokerService) -> None:
    """Serve every endpoint of :data:`ROUTES` on ``web``."""
    metrics.metrics_of(service)  # observe commits from the start
    install_routes(web, service, ROUTES)


def need_of(method: str, path: str) -> tuple[Need, dict[str, str]] | None:
    """What the route serving ``method path`` needs and the path's parameters (None: no
    route serves it)."""
    try:
        route, names = route_for(ROUTES, method, path)
    except LookupError:
        return None
    return route.need, names
