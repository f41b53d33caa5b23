"""``starquake admin``: Pulsar's admin REST API from the command line, as ``pulsar-admin``.

Output is a table on a terminal and the broker's JSON otherwise (``--output json|table``
overrides). Commands that change something print nothing when they succeed.
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from starquake.cli.output import (
    OUTPUT_CHOICES,
    Tables,
    admin_errors,
    default_output,
    print_json_line,
    print_raw_json,
)
from starquake.cli.security_options import security_args, security_options

if TYPE_CHECKING:
    from starquake.admin.client import PeekedMessage, PulsarAdmin

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_ADMIN_URL = "http://localhost:8080"


class AdminContext:
    """The admin URL and output format given to ``starquake admin``."""

    def __init__(
        self, url: str, output: str | None, admin_args: dict[str, Any] | None = None
    ) -> None:
        self.url = url
        self.output = output
        self.admin_args: dict[str, Any] = dict(admin_args or {})
        """Keyword arguments of PulsarAdmin (TLS settings, ...)."""
        self._admin: PulsarAdmin | None = None

    @property
    def admin(self) -> PulsarAdmin:
        if self._admin is None:
            from starquake.admin.client import PulsarAdmin

            with admin_errors():
                self._admin = PulsarAdmin(self.url, **self.admin_args)
        return self._admin

    @property
    def json(self) -> bool:
        return (self.output or default_output()) == "json"

    def show(self, value: Any, *, raw: bool = True, header: str = "name") -> None:
        """Print a result: in JSON the broker's body (``raw``) or ``value`` encoded; else a
        table (lists of names under ``header``)."""
        if self.json:
            last = self.admin.last_response
            if raw and last is not None:
                print_raw_json(last.body)
            else:
                print_json_line(value)
            return
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            Tables().names(header, value)
        else:
            Tables().value(value)


def _admin_command(group: click.Group, name: str, **settings: Any) -> Callable[[F], F]:
    """``group.command(name)`` taking ``--output`` too, running with the admin context as its
    first argument and the admin client's errors turned into exit codes."""

    def decorate(func: F) -> F:
        def run(*args: Any, output: str | None, **kwargs: Any) -> Any:
            obj = click.get_current_context().find_object(AdminContext)
            assert obj is not None
            if output is not None:
                obj.output = output
            with admin_errors():
                return func(obj, *args, **kwargs)

        functools.update_wrapper(run, func)
        option = click.option(
            "--output",
            type=click.Choice(OUTPUT_CHOICES),
            default=None,
            help="json (the broker's answer) or table; default: table on a terminal",
        )
        group.command(name, **settings)(option(run))
        return func

    return decorate


def _split(values: tuple[str, ...]) -> list[str] | None:
    """Repeatable, comma-separated option values as one list (None when not given)."""
    if not values:
        return None
    return [item.strip() for value in values for item in value.split(",") if item.strip()]


@click.group("admin")
@click.option(
    "--admin-url",
    envvar="STARQUAKE_ADMIN_URL",
    default=DEFAULT_ADMIN_URL,
    show_default=True,
    help="the broker's HTTP or HTTPS URL (also $STARQUAKE_ADMIN_URL)",
)
@click.option(
    "--output",
    type=click.Choice(OUTPUT_CHOICES),
    default=None,
    help="json (the broker's answer, for scripts) or table; default: table on a terminal",
)
@security_options
@click.pass_context
def admin(ctx: click.Context, admin_url: str, output: str | None) -> None:
    """Administer a broker over its admin REST API (as pulsar-admin)."""
    ctx.obj = AdminContext(admin_url, output, security_args(ctx))


# --- clusters ----------------------------------------------------------------------------------


@admin.group("clusters")
def clusters() -> None:
    """Clusters."""


@_admin_command(clusters, "list")
def clusters_list(ctx: AdminContext) -> None:
    """List the clusters."""
    ctx.show(ctx.admin.clusters.list(), header="cluster")


# --- tenants -----------------------------------------------------------------------------------


@admin.group("tenants")
def tenants() -> None:
    """Tenants."""


@_admin_command(tenants, "list")
def tenants_list(ctx: AdminContext) -> None:
    """List the tenants."""
    ctx.show(ctx.admin.tenants.list(), header="tenant")


@_admin_command(tenants, "get")
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


@_admin_command(tenants, "create")
@click.argument("tenant")
@_ROLES
@_CLUSTERS
def tenants_create(
    ctx: AdminContext, tenant: str, admin_roles: tuple[str, ...], allowed_clusters: tuple[str, ...]
) -> None:
    """Create a tenant."""
    ctx.admin.tenants.create(tenant, _split(admin_roles), _split(allowed_clusters))


@_admin_command(tenants, "update")
@click.argument("tenant")
@_ROLES
@_CLUSTERS
def tenants_update(
    ctx: AdminContext, tenant: str, admin_roles: tuple[str, ...], allowed_clusters: tuple[str, ...]
) -> None:
    """Change a tenant's admin roles or allowed clusters (the others are kept)."""
    ctx.admin.tenants.update(tenant, _split(admin_roles), _split(allowed_clusters))


@_admin_command(tenants, "delete")
@click.argument("tenant")
def tenants_delete(ctx: AdminContext, tenant: str) -> None:
    """Delete a tenant that has no namespaces."""
    ctx.admin.tenants.delete(tenant)


# --- namespaces --------------------------------------------------------------------------------


@admin.group("namespaces")
def namespaces() -> None:
    """Namespaces (tenant/namespace) and their policies."""


@_admin_command(namespaces, "list")
@click.argument("tenant")
def namespaces_list(ctx: AdminContext, tenant: str) -> None:
    """List a tenant's namespaces."""
    ctx.show(ctx.admin.namespaces.list(tenant), header="namespace")


@_admin_command(namespaces, "create")
@click.argument("namespace")
def namespaces_create(ctx: AdminContext, namespace: str) -> None:
    """Create a namespace."""
    ctx.admin.namespaces.create(namespace)


@_admin_command(namespaces, "delete")
@click.argument("namespace")
def namespaces_delete(ctx: AdminContext, namespace: str) -> None:
    """Delete a namespace that has no topics."""
    ctx.admin.namespaces.delete(namespace)


@_admin_command(namespaces, "policies")
@click.argument("namespace")
def namespaces_policies(ctx: AdminContext, namespace: str) -> None:
    """Show a namespace's policies."""
    ctx.show(ctx.admin.namespaces.policies(namespace))


@_admin_command(namespaces, "set-retention")
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
    from starquake.admin.client import parse_relative_seconds, parse_size_mb

    try:
        size_mb = parse_size_mb(size)
        seconds = parse_relative_seconds(time_)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    minutes = -1 if seconds < 0 else seconds // 60
    ctx.admin.namespaces.set_retention(namespace, minutes, size_mb)


@_admin_command(namespaces, "get-retention")
@click.argument("namespace")
def namespaces_get_retention(ctx: AdminContext, namespace: str) -> None:
    """Show a namespace's retention."""
    ctx.show(ctx.admin.namespaces.get_retention(namespace))


@_admin_command(namespaces, "remove-retention")
@click.argument("namespace")
def namespaces_remove_retention(ctx: AdminContext, namespace: str) -> None:
    """Remove a namespace's retention (the broker's default applies)."""
    ctx.admin.namespaces.remove_retention(namespace)


@_admin_command(namespaces, "set-message-ttl")
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
    from starquake.admin.client import parse_relative_seconds

    try:
        seconds = parse_relative_seconds(ttl)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    ctx.admin.namespaces.set_message_ttl(namespace, seconds)


@_admin_command(namespaces, "get-message-ttl")
@click.argument("namespace")
def namespaces_get_message_ttl(ctx: AdminContext, namespace: str) -> None:
    """Show a namespace's message TTL (seconds)."""
    ctx.show(ctx.admin.namespaces.get_message_ttl(namespace))


@_admin_command(namespaces, "remove-message-ttl")
@click.argument("namespace")
def namespaces_remove_message_ttl(ctx: AdminContext, namespace: str) -> None:
    """Remove a namespace's message TTL."""
    ctx.admin.namespaces.remove_message_ttl(namespace)


@_admin_command(namespaces, "set-deduplication")
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


@_admin_command(namespaces, "get-deduplication")
@click.argument("namespace")
def namespaces_get_deduplication(ctx: AdminContext, namespace: str) -> None:
    """Show whether deduplication is on for a namespace (null: the broker's default)."""
    ctx.show(ctx.admin.namespaces.get_deduplication(namespace))


@_admin_command(namespaces, "remove-deduplication")
@click.argument("namespace")
def namespaces_remove_deduplication(ctx: AdminContext, namespace: str) -> None:
    """Remove a namespace's deduplication setting (the broker's default applies)."""
    ctx.admin.namespaces.remove_deduplication(namespace)


# --- topics ------------------------------------------------------------------------------------


@admin.group("topics")
def topics() -> None:
    """Topics and their subscriptions.

    TOPIC takes Pulsar's short forms: my-topic is persistent://public/default/my-topic,
    tenant/ns/my-topic is persistent://tenant/ns/my-topic.
    """


_SUBSCRIPTION = click.option("-s", "--subscription", required=True, help="subscription name")
_FORCE = click.option("-f", "--force", is_flag=True, help="even with producers or consumers")


def _check_topic(topic: str) -> str:
    from starquake.admin.client import topic_ref

    try:
        return str(topic_ref(topic))
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="TOPIC") from None


def _message_id(text: str) -> tuple[int, int]:
    from starquake.admin.client import parse_message_id

    try:
        return parse_message_id(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--messageId") from None


@_admin_command(topics, "list")
@click.argument("namespace")
def topics_list(ctx: AdminContext, namespace: str) -> None:
    """List a namespace's topics (partitions one by one)."""
    ctx.show(ctx.admin.topics.list(namespace), raw=False, header="topic")


@_admin_command(topics, "list-partitioned-topics")
@click.argument("namespace")
def topics_list_partitioned(ctx: AdminContext, namespace: str) -> None:
    """List a namespace's partitioned topics."""
    ctx.show(ctx.admin.topics.list_partitioned(namespace), raw=False, header="topic")


@_admin_command(topics, "create")
@click.argument("topic")
def topics_create(ctx: AdminContext, topic: str) -> None:
    """Create a non-partitioned topic."""
    ctx.admin.topics.create(_check_topic(topic))


@_admin_command(topics, "delete")
@click.argument("topic")
@_FORCE
def topics_delete(ctx: AdminContext, topic: str, force: bool) -> None:
    """Delete a non-partitioned topic."""
    ctx.admin.topics.delete(_check_topic(topic), force)


_PARTITIONS = click.option(
    "-p", "--partitions", type=click.IntRange(min=1), required=True, help="number of partitions"
)


@_admin_command(topics, "create-partitioned-topic")
@click.argument("topic")
@_PARTITIONS
def topics_create_partitioned(ctx: AdminContext, topic: str, partitions: int) -> None:
    """Create a partitioned topic."""
    ctx.admin.topics.create_partitioned(_check_topic(topic), partitions)


@_admin_command(topics, "update-partitioned-topic")
@click.argument("topic")
@_PARTITIONS
def topics_update_partitioned(ctx: AdminContext, topic: str, partitions: int) -> None:
    """Raise the number of partitions of a partitioned topic."""
    ctx.admin.topics.update_partitioned(_check_topic(topic), partitions)


@_admin_command(topics, "get-partitioned-topic-metadata")
@click.argument("topic")
def topics_partitioned_metadata(ctx: AdminContext, topic: str) -> None:
    """Show the number of partitions (0: not partitioned)."""
    ctx.show(ctx.admin.topics.partitioned_metadata(_check_topic(topic)))


@_admin_command(topics, "delete-partitioned-topic")
@click.argument("topic")
@_FORCE
def topics_delete_partitioned(ctx: AdminContext, topic: str, force: bool) -> None:
    """Delete a partitioned topic and its partitions."""
    ctx.admin.topics.delete_partitioned(_check_topic(topic), force)


@_admin_command(topics, "stats")
@click.argument("topic")
def topics_stats(ctx: AdminContext, topic: str) -> None:
    """Show a topic's stats (rates, counters, publishers, subscriptions)."""
    ctx.show(ctx.admin.topics.stats(_check_topic(topic)))


@_admin_command(topics, "stats-internal")
@click.argument("topic")
def topics_stats_internal(ctx: AdminContext, topic: str) -> None:
    """Show a topic's internal stats (ledgers, cursors)."""
    ctx.show(ctx.admin.topics.internal_stats(_check_topic(topic)))


@_admin_command(topics, "partitioned-stats")
@click.argument("topic")
@click.option(
    "--per-partition/--no-per-partition", default=True, help="include each partition's stats"
)
def topics_partitioned_stats(ctx: AdminContext, topic: str, per_partition: bool) -> None:
    """Show a partitioned topic's stats, summed over its partitions."""
    ctx.show(ctx.admin.topics.partitioned_stats(_check_topic(topic), per_partition))


@_admin_command(topics, "last-message-id")
@click.argument("topic")
def topics_last_message_id(ctx: AdminContext, topic: str) -> None:
    """Show the id of a topic's last message."""
    ctx.show(ctx.admin.topics.last_message_id(_check_topic(topic)))


@_admin_command(topics, "terminate")
@click.argument("topic")
def topics_terminate(ctx: AdminContext, topic: str) -> None:
    """Terminate a topic: no more messages may be published to it."""
    last = ctx.admin.topics.terminate(_check_topic(topic))
    if ctx.json:
        ctx.show(last)
    elif isinstance(last, dict) and "ledgerId" in last:
        click.echo(f"Topic terminated; last message id: {last['ledgerId']}:{last['entryId']}")
    else:
        click.echo("Topic terminated")


@_admin_command(topics, "unload")
@click.argument("topic")
def topics_unload(ctx: AdminContext, topic: str) -> None:
    """Unload a topic (its clients reconnect; it loads again on use)."""
    ctx.admin.topics.unload(_check_topic(topic))


@_admin_command(topics, "subscriptions")
@click.argument("topic")
def topics_subscriptions(ctx: AdminContext, topic: str) -> None:
    """List a topic's subscriptions."""
    ctx.show(ctx.admin.subscriptions.list(_check_topic(topic)), header="subscription")


@_admin_command(topics, "create-subscription")
@click.argument("topic")
@_SUBSCRIPTION
@click.option(
    "-m",
    "--messageId",
    "--message-id",
    "message_id",
    default="latest",
    show_default=True,
    help="where the subscription starts: latest, earliest or LEDGER:ENTRY",
)
def topics_create_subscription(
    ctx: AdminContext, topic: str, subscription: str, message_id: str
) -> None:
    """Create a durable subscription."""
    position = _message_id(message_id)
    ctx.admin.subscriptions.create(_check_topic(topic), subscription, position)


@_admin_command(topics, "unsubscribe")
@click.argument("topic")
@_SUBSCRIPTION
@_FORCE
def topics_unsubscribe(ctx: AdminContext, topic: str, subscription: str, force: bool) -> None:
    """Delete a subscription."""
    ctx.admin.subscriptions.delete(_check_topic(topic), subscription, force)


@_admin_command(topics, "skip")
@click.argument("topic")
@_SUBSCRIPTION
@click.option("-n", "--count", type=click.IntRange(min=1), required=True, help="messages to skip")
def topics_skip(ctx: AdminContext, topic: str, subscription: str, count: int) -> None:
    """Skip (acknowledge) the next N messages of a subscription."""
    ctx.admin.subscriptions.skip(_check_topic(topic), subscription, count)


@_admin_command(topics, "clear-backlog")
@click.argument("topic")
@_SUBSCRIPTION
def topics_clear_backlog(ctx: AdminContext, topic: str, subscription: str) -> None:
    """Skip every message of a subscription's backlog."""
    ctx.admin.subscriptions.clear_backlog(_check_topic(topic), subscription)


@_admin_command(topics, "reset-cursor")
@click.argument("topic")
@_SUBSCRIPTION
@click.option("-t", "--time", "time_", help="go back this far: seconds, or with m/h/d/w (10m, 1h)")
@click.option(
    "-m", "--messageId", "--message-id", "message_id", help="go to LEDGER:ENTRY (or earliest)"
)
def topics_reset_cursor(
    ctx: AdminContext, topic: str, subscription: str, time_: str | None, message_id: str | None
) -> None:
    """Move a subscription back (or forward) to a time or a message id."""
    if (time_ is None) == (message_id is None):
        raise click.UsageError("give exactly one of --time and --messageId")
    name = _check_topic(topic)
    if message_id is not None:
        position = _message_id(message_id)
        ctx.admin.subscriptions.reset_cursor_to_message_id(name, subscription, position)
        return
    from starquake.admin.client import parse_relative_seconds

    try:
        seconds = parse_relative_seconds(time_ or "")
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--time") from None
    timestamp = int(time.time() * 1000) - seconds * 1000
    ctx.admin.subscriptions.reset_cursor_to_time(name, subscription, timestamp)


@_admin_command(topics, "expire-messages")
@click.argument("topic")
@_SUBSCRIPTION
@click.option(
    "-t",
    "--expireTime",
    "--expire-time",
    "expire_time",
    required=True,
    help="acknowledge messages older than this: seconds, or with m/h/d (10m)",
)
def topics_expire_messages(
    ctx: AdminContext, topic: str, subscription: str, expire_time: str
) -> None:
    """Acknowledge a subscription's messages older than the given time."""
    from starquake.admin.client import parse_relative_seconds

    try:
        seconds = parse_relative_seconds(expire_time)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--expireTime") from None
    ctx.admin.subscriptions.expire_messages(_check_topic(topic), subscription, seconds)


@_admin_command(topics, "peek-messages")
@click.argument("topic")
@_SUBSCRIPTION
@click.option(
    "-n", "--count", type=click.IntRange(min=1), default=1, show_default=True, help="messages"
)
def topics_peek_messages(ctx: AdminContext, topic: str, subscription: str, count: int) -> None:
    """Show the next messages of a subscription without consuming them."""
    messages = ctx.admin.subscriptions.peek(_check_topic(topic), subscription, count)
    if ctx.json:
        for message in messages:
            print_json_line(_peeked_json(message))
        return
    for index, message in enumerate(messages):
        if index:
            click.echo()
        _print_peeked(message)


def _peeked_json(message: PeekedMessage) -> dict[str, Any]:
    try:
        text: str | None = message.payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    return {
        "messageId": message.message_id,
        "properties": message.properties,
        "metadata": message.metadata,
        "payload": text,
        "payloadBase64": base64.b64encode(message.payload).decode("ascii"),
    }


def _print_peeked(message: PeekedMessage) -> None:
    """The id, the metadata, then the payload as text, or as a hex dump when it is not
    printable UTF-8."""
    click.echo(f"Message ID: {message.message_id}")
    for key, value in message.metadata.items():
        click.echo(f"{key}: {value}")
    if message.properties:
        props = ", ".join(f"{k}={v}" for k, v in message.properties.items())
        click.echo(f"Properties: {props}")
    try:
        text: str | None = message.payload.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and all(c.isprintable() or c in "\t\r\n" for c in text):
        click.echo(text)
        return
    payload = message.payload
    for offset in range(0, len(payload), 16):
        chunk = payload[offset : offset + 16]
        hexes = " ".join(f"{b:02x}" for b in chunk)
        chars = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        click.echo(f"{offset:08x}  {hexes:<47}  |{chars}|")


# The schemas group, the policy and the compaction commands live in their own modules;
# importing them adds them to ``admin``.
from starquake.cli import (  # noqa: E402, F401
    admin_compaction,
    admin_permissions,
    admin_policies,
    admin_schemas,
)
