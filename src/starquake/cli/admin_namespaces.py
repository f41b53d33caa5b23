"""``starquake admin namespaces ...``: namespaces, their retention, message TTL and
deduplication, as pulsar-admin (the other namespace policies are in ``admin_policies``)."""

from __future__ import annotations

import click

from starquake.cli.admin_group import AdminContext, admin_command, namespaces
from starquake.cli.params import relative_seconds


@admin_command(namespaces, "list")
@click.argument("tenant")
def namespaces_list(ctx: AdminContext, tenant: str) -> None:
    """List a tenant's namespaces."""
    ctx.show(ctx.admin.namespaces.list(tenant), header="namespace")


@admin_command(namespaces, "create")
@click.argument("namespace")
def namespaces_create(ctx: AdminContext, namespace: str) -> None:
    """Create a namespace."""
    ctx.admin.namespaces.create(namespace)


@admin_command(namespaces, "delete")
@click.argument("namespace")
def namespaces_delete(ctx: AdminContext, namespace: str) -> None:
    """Delete a namespace that has no topics."""
    ctx.admin.namespaces.delete(namespace)


@admin_command(namespaces, "topics")
@click.argument("namespace")
@click.option(
    "-m",
    "--mode",
    type=click.Choice(("PERSISTENT", "NON_PERSISTENT", "ALL"), case_sensitive=False),
    default="PERSISTENT",
    show_default=True,
)
def namespaces_topics(ctx: AdminContext, namespace: str, mode: str) -> None:
    """List a namespace's topics (partitions one by one)."""
    ctx.show(ctx.admin.namespaces.topics(namespace, mode.upper()), header="topic")


@admin_command(namespaces, "unload")
@click.argument("namespace")
@click.option("-b", "--bundle", default=None, help="only this bundle ({start}_{end})")
def namespaces_unload(ctx: AdminContext, namespace: str, bundle: str | None) -> None:
    """Unload every topic of a namespace, or of one bundle of it (clients reconnect; topics
    load again on use)."""
    ctx.admin.namespaces.unload(namespace, bundle)


@admin_command(namespaces, "split-bundle")
@click.argument("namespace")
@click.option("-b", "--bundle", required=True, help="the bundle to split ({start}_{end})")
@click.option(
    "-san",
    "--split-algorithm-name",
    default="range_equally_divide",
    show_default=True,
    help="how to split (range_equally_divide: at the middle of the range)",
)
def namespaces_split_bundle(
    ctx: AdminContext, namespace: str, bundle: str, split_algorithm_name: str
) -> None:
    """Split a bundle of a namespace in two."""
    ctx.admin.namespaces.split_bundle(namespace, bundle, split_algorithm_name)


@admin_command(namespaces, "clear-backlog")
@click.argument("namespace")
@click.option("-s", "--sub", default=None, help="only the subscriptions of this name")
@click.option("-force", "--force", is_flag=True, help="do not ask for confirmation")
def namespaces_clear_backlog(
    ctx: AdminContext, namespace: str, sub: str | None, force: bool
) -> None:
    """Acknowledge every message of every subscription in a namespace."""
    if not force:
        click.confirm("Are you sure you want to clear the backlog?", abort=True, err=True)
    ctx.admin.namespaces.clear_backlog(namespace, sub)


@admin_command(namespaces, "policies")
@click.argument("namespace")
def namespaces_policies(ctx: AdminContext, namespace: str) -> None:
    """Show a namespace's policies."""
    ctx.show(ctx.admin.namespaces.policies(namespace))


@admin_command(namespaces, "set-retention")
@click.argument("namespace")
@click.option(
    "-s",
    "--size",
    required=True,
    help="retention size: bytes, or with k/M/G/T (10M, 16G); -1 no limit, 0 none",
)
@click.option(
    "-t",
    "--time",
    "time_",
    required=True,
    help="retention time: seconds, or with m/h/d/w (100m, 3h, 2d); -1 no limit, 0 none",
)
def namespaces_set_retention(ctx: AdminContext, namespace: str, size: str, time_: str) -> None:
    """Keep acknowledged messages up to this size and time."""
    from starquake.admin.client import parse_size_mb

    try:
        size_mb = parse_size_mb(size)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    seconds = relative_seconds(time_)
    minutes = -1 if seconds < 0 else seconds // 60
    ctx.admin.namespaces.set_retention(namespace, minutes, size_mb)


@admin_command(namespaces, "get-retention")
@click.argument("namespace")
def namespaces_get_retention(ctx: AdminContext, namespace: str) -> None:
    """Show a namespace's retention."""
    ctx.show(ctx.admin.namespaces.get_retention(namespace))


@admin_command(namespaces, "remove-retention")
@click.argument("namespace")
def namespaces_remove_retention(ctx: AdminContext, namespace: str) -> None:
    """Remove a namespace's retention (the broker's default applies)."""
    ctx.admin.namespaces.remove_retention(namespace)


@admin_command(namespaces, "set-message-ttl")
@click.argument("namespace")
@click.option(
    "-ttl",
    "--messageTTL",
    "--message-ttl",
    "ttl",
    required=True,
    help="time to live of unacknowledged messages: seconds, or with m/h/d (1h)",
)
def namespaces_set_message_ttl(ctx: AdminContext, namespace: str, ttl: str) -> None:
    """Expire messages left unacknowledged longer than this."""
    ctx.admin.namespaces.set_message_ttl(namespace, relative_seconds(ttl))


@admin_command(namespaces, "get-message-ttl")
@click.argument("namespace")
def namespaces_get_message_ttl(ctx: AdminContext, namespace: str) -> None:
    """Show a namespace's message TTL (seconds)."""
    ctx.show(ctx.admin.namespaces.get_message_ttl(namespace))


@admin_command(namespaces, "remove-message-ttl")
@click.argument("namespace")
def namespaces_remove_message_ttl(ctx: AdminContext, namespace: str) -> None:
    """Remove a namespace's message TTL."""
    ctx.admin.namespaces.remove_message_ttl(namespace)


@admin_command(namespaces, "set-deduplication")
@click.argument("namespace")
@click.option("-e", "--enable", is_flag=True, help="turn deduplication on")
@click.option("-d", "--disable", is_flag=True, help="turn deduplication off")
def namespaces_set_deduplication(
    ctx: AdminContext, namespace: str, enable: bool, disable: bool
) -> None:
    """Turn message deduplication on or off for a namespace."""
    if enable == disable:
        raise click.UsageError("give exactly one of --enable and --disable")
    ctx.admin.namespaces.set_deduplication(namespace, enable)


@admin_command(namespaces, "get-deduplication")
@click.argument("namespace")
def namespaces_get_deduplication(ctx: AdminContext, namespace: str) -> None:
    """Show whether deduplication is on for a namespace (null: the broker's default)."""
    ctx.show(ctx.admin.namespaces.get_deduplication(namespace))


@admin_command(namespaces, "remove-deduplication")
@click.argument("namespace")
def namespaces_remove_deduplication(ctx: AdminContext, namespace: str) -> None:
    """Remove a namespace's deduplication setting (the broker's default applies)."""
    ctx.admin.namespaces.remove_deduplication(namespace)
