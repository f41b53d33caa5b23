"""HTTP lookups: what a client given an ``http://`` service URL asks the web port.

The official clients then ask, over HTTP:

- ``GET /lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}`` (optional ``listenerName``):
  the broker serving the topic, as ``{"brokerUrl", "brokerUrlTls", "httpUrl", "httpUrlTls",
  "nativeUrl"}`` (a client reads ``brokerUrl``, or ``brokerUrlTls`` over TLS, and needs both
  keys present; a URL of a port that is off is empty); in a cluster, a broker that does not
  serve the topic answers 307 to the same lookup, ``authoritative=true``, at its owner;
- ``GET /admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions?checkAllowAutoCreation=true``
  (served with the partitioned-topic endpoints): the partition count, creating the topic as
  partitioned when auto-creation says so, as the binary PARTITIONED_METADATA lookup does;
- ``GET /admin/v2/namespaces/{tenant}/{namespace}/topics?mode=PERSISTENT|NON_PERSISTENT|ALL``:
  the topic names of a namespace (partitions by their partition names), for pattern
  subscriptions.
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import TYPE_CHECKING

from starquake.broker.admin.replies import SEGMENT, Reply, status_of
from starquake.broker.admin.routing import Route
from starquake.broker.errors import BrokerServiceError
from starquake.broker.web import Call, Need, json_reply
from starquake.common.topic_name import InvalidTopicNameError, TopicName

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)


LOOKUP = (
    rf"/lookup/v2/topic/(?P<domain>persistent|non-persistent)/(?P<tenant>{SEGMENT})"
    rf"/(?P<namespace>{SEGMENT})/(?P<topic>{SEGMENT})"
)
NAMESPACE_TOPICS = rf"/admin/v2/namespaces/(?P<tenant>{SEGMENT})/(?P<namespace>{SEGMENT})/topics"


async def lookup(service: BrokerService, call: Call) -> Reply:
    """The broker serving the topic, as a client's HTTP lookup asks."""
    try:
        params = call.params
        topic = TopicName.parse(
            f"{params['domain']}://{params['tenant']}/{params['namespace']}/{params['topic']}"
        )
    except InvalidTopicNameError as exc:
        return json_reply(412, {"reason": str(exc)})
    listener = call.params.get("listenerName", "")
    try:
        urls = service.check_lookup_urls(topic, listener)
        authoritative = call.params.get("authoritative", "false").lower() == "true"
        owner = await service.placement.owner(topic, authoritative)
    except BrokerServiceError as exc:
        return json_reply(status_of(exc), {"reason": str(exc)})
    if owner is not None:
        return _redirect(owner.http_url or owner.http_url_tls, call.params, listener)
    return json_reply(
        200,
        {
            "brokerUrl": urls.broker_url,
            "brokerUrlTls": urls.broker_url_tls,
            "httpUrl": service.urls.web_service_url,
            "httpUrlTls": service.urls.web_service_url_tls,
            "nativeUrl": urls.broker_url or urls.broker_url_tls,
        },
    )


def _redirect(http_url: str, params: dict[str, str], listener: str) -> Reply:
    """307 to the same lookup at the owner's web port, authoritative (as Pulsar answers)."""
    parts = (params[key] for key in ("domain", "tenant", "namespace", "topic"))
    path = "/lookup/v2/topic/" + "/".join(urllib.parse.quote(p, safe="") for p in parts)
    query = {"authoritative": "true"} | ({"listenerName": listener} if listener else {})
    location = f"{http_url}{path}?{urllib.parse.urlencode(query)}"
    return (307, "application/json", b"", {"Location": location})


async def namespace_topics(service: BrokerService, call: Call) -> Reply:
    """The topic names of a namespace (``mode``: persistent, non-persistent or all)."""
    namespace = f"{call.params['tenant']}/{call.params['namespace']}"
    if not service.resources.namespace_exists(namespace):
        return json_reply(404, {"reason": f"Namespace {namespace} does not exist"})
    mode = call.params.get("mode", "PERSISTENT").upper()
    if mode not in ("PERSISTENT", "NON_PERSISTENT", "ALL"):
        return json_reply(400, {"reason": f"unknown mode {mode!r}"})
    names: list[str] = []
    if mode in ("PERSISTENT", "ALL"):
        names += await service.list_topics(namespace, persistent=True)
    if mode in ("NON_PERSISTENT", "ALL"):
        names += await service.list_topics(namespace, persistent=False)
    return json_reply(200, names)


ROUTES = [
    Route("GET", LOOKUP, lookup, Need.TOPIC_LOOKUP),
    Route("GET", NAMESPACE_TOPICS, namespace_topics, Need.LIST_TOPICS),
]
"""The endpoints of HTTP lookups."""
