"""Namespace policy endpoints of the admin API served so far: deduplication.

``GET/POST/DELETE /admin/v2/namespaces/{tenant}/{namespace}/deduplication`` as Pulsar serves
them: GET answers ``true``/``false``, or 204 with no body when the namespace leaves it to the
broker's ``brokerDeduplicationEnabled``; POST takes a JSON boolean. A change applies to live
topics at once: the namespace's loaded topics are unloaded, and their clients reconnect to a
topic loaded under the new policy.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING

from starquake.broker.admin.replies import NO_CONTENT, Reply
from starquake.broker.web import WebServer, json_reply

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

_NAMESPACE = r"/admin/v2/namespaces/(?P<tenant>[^/]+)/(?P<namespace>[^/]+)"


def install(web: WebServer, service: BrokerService) -> None:
    """Add the endpoints to ``web``."""

    def namespace_of(params: dict[str, str]) -> str | None:
        name = f"{params['tenant']}/{params['namespace']}"
        return name if service.resources.namespace_exists(name) else None

    async def get_dedup(params: dict[str, str], _body: bytes) -> Reply:
        namespace = namespace_of(params)
        if namespace is None:
            return json_reply(404, {"reason": "Namespace does not exist"})
        value = service.resources.namespace_policies(namespace).get("deduplicationEnabled")
        if value is None:
            return NO_CONTENT
        return json_reply(200, bool(value))

    async def set_dedup(params: dict[str, str], body: bytes) -> Reply:
        namespace = namespace_of(params)
        if namespace is None:
            return json_reply(404, {"reason": "Namespace does not exist"})
        try:
            value = json.loads(body or b"null")
        except ValueError:
            value = None
        if not isinstance(value, bool):
            return json_reply(400, {"reason": "the body must be a JSON boolean: true or false"})
        await _update(service, namespace, value)
        return NO_CONTENT

    async def delete_dedup(params: dict[str, str], _body: bytes) -> Reply:
        namespace = namespace_of(params)
        if namespace is None:
            return json_reply(404, {"reason": "Namespace does not exist"})
        await _update(service, namespace, None)
        return NO_CONTENT

    path = _NAMESPACE + "/deduplication"
    web.route_pattern("GET", path, get_dedup)
    web.route_pattern("POST", path, set_dedup)
    web.route_pattern("DELETE", path, delete_dedup)


async def _update(service: BrokerService, namespace: str, value: bool | None) -> None:
    policies = service.resources.namespace_policies(namespace)
    if value is None:
        policies.pop("deduplicationEnabled", None)
    else:
        policies["deduplicationEnabled"] = value
    await asyncio.to_thread(service.resources.set_namespace_policies, namespace, policies)
    log.info("namespace %s: deduplicationEnabled set to %s", namespace, value)
    for topic in list(service.topics.values()):
        if topic.name.namespace_name == namespace:
            service.unload_topic(topic)
