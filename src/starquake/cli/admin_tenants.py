"""``starquake admin clusters list|delete`` and ``starquake admin tenants ...``, as pulsar-admin."""

from __future__ import annotations

import click

from starquake.cli.admin_group import AdminContext, admin_command, clusters, tenants
from starquake.cli.params import split_values


@admin_command(clusters, "list")
def clusters_list(ctx: AdminContext) -> None:
    """List the clusters."""
    ctx.show(ctx.admin.clusters.list(), header="cluster")


@admin_command(clusters, "delete")
@click.argument("cluster")
def clusters_delete(ctx: AdminContext, cluster: str) -> None:
    """Delete a cluster that no tenant allows."""
    ctx.admin.clusters.delete(cluster)


@admin_command(tenants, "list")
def tenants_list(ctx: AdminContext) -> None:
    """List the tenants."""
    ctx.show(ctx.admin.tenants.list(), header="tenant")


@admin_command(tenants, "get")
@click.argument("tenant")
def tenants_get(ctx: AdminContext, tenant: str) -> None:
    """Show a tenant's admin roles and allowed clusters."""
    ctx.show(ctx.admin.tenants.get(tenant))


_ROLES = click.option(
    "-r",
    "--admin-roles",
    multiple=True,
    help="admin roles, comma-separated (repeatable)",
)
_CLUSTERS = click.option(
    "-c",
    "--allowed-clusters",
    multiple=True,
    help="allowed clusters, comma-separated (repeatable); default on create: all",
)


@admin_command(tenants, "create")
@click.argument("tenant")
@_ROLES
@_CLUSTERS
def tenants_create(
    ctx: AdminContext, tenant: str, admin_roles: tuple[str, ...], allowed_clusters: tuple[str, ...]
) -> None:
    """Create a tenant."""
    ctx.admin.tenants.create(tenant, split_values(admin_roles), split_values(allowed_clusters))


@admin_command(tenants, "update")
@click.argument("tenant")
@_ROLES
@_CLUSTERS
def tenants_update(
    ctx: AdminContext, tenant: str, admin_roles: tuple[str, ...], allowed_clusters: tuple[str, ...]
) -> None:
    """Change a tenant's admin roles or allowed clusters (the others are kept)."""
    ctx.admin.tenants.update(tenant, split_values(admin_roles), split_values(allowed_clusters))


@admin_command(tenants, "delete")
@click.argument("tenant")
def tenants_delete(ctx: AdminContext, tenant: str) -> None:
    """Delete a tenant that has no namespaces."""
    ctx.admin.tenants.delete(tenant)
