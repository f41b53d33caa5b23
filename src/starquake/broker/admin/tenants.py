"""Clusters, brokers, tenants and namespaces in the admin API, with Pulsar's paths and codes.

- ``GET /admin/v2/clusters``; ``GET|PUT|POST|DELETE /admin/v2/clusters/{cluster}`` with a
  ClusterData body (``serviceUrl``, ``serviceUrlTls``, ``brokerServiceUrl``,
  ``brokerServiceUrlTls``...), kept in the metadata store;
  ``GET /admin/v2/brokers/{cluster}`` (the live brokers' ids, web addresses ``host:port``:
  this broker's alone when standalone).
- ``GET /admin/v2/tenants``; ``GET|PUT|POST|DELETE /admin/v2/tenants/{tenant}`` with a
  TenantInfo body ``{"adminRoles": [...], "allowedClusters": [...]}``.
- ``GET /admin/v2/namespaces/{tenant}``; ``GET|PUT|DELETE /admin/v2/namespaces/{tenant}/{ns}``
  (GET answers the namespace's policies, ``bundles`` included; PUT takes optional policies,
  ``bundles`` as ``boundaries`` or ``numBundles``: default ``defaultNumberOfNamespaceBundles``
  equal ranges); ``GET .../{ns}/bundles``: ``{"boundaries": [...], "numBundles": n}``.

Success without a body is 204; an unknown resource 404, an existing one 409, a name Pulsar
would refuse or a precondition that does not hold 412, a body that is not the expected JSON
400; every error carries ``{"reason": ...}``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from starquake.broker.admin.replies import (
    NO_CONTENT,
    SEGMENT,
    BadRequest,
    Reply,
    json_body,
)
from starquake.broker.admin.routing import Route
from starquake.broker.errors import BrokerServiceError
from starquake.broker.policy_types import Policies
from starquake.broker.resources import ConflictError, NotFoundError
from starquake.broker.security.authorization import revalidate
from starquake.broker.web import Call, Need, json_reply
from starquake.cluster.bundles import NamespaceBundles

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

# Pulsar's rule for tenant, namespace and cluster names.
_VALID_NAME = re.compile(r"[-=:.\w]+")


def _check_name(kind: str, name: str) -> None:
    if not _VALID_NAME.fullmatch(name):
        raise BrokerServiceError(f"{kind} name is not valid: {name!r}")


def tenant_info(service: BrokerService, body: bytes) -> dict[str, Any]:
    """The TenantInfo of a body, checked (400, or 412 for unknown clusters)."""
    value = json_body(body, {})
    if not isinstance(value, dict):
        raise BadRequest("the body must be a TenantInfo object")
    roles = value.get("adminRoles", [])
    clusters = value.get("allowedClusters", [service.resources.cluster_name])
    for field, items in (("adminRoles", roles), ("allowedClusters", clusters)):
        if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
            raise BadRequest(f"{field} must be a list of strings")
    if not clusters:
        raise BrokerServiceError("Clusters can not be empty")
    unknown = sorted(c for c in set(clusters) if not service.resources.cluster_exists(c))
    if unknown:
        raise BrokerServiceError(f"Clusters {unknown} do not exist")
    return {"adminRoles": list(roles), "allowedClusters": list(clusters)}


CLUSTER_URLS = (
    "serviceUrl",
    "serviceUrlTls",
    "brokerServiceUrl",
    "brokerServiceUrlTls",
    "proxyServiceUrl",
)
"""The address fields of Pulsar's ClusterData (each a string)."""


def cluster_data(body: bytes) -> dict[str, Any]:
    """The ClusterData of a body (400 when it is not an object, or an address is not a
    string)."""
    value = json_body(body, {})
    if not isinstance(value, dict):
        raise BadRequest("the body must be a ClusterData object")
    for field in CLUSTER_URLS:
        if not isinstance(value.get(field, ""), (str, type(None))):
            raise BadRequest(f"{field} must be a string (a URL)")
    return {key: item for key, item in value.items() if item is not None}


# --- clusters and brokers -----------------------------------------------------------------


async def clusters(service: BrokerService, call: Call) -> Reply:
    """The names of the clusters."""
    return json_reply(200, service.resources.clusters())


async def cluster(service: BrokerService, call: Call) -> Reply:
    """One cluster's ClusterData."""
    return json_reply(200, service.resources.cluster_data(call.params["cluster"]))


async def create_cluster(service: BrokerService, call: Call) -> Reply:
    """Create a cluster with the body's ClusterData."""
    name = call.params["cluster"]
    _check_name("Cluster", name)
    await asyncio.to_thread(service.resources.create_cluster, name, cluster_data(call.body))
    log.info("cluster %s created", name)
    return NO_CONTENT


async def update_cluster(service: BrokerService, call: Call) -> Reply:
    """Replace a cluster's ClusterData."""
    name = call.params["cluster"]
    await asyncio.to_thread(service.resources.update_cluster, name, cluster_data(call.body))
    log.info("cluster %s updated", name)
    return NO_CONTENT


async def delete_cluster(service: BrokerService, call: Call) -> Reply:
    """Delete a cluster (not the broker's own)."""
    name = call.params["cluster"]
    if name == service.resources.cluster_name:
        raise BrokerServiceError(f"Cluster {name} is this broker's own cluster")
    await asyncio.to_thread(service.resources.delete_cluster, name)
    log.info("cluster %s deleted", name)
    return NO_CONTENT


async def brokers(service: BrokerService, call: Call) -> Reply:
    """The live brokers of this cluster, by id (web address ``host:port``): those registered
    in a cluster, else this one."""
    if call.params["cluster"] != service.resources.cluster_name:
        raise NotFoundError(f"Cluster {call.params['cluster']} does not exist")
    membership = service.placement.membership
    if membership is None:
        return json_reply(200, [urlsplit(service.web_service_url).netloc])
    return json_reply(200, [b.broker_id for b in await membership.registry.brokers()])


# --- tenants ------------------------------------------------------------------------------


async def tenants(service: BrokerService, call: Call) -> Reply:
    """The names of the tenants."""
    return json_reply(200, service.resources.tenants())


async def get_tenant(service: BrokerService, call: Call) -> Reply:
    """One tenant's TenantInfo."""
    return json_reply(200, service.resources.tenant_info(call.params["tenant"]))


async def create_tenant(service: BrokerService, call: Call) -> Reply:
    """Create a tenant with the body's TenantInfo."""
    tenant = call.params["tenant"]
    _check_name("Tenant", tenant)
    info = tenant_info(service, call.body)
    await asyncio.to_thread(service.resources.create_tenant, tenant, info)
    log.info("tenant %s created", tenant)
    return NO_CONTENT


async def update_tenant(service: BrokerService, call: Call) -> Reply:
    """Replace a tenant's TenantInfo."""
    tenant = call.params["tenant"]
    info = tenant_info(service, call.body)
    await asyncio.to_thread(service.resources.update_tenant, tenant, info)
    for namespace in service.resources.namespaces(tenant):  # a role may have lost its admin rights
        revalidate(service, namespace)
    return NO_CONTENT


async def delete_tenant(service: BrokerService, call: Call) -> Reply:
    """Delete a tenant (it must have no namespaces)."""
    tenant = call.params["tenant"]
    await asyncio.to_thread(service.resources.delete_tenant, tenant)
    log.info("tenant %s deleted", tenant)
    return NO_CONTENT


# --- namespaces ---------------------------------------------------------------------------


async def namespaces(service: BrokerService, call: Call) -> Reply:
    """The namespaces of a tenant."""
    tenant = call.params["tenant"]
    if not service.resources.tenant_exists(tenant):
        raise NotFoundError(f"Tenant {tenant} does not exist")
    return json_reply(200, service.resources.namespaces(tenant))


async def get_namespace(service: BrokerService, call: Call) -> Reply:
    """A namespace's policies."""
    namespace = f"{call.params['tenant']}/{call.params['namespace']}"
    policies = service.resources.namespace_policies(namespace)
    bundles = service.placement.bundles_in(policies).to_policies()
    return json_reply(200, {**policies, "bundles": bundles})


async def get_bundles(service: BrokerService, call: Call) -> Reply:
    """A namespace's bundles: ``{"boundaries": [...], "numBundles": n}``."""
    namespace = f"{call.params['tenant']}/{call.params['namespace']}"
    if not service.resources.namespace_exists(namespace):
        raise NotFoundError(f"Namespace {namespace} does not exist")
    return json_reply(200, service.placement.bundles(namespace).to_policies())


def _bundles_asked(value: object) -> NamespaceBundles | None:
    """The bundles a new namespace's body asks for (``boundaries``, else ``numBundles``
    equal ranges); None when it names none (the broker's default split)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("bundles must be an object with boundaries or numBundles")
    try:
        if value.get("boundaries") is not None:
            return NamespaceBundles.from_policies(value)
        count = value.get("numBundles")
        if count is None or count == 0:  # as Pulsar's admin clients send an unset one
            return None
        if not isinstance(count, int) or isinstance(count, bool):
            raise ValueError("numBundles must be a whole number")
        return NamespaceBundles.equal(count)
    except ValueError as exc:
        raise BadRequest(f"bundles: {exc}") from None


async def create_namespace(service: BrokerService, call: Call) -> Reply:
    """Create a namespace, with the body's policies if any."""
    _check_name("Namespace", call.params["namespace"])
    namespace = f"{call.params['tenant']}/{call.params['namespace']}"
    policies = json_body(call.body, {})
    if not isinstance(policies, dict):
        raise BadRequest("the body must be a Policies object")
    bundles = _bundles_asked(policies.pop("bundles", None))
    # checked as stored (PolicyError, 400, names the field); a null is a policy not set, as
    # Pulsar's admin clients send the fields they leave unset
    Policies.from_stored(policies, namespace, strict=True)
    if bundles is not None:
        policies["bundles"] = bundles.to_policies()
    await asyncio.to_thread(service.resources.create_namespace, namespace, policies)
    service.policies_changed(namespace)  # it may replace the one created at first start
    revalidate(service, namespace)
    log.info("namespace %s created", namespace)
    return NO_CONTENT


async def delete_namespace(service: BrokerService, call: Call) -> Reply:
    """Delete an empty namespace (409 while it holds topics)."""
    namespace = f"{call.params['tenant']}/{call.params['namespace']}"
    if not service.resources.namespace_exists(namespace):
        raise NotFoundError(f"Namespace {namespace} does not exist")
    topics = await service.list_topics(namespace)
    topics += await service.list_topics(namespace, persistent=False)
    if topics or service.resources.partitioned_topics(namespace):
        raise ConflictError(f"Cannot delete non empty namespace {namespace}")
    await asyncio.to_thread(service.resources.delete_namespace, namespace)
    log.info("namespace %s deleted", namespace)
    return NO_CONTENT


_CLUSTER = rf"/admin/v2/clusters/(?P<cluster>{SEGMENT})"
_TENANT = rf"/admin/v2/tenants/(?P<tenant>{SEGMENT})"
_NAMESPACE = rf"/admin/v2/namespaces/(?P<tenant>{SEGMENT})/(?P<namespace>{SEGMENT})"

ROUTES = [
    Route("GET", "/admin/v2/clusters", clusters, Need.SUPER_USER),
    Route("GET", _CLUSTER, cluster, Need.SUPER_USER),
    Route("PUT", _CLUSTER, create_cluster, Need.SUPER_USER, "ClusterData"),
    Route("POST", _CLUSTER, update_cluster, Need.SUPER_USER, "ClusterData"),
    Route("DELETE", _CLUSTER, delete_cluster, Need.SUPER_USER),
    Route("GET", rf"/admin/v2/brokers/(?P<cluster>{SEGMENT})", brokers, Need.SUPER_USER),
    Route("GET", "/admin/v2/tenants", tenants, Need.SUPER_USER),
    Route("GET", _TENANT, get_tenant, Need.TENANT_ADMIN),
    Route("PUT", _TENANT, create_tenant, Need.SUPER_USER, "TenantInfo"),
    Route("POST", _TENANT, update_tenant, Need.SUPER_USER, "TenantInfo"),
    Route("DELETE", _TENANT, delete_tenant, Need.SUPER_USER),
    Route("GET", rf"/admin/v2/namespaces/(?P<tenant>{SEGMENT})", namespaces, Need.TENANT_ADMIN),
    Route("GET", _NAMESPACE, get_namespace, Need.TENANT_ADMIN),
    Route("GET", _NAMESPACE + "/bundles", get_bundles, Need.TENANT_ADMIN),
    Route("PUT", _NAMESPACE, create_namespace, Need.TENANT_ADMIN, "Policies (optional)"),
    Route("DELETE", _NAMESPACE, delete_namespace, Need.TENANT_ADMIN),
]
"""The endpoints of clusters, brokers, tenants and namespaces."""
