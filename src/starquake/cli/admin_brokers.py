"""``starquake admin brokers ...`` and ``starquake admin clusters get|create|update``, as
pulsar-admin."""

from __future__ import annotations

from typing import Any

import click

from starquake.cli.admin_group import AdminContext, admin, admin_command, clusters


@admin.group("brokers")
def brokers() -> None:
    """Brokers: their list, health and configuration."""


@admin_command(brokers, "list")
@click.argument("cluster", required=False)
def brokers_list(ctx: AdminContext, cluster: str | None) -> None:
    """List the brokers of CLUSTER (default: the broker's own cluster)."""
    name = cluster or ctx.admin.clusters.list()[0]
    ctx.show(ctx.admin.brokers.list(name), header="broker")


@admin_command(brokers, "leader-broker")
def brokers_leader(ctx: AdminContext) -> None:
    """Show the leader broker."""
    ctx.show(ctx.admin.brokers.leader_broker())


@admin_command(brokers, "healthcheck")
def brokers_healthcheck(ctx: AdminContext) -> None:
    """Check that the broker works: prints ok (exit code 1 and the reason otherwise)."""
    answer = ctx.admin.brokers.healthcheck()
    if ctx.json:
        ctx.show(answer, raw=False)
    else:
        click.echo(answer)


@admin_command(brokers, "get-runtime-config")
def brokers_runtime_config(ctx: AdminContext) -> None:
    """Show every setting as the broker was configured (secrets masked)."""
    ctx.show(ctx.admin.brokers.runtime_config())


@admin_command(brokers, "list-dynamic-config")
def brokers_dynamic_config_names(ctx: AdminContext) -> None:
    """List the settings that can change while the broker runs."""
    ctx.show(ctx.admin.brokers.dynamic_config_names(), header="setting")


@admin_command(brokers, "get-all-dynamic-config")
def brokers_dynamic_config_values(ctx: AdminContext) -> None:
    """Show the settings changed while the broker runs."""
    ctx.show(ctx.admin.brokers.dynamic_config_values())


@admin_command(clusters, "get")
@click.argument("cluster")
def clusters_get(ctx: AdminContext, cluster: str) -> None:
    """Show a cluster's service URLs."""
    ctx.show(ctx.admin.clusters.get(cluster))


_CLUSTER_DATA = [
    click.option("--url", "service_url", default=None, help="the web service URL (http://)"),
    click.option("--url-secure", "service_url_tls", default=None, help="... over TLS"),
    click.option("--broker-url", "broker_url", default=None, help="the service URL (pulsar://)"),
    click.option("--broker-url-secure", "broker_url_tls", default=None, help="... over TLS"),
    click.option("--proxy-url", "proxy_url", default=None, help="a proxy's service URL"),
    click.option(
        "--proxy-protocol",
        type=click.Choice(("SNI",)),
        default=None,
        help="how the proxy routes",
    ),
]
_FIELDS = {
    "service_url": "serviceUrl",
    "service_url_tls": "serviceUrlTls",
    "broker_url": "brokerServiceUrl",
    "broker_url_tls": "brokerServiceUrlTls",
    "proxy_url": "proxyServiceUrl",
    "proxy_protocol": "proxyProtocol",
}


def _cluster_data(options: dict[str, Any]) -> dict[str, Any]:
    """ClusterData (Pulsar's JSON names) of the options given."""
    return {_FIELDS[k]: v for k, v in options.items() if v is not None}


def _with_cluster_data(command: Any) -> Any:
    for option in reversed(_CLUSTER_DATA):
        command = option(command)
    return command


@admin_command(clusters, "create")
@click.argument("cluster")
@_with_cluster_data
def clusters_create(ctx: AdminContext, cluster: str, **options: Any) -> None:
    """Create a cluster with its service URLs."""
    if options["service_url"] is None and options["service_url_tls"] is None:
        raise click.UsageError("give the cluster's --url (or --url-secure)")
    ctx.admin.clusters.create(cluster, _cluster_data(options))


@admin_command(clusters, "update")
@click.argument("cluster")
@_with_cluster_data
def clusters_update(ctx: AdminContext, cluster: str, **options: Any) -> None:
    """Replace a cluster's service URLs."""
    ctx.admin.clusters.update(cluster, _cluster_data(options))
