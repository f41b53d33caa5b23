"""``GET /dashboard/api/overview``: everything the dashboard's overview shows, in one request,
answered from the broker's live state.

The answer lists the tenants, namespaces and topics the caller may read through the admin API
(all of them with authorization off, or for a super user; else the tenants the role
administers and the namespaces it may list) with each topic's figures: rates, backlog,
storage, producers, consumers and subscriptions. A partitioned topic is one row summing its
loaded partitions. Figures come from loaded topics only: a stored topic no client has used
since the broker started shows ``loaded: false`` and no figures (reading them would load it).
``tenant`` and ``namespace`` query parameters narrow the answer.

In cluster mode, a super user (anyone, with authorization off) also gets ``clusterView``: the
live brokers with their load reports (topics, bundles, rates, CPU), which one leads and which
one this is, and the owner of every owned bundle (``error`` instead when the cluster's store
does not answer). The topic figures stay this broker's own: those of the topics it serves.

The page polls this every two seconds, one request per refresh whatever the number of topics.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from starquake.broker import topic_listing
from starquake.broker.admin.metrics_collect import TopicFigures
from starquake.broker.admin.routing import Route
from starquake.broker.system_topics import is_system_topic
from starquake.broker.web import Call, Need, Reply, json_reply
from starquake.common.topic_name import TopicName
from starquake.storage import StorageError

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

OVERVIEW = "/dashboard/api/overview"

# the figures a row carries, by their name in the answer
_FIELDS = {
    "msgRateIn": "rate_in",
    "msgRateOut": "rate_out",
    "msgThroughputIn": "throughput_in",
    "msgThroughputOut": "throughput_out",
    "backlog": "backlog",
    "storageSize": "storage_size",
    "producers": "producers",
    "consumers": "consumers",
    "subscriptions": "subscriptions",
}


def _figures_json(figures: TopicFigures) -> dict[str, Any]:
    return {key: getattr(figures, attr) for key, attr in _FIELDS.items()}


def _namespace_of(name: str) -> str | None:
    """``tenant/namespace`` of a topic name (None for a name that is not one)."""
    _, sep, rest = name.partition("://")
    parts = rest.split("/", 2)
    return f"{parts[0]}/{parts[1]}" if sep and len(parts) == 3 else None


class _Overview:
    """One answer: the visible namespaces' topics with their figures."""

    def __init__(self, service: BrokerService, role: str | None, stored: list[str]) -> None:
        self.service = service
        self.role = role
        self.stored: dict[str, list[str]] = {}
        """The stored persistent topics by namespace."""
        for name in stored:
            namespace = _namespace_of(name)
            if namespace is not None:
                self.stored.setdefault(namespace, []).append(name)
        self.totals = TopicFigures()

    def visible_namespaces(self, tenant: str | None, namespace: str | None) -> dict[str, list[str]]:
        """The namespaces the role may list, by tenant."""
        resources = self.service.resources
        authorization = self.service.authorization
        tenants = [tenant] if tenant else resources.tenants()
        out: dict[str, list[str]] = {}
        for name in tenants:
            if not resources.tenant_exists(name):
                continue
            admin = not authorization.enabled or authorization.is_tenant_admin(name, self.role)
            names = resources.namespaces(name)
            if namespace:
                names = [n for n in names if n == f"{name}/{namespace}"]
            names = [n for n in names if admin or authorization.can_list_topics(n, self.role)]
            if admin or names:
                out[name] = names
        return out

    def namespace(self, namespace: str) -> list[dict[str, Any]]:
        """The rows of a namespace's topics, partitioned topics folded into one row each."""
        service = self.service
        stored = self.stored.get(namespace, [])
        partitioned = topic_listing.partitioned_counts(service.resources, namespace)
        names = topic_listing.persistent_topics(stored, partitioned, namespace)
        names += topic_listing.non_persistent_topics(service.nonpersistent_topics, namespace)
        rows: dict[str, dict[str, Any]] = {}
        sums: dict[str, TopicFigures] = {}
        subscriptions: dict[str, set[str]] = {}
        for name in names:
            topic = TopicName.parse(name)
            if is_system_topic(topic):
                continue
            base = topic.partitioned_topic_name
            partitions = service.resources.partitions(base) if topic.is_partition else 0
            key = str(base) if partitions else name
            row = rows.get(key)
            if row is None:
                row = rows[key] = {"name": key, "partitions": partitions, "loaded": 0}
            loaded = service.topics.get(name) or service.nonpersistent_topics.get(name)
            if loaded is None:
                continue
            stats = loaded.stats()
            figures = TopicFigures.of(loaded, stats)
            row["loaded"] += 1
            sums.setdefault(key, TopicFigures()).add(figures)
            # a partitioned topic's subscriptions are named alike on every partition
            subscriptions.setdefault(key, set()).update(stats.get("subscriptions") or ())
            self.totals.add(figures)
        for key, summed in sums.items():
            rows[key].update(_figures_json(summed), subscriptions=len(subscriptions[key]))
        return sorted(rows.values(), key=lambda r: (r["name"].split("://")[1], r["name"]))


async def cluster_view(service: BrokerService, role: str | None) -> dict[str, Any] | None:
    """The cluster's brokers and bundle owners for a super user in cluster mode, else None."""
    membership = service.placement.membership
    authorization = service.authorization
    if membership is None or (authorization.enabled and not authorization.is_super_user(role)):
        return None
    try:
        view = await membership.view()
    except StorageError as exc:
        return {"self": membership.me.broker_id, "error": str(exc)}
    brokers = [
        {
            "id": b.broker_id,
            "serviceUrl": b.broker_url or b.broker_url_tls,
            "webUrl": b.http_url or b.http_url_tls,
            "topics": b.load.topics,
            "bundles": b.load.bundles,
            "msgRateIn": b.load.msg_rate_in,
            "msgRateOut": b.load.msg_rate_out,
            "cpuPercent": b.load.cpu_percent,
        }
        for b in view.brokers
    ]
    bundles = [
        {"namespace": ref.namespace, "bundle": ref.bundle, "owner": owner.broker_id}
        for ref, owner in sorted(view.owners.items())
    ]
    return {
        "self": membership.me.broker_id,
        "leader": view.leader,
        "brokers": brokers,
        "bundles": bundles,
    }


async def overview(service: BrokerService, role: str | None, params: dict[str, str]) -> Reply:
    """The dashboard overview for ``role``, narrowed by ``tenant`` and ``namespace``."""
    stored = await asyncio.to_thread(service.storage.list_names)
    stored = [*service.topics, *stored]
    answer = _Overview(service, role, stored)
    tenants = []
    visible = answer.visible_namespaces(params.get("tenant"), params.get("namespace"))
    for tenant, namespaces in visible.items():
        entries = [{"name": ns, "topics": answer.namespace(ns)} for ns in namespaces]
        tenants.append({"name": tenant, "namespaces": entries})
    answer_json: dict[str, Any] = {
        "cluster": service.config.clusterName,
        "authentication": service.authentication is not None,
        "role": role,
        "time": int(time.time() * 1000),
        "totals": _figures_json(answer.totals),
        "tenants": tenants,
    }
    view = await cluster_view(service, role)
    if view is not None:
        answer_json["clusterView"] = view
    return json_reply(200, answer_json)


async def overview_endpoint(service: BrokerService, call: Call) -> Reply:
    """The summary of what the caller's role may read."""
    return await overview(service, call.role, call.params)


ROUTES = [Route("GET", OVERVIEW, overview_endpoint, Need.ANY_ROLE)]
"""The dashboard's summary endpoint."""

__all__ = ["OVERVIEW", "ROUTES", "overview"]
