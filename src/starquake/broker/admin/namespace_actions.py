"""Namespace-wide operations, with Pulsar's paths under ``/admin/v2/namespaces/{tenant}/{ns}``:

- ``PUT /unload``: unload every loaded topic of the namespace (their clients reconnect and the
  topics load again on use); 204;
- ``POST /clearBacklog``: every subscription of every persistent topic acknowledges all its
  messages; ``POST /clearBacklog/{subscription}``: only the subscriptions of that name; 204.

An unknown namespace is 404.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from starquake.broker import topic_admin
from starquake.broker.admin.replies import NO_CONTENT, SEGMENT, Endpoint, Reply, serve_routes
from starquake.broker.resources import NotFoundError
from starquake.broker.subscription import Subscription
from starquake.common.topic_name import TopicName

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService
    from starquake.broker.web import WebServer

log = logging.getLogger(__name__)

NAMESPACE = rf"/admin/v2/namespaces/(?P<tenant>{SEGMENT})/(?P<namespace>{SEGMENT})"


def install(web: WebServer, service: BrokerService) -> None:
    """Add the endpoints to ``web``."""

    def namespace_of(params: dict[str, str]) -> str:
        namespace = f"{params['tenant']}/{params['namespace']}"
        if not service.resources.namespace_exists(namespace):
            raise NotFoundError(f"Namespace {namespace} does not exist")
        return namespace

    async def unload(params: dict[str, str], _body: bytes) -> Reply:
        namespace = namespace_of(params)
        unloaded = 0
        for topic in list(service.topics.values()):
            if topic.name.namespace_name == namespace:
                service.unload_topic(topic)
                unloaded += 1
        log.info("namespace %s unloaded (%d topic(s))", namespace, unloaded)
        return NO_CONTENT

    async def clear_backlog(params: dict[str, str], _body: bytes) -> Reply:
        namespace = namespace_of(params)
        only = params.get("subscription")
        for name in await service.list_topics(namespace, persistent=True):
            topic = await topic_admin.persistent_topic(service, TopicName.parse(name))
            for subscription in list(topic.subscriptions.values()):
                if not isinstance(subscription, Subscription) or not subscription.durable:
                    continue
                if only is None or subscription.name == only:
                    await topic_admin.clear_backlog(service, subscription)
        return NO_CONTENT

    routes: list[tuple[str, str, Endpoint]] = [
        ("PUT", NAMESPACE + "/unload", unload),
        ("POST", NAMESPACE + "/clearBacklog", clear_backlog),
        ("POST", NAMESPACE + rf"/clearBacklog/(?P<subscription>{SEGMENT})", clear_backlog),
    ]
    serve_routes(web, routes)
