"""Clusters, brokers, tenants and namespaces in the admin API, with Pulsar's paths and codes.

- ``GET /admin/v2/clusters``; ``GET|PUT|POST|DELETE /admin/v2/clusters/{cluster}`` with a
  ClusterData body (``serviceUrl``, ``serviceUrlTls``, ``brokerServiceUrl``,
  ``brokerServiceUrlTls``...), kept in the metadata store;
  ``GET /admin/v2/brokers/{cluster}`` (this broker's web address ``host:port``).
- ``GET /admin/v2/tenants``; ``GET|PUT|POST|DELETE /admin/v2/tenants/{tenant}`` with a
  TenantInfo body ``{"adminRoles": [...], "allowedClusters": [...]}``.
- ``GET /admin/v2/namespaces/{tenant}``; ``GET|PUT|DELETE /admin/v2/namespaces/{tenant}/{ns}``
  (GET answers the namespace's policies; PUT takes optional policies).

Success without a body is 204; an unknown resource 404, an existing one 409, a name Pulsar
would refuse or a precondition that does not hold 412, a body that is not the expected JSON
400; every error carries ``{"reason": ...}``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from starquake.broker.admin.replies import (
    NO_CONTENT,
    SEGMENT,
    BadRequest,
    Reply,
    json_body,
    serve_routes,
)
from starquake.broker.errors import BrokerServiceError
from starquake.broker.resources import ConflictError, NotFoundError
from starquake.broker.security.authorization import revalidate
from starquake.broker.web import WebServer, json_reply

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

# Pulsar's rule for tenant, namespace and cluster names.
_VALID_NAME = re.compile(r"[-=:.\w]+")


def _check_name(kind: str, name: str) -> None:
    if not _VALID_NAME.fullmatch(name):
        raise BrokerServiceError(f"{kind} name is not valid: {name!r}")


def install(web: WebServer, service: BrokerService) -> None:
    """Add the endpoints to ``web``."""
    resources = service.resources

    def tenant_info(body: bytes) -> dict[str, Any]:
        value = json_body(body, {})
        if not isinstance(value, dict):
            raise BadRequest("the body must be a TenantInfo object")
        roles = value.get("adminRoles", [])
        clusters = value.get("allowedClusters", [resources.cluster_name])
        for field, items in (("adminRoles", roles), ("allowedClusters", clusters)):
            if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
                raise BadRequest(f"{field} must be a list of strings")
        if not clusters:
            raise BrokerServiceError("Clusters can not be empty")
        unknown = sorted(c for c in set(clusters) if not resources.cluster_exists(c))
        if unknown:
            raise BrokerServiceError(f"Clusters {unknown} do not exist")
        return {"adminRoles": list(roles), "allowedClusters": list(clusters)}

    def cluster_data(body: bytes) -> dict[str, Any]:
        value = json_body(body, {})
        if not isinstance(value, dict):
            raise BadRequest("the body must be a ClusterData object")
        return {key: item for key, item in value.items() if item is not None}

    # --- clusters and brokers -----------------------------------------------------------------

    async def clusters(_params: dict[str, str], _body: bytes) -> Reply:
        return json_reply(200, resources.clusters())

    async def cluster(params: dict[str, str], _body: bytes) -> Reply:
        return json_reply(200, resources.cluster_data(params["cluster"]))

    async def create_cluster(params: dict[str, str], body: bytes) -> Reply:
        name = params["cluster"]
        _check_name("Cluster", name)
        await asyncio.to_thread(resources.create_cluster, name, cluster_data(body))
        log.info("cluster %s created", name)
        return NO_CONTENT

    async def update_cluster(params: dict[str, str], body: bytes) -> Reply:
        name = params["cluster"]
        await asyncio.to_thread(resources.update_cluster, name, cluster_data(body))
        log.info("cluster %s updated", name)
        return NO_CONTENT

    async def delete_cluster(params: dict[str, str], _body: bytes) -> Reply:
        name = params["cluster"]
        if name == resources.cluster_name:
            raise BrokerServiceError(f"Cluster {name} is this broker's own cluster")
        await asyncio.to_thread(resources.delete_cluster, name)
        log.info("cluster %s deleted", name)
        return NO_CONTENT

    async def brokers(params: dict[str, str], _body: bytes) -> Reply:
        if params["cluster"] != resources.cluster_name:
            raise NotFoundError(f"Cluster {params['cluster']} does not exist")
        return json_reply(200, [urlsplit(service.web_service_url).netloc])

    # --- tenants ------------------------------------------------------------------------------

    async def tenants(_params: dict[str, str], _body: bytes) -> Reply:
        return json_reply(200, resources.tenants())

    async def get_tenant(params: dict[str, str], _body: bytes) -> Reply:
        return json_reply(200, resources.tenant_info(params["tenant"]))

    async def create_tenant(params: dict[str, str], body: bytes) -> Reply:
        tenant = params["tenant"]
        _check_name("Tenant", tenant)
        info = tenant_info(body)
        await asyncio.to_thread(resources.create_tenant, tenant, info)
        log.info("tenant %s created", tenant)
        return NO_CONTENT

    async def update_tenant(params: dict[str, str], body: bytes) -> Reply:
        tenant = params["tenant"]
        info = tenant_info(body)
        await asyncio.to_thread(resources.update_tenant, tenant, info)
        for namespace in resources.namespaces(tenant):  # a role may have lost its admin rights
            revalidate(service, namespace)
        return NO_CONTENT

    async def delete_tenant(params: dict[str, str], _body: bytes) -> Reply:
        tenant = params["tenant"]
        await asyncio.to_thread(resources.delete_tenant, tenant)
        log.info("tenant %s deleted", tenant)
        return NO_CONTENT

    # --- namespaces ---------------------------------------------------------------------------

    async def namespaces(params: dict[str, str], _body: bytes) -> Reply:
        tenant = params["tenant"]
        if not resources.tenant_exists(tenant):
            raise NotFoundError(f"Tenant {tenant} does not exist")
        return json_reply(200, resources.namespaces(tenant))

    async def get_namespace(params: dict[str, str], _body: bytes) -> Reply:
        namespace = f"{params['tenant']}/{params['namespace']}"
        policies = resources.namespace_policies(namespace)
        return json_reply(200, {"bundles": {"numBundles": 1}, **policies})

    async def create_namespace(params: dict[str, str], body: bytes) -> Reply:
        _check_name("Namespace", params["namespace"])
        namespace = f"{params['tenant']}/{params['namespace']}"
        policies = json_body(body, {})
        if not isinstance(policies, dict):
            raise BadRequest("the body must be a Policies object")
        policies.pop("bundles", None)  # one bundle: nothing to keep
        await asyncio.to_thread(resources.create_namespace, namespace, policies)
        service.policies_changed(namespace)  # it may replace the one created at first start
        revalidate(service, namespace)
        log.info("namespace %s created", namespace)
        return NO_CONTENT

    async def delete_namespace(params: dict[str, str], _body: bytes) -> Reply:
        namespace = f"{params['tenant']}/{params['namespace']}"
        if not resources.namespace_exists(namespace):
            raise NotFoundError(f"Namespace {namespace} does not exist")
        topics = await service.list_topics(namespace)
        topics += await service.list_topics(namespace, persistent=False)
        if topics or resources.partitioned_topics(namespace):
            raise ConflictError(f"Cannot delete non empty namespace {namespace}")
        await asyncio.to_thread(resources.delete_namespace, namespace)
        log.info("namespace %s deleted", namespace)
        return NO_CONTENT

    base = "/admin/v2"
    routes: list[tuple[str, str, Callable[[dict[str, str], bytes], Awaitable[Reply]]]] = [
        ("GET", f"{base}/clusters", clusters),
        ("GET", rf"{base}/clusters/(?P<cluster>{SEGMENT})", cluster),
        ("PUT", rf"{base}/clusters/(?P<cluster>{SEGMENT})", create_cluster),
        ("POST", rf"{base}/clusters/(?P<cluster>{SEGMENT})", update_cluster),
        ("DELETE", rf"{base}/clusters/(?P<cluster>{SEGMENT})", delete_cluster),
        ("GET", rf"{base}/brokers/(?P<cluster>{SEGMENT})", brokers),
        ("GET", f"{base}/tenants", tenants),
        ("GET", rf"{base}/tenants/(?P<tenant>{SEGMENT})", get_tenant),
        ("PUT", rf"{base}/tenants/(?P<tenant>{SEGMENT})", create_tenant),
        ("POST", rf"{base}/tenants/(?P<tenant>{SEGMENT})", update_tenant),
        ("DELETE", rf"{base}/tenants/(?P<tenant>{SEGMENT})", delete_tenant),
        ("GET", rf"{base}/namespaces/(?P<tenant>{SEGMENT})", namespaces),
        (
            "GET",
            rf"{base}/namespaces/(?P<tenant>{SEGMENT})/(?P<namespace>{SEGMENT})",
            get_namespace,
        ),
        (
            "PUT",
            rf"{base}/namespaces/(?P<tenant>{SEGMENT})/(?P<namespace>{SEGMENT})",
            create_namespace,
        ),
        (
            "DELETE",
            rf"{base}/namespaces/(?P<tenant>{SEGMENT})/(?P<namespace>{SEGMENT})",
            delete_namespace,
        ),
    ]
    serve_routes(web, routes)
