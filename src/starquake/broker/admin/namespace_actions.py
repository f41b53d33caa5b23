"""Namespace-wide operations, with Pulsar's paths under ``/admin/v2/namespaces/{tenant}/{ns}``:

- ``PUT /unload``: unload every loaded topic of the namespace (their clients reconnect and the
  topics load again on use; in a cluster the broker gives the namespace's bundles up); 204;
- ``PUT /{bundle}/unload`` (a bundle named ``0x00000000_0x40000000``): the same for one
  bundle's topics; 404 for a bundle the namespace does not have;
- ``PUT /{bundle}/split`` (``splitAlgorithmName=range_equally_divide``, the only one): the
  bundle becomes two at the middle of its range (stored in the namespace's policies; in a
  cluster the split bundle is given up and its topics placed again); 204;
- ``POST /clearBacklog``: every subscription of every persistent topic acknowledges all its
  messages; ``POST /clearBacklog/{subscription}``: only the subscriptions of that name; 204.

An unknown namespace is 404.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from starquake.broker import topic_admin
from starquake.broker.admin.replies import NO_CONTENT, SEGMENT, BadRequest, Reply
from starquake.broker.admin.routing import Route
from starquake.broker.resources import NotFoundError
from starquake.broker.subscription import Subscription
from starquake.broker.web import Call, Need
from starquake.cluster.bundles import BundleRef, NamespaceBundles
from starquake.common.topic_name import TopicName
from starquake.storage import StorageError

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

NAMESPACE = rf"/admin/v2/namespaces/(?P<tenant>{SEGMENT})/(?P<namespace>{SEGMENT})"
_BUNDLE = r"0x[0-9a-fA-F]{8}_0x[0-9a-fA-F]{8}"


def namespace_of(service: BrokerService, params: dict[str, str]) -> str:
    """``tenant/namespace`` of the path (404 when it does not exist)."""
    namespace = f"{params['tenant']}/{params['namespace']}"
    if not service.resources.namespace_exists(namespace):
        raise NotFoundError(f"Namespace {namespace} does not exist")
    return namespace


def _bundle_named(bundles: NamespaceBundles, namespace: str, name: str) -> str:
    """The name of the bundle ``name`` names (hex digits in either case); 404 if none."""
    try:
        return bundles.bundle_named(name).name
    except ValueError:
        raise NotFoundError(f"Bundle {name} of namespace {namespace} does not exist") from None


async def _give_up(service: BrokerService, refs: list[BundleRef]) -> None:
    """In a cluster, give up bundles whose topics were just closed here, once their cursors'
    last positions are stored (those of pending-ack logs too): the next owner takes them over
    as they are, and no cursor this broker would store later, after that owner opened the
    managed ledger, fences it. A store that fails is logged; the bundles go all the same."""
    membership = service.placement.membership
    if membership is None:
        return
    try:
        await service.persist_cursors()
    except StorageError as exc:
        log.warning("cursor positions not stored before giving bundles up: %s", exc)
    for ref in refs:
        await membership.release(ref)


async def unload(service: BrokerService, call: Call) -> Reply:
    """Unload every loaded topic of the namespace; in a cluster, give its bundles up."""
    namespace = namespace_of(service, call.params)
    unloaded = 0
    for topic in list(service.topics.values()):
        if topic.name.namespace_name == namespace:
            service.unload_topic(topic)
            unloaded += 1
    membership = service.placement.membership
    if membership is not None:
        owned = membership.ownership.owned()
        await _give_up(service, [ref for ref in owned if ref.namespace == namespace])
    log.info("namespace %s unloaded (%d topic(s))", namespace, unloaded)
    return NO_CONTENT


async def unload_bundle(service: BrokerService, call: Call) -> Reply:
    """Unload the loaded topics of one bundle; in a cluster, give the bundle up (the next
    lookup of one of its topics chooses an owner again)."""
    namespace = namespace_of(service, call.params)
    name = _bundle_named(service.placement.bundles(namespace), namespace, call.params["bundle"])
    ref = BundleRef(namespace, name)
    unloaded = service.placement.close_bundle(ref, service)
    await _give_up(service, [ref])
    log.info("bundle %s/%s unloaded (%d topic(s))", namespace, name, unloaded)
    return NO_CONTENT


SPLIT_ALGORITHMS = ("range_equally_divide",)


async def split_bundle(service: BrokerService, call: Call) -> Reply:
    """Split one bundle at the middle of its range (``range_equally_divide``), stored as the
    namespace's new boundaries. In a cluster the broker gives the split bundle up and closes
    its topics, which are placed again, bundle by bundle, at their next lookup."""
    namespace = namespace_of(service, call.params)
    asked = call.params["bundle"]
    algorithm = call.params.get("splitAlgorithmName") or SPLIT_ALGORITHMS[0]
    if algorithm not in SPLIT_ALGORITHMS:
        raise BadRequest(f"unsupported split algorithm {algorithm} (supported: {SPLIT_ALGORITHMS})")
    placement = service.placement
    before: list[NamespaceBundles] = []

    def split(policies: dict[str, Any]) -> None:
        bundles = placement.bundles_in(policies)
        name = _bundle_named(bundles, namespace, asked)
        try:
            policies["bundles"] = bundles.split(name).to_policies()
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        before[:] = [bundles]

    await asyncio.to_thread(service.resources.update_namespace_policies, namespace, split)
    name = _bundle_named(before[0], namespace, asked)
    ref = BundleRef(namespace, name)
    membership = placement.membership
    if membership is not None:
        placement.close_bundle(ref, service, before[0])
        await _give_up(service, [ref])
    log.info("bundle %s/%s split", namespace, name)
    return NO_CONTENT


async def clear_backlog(service: BrokerService, call: Call) -> Reply:
    """Acknowledge every message of the namespace's subscriptions (or of those of one name)."""
    namespace = namespace_of(service, call.params)
    only = call.params.get("subscription")
    for name in await service.list_topics(namespace, persistent=True):
        topic = await topic_admin.persistent_topic(service, TopicName.parse(name))
        for subscription in list(topic.subscriptions.values()):
            if not isinstance(subscription, Subscription) or not subscription.durable:
                continue
            if only is None or subscription.name == only:
                await topic_admin.clear_backlog(service, subscription)
    return NO_CONTENT


ROUTES = [
    Route("PUT", NAMESPACE + "/unload", unload, Need.TENANT_ADMIN),
    Route("PUT", NAMESPACE + rf"/(?P<bundle>{_BUNDLE})/unload", unload_bundle, Need.TENANT_ADMIN),
    Route("PUT", NAMESPACE + rf"/(?P<bundle>{_BUNDLE})/split", split_bundle, Need.SUPER_USER),
    Route("POST", NAMESPACE + "/clearBacklog", clear_backlog, Need.TENANT_ADMIN),
    Route(
        "POST",
        NAMESPACE + rf"/clearBacklog/(?P<subscription>{SEGMENT})",
        clear_backlog,
        Need.TENANT_ADMIN,
    ),
]
"""The namespace-wide endpoints."""
