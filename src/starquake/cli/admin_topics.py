"""``starquake admin topics ...``: topics and partitioned topics, their stats, termination and
unloading, as pulsar-admin (subscriptions, permissions, policies, compaction and schemas are in
the other ``admin_*`` modules)."""

from __future__ import annotations

import click

from starquake.cli.admin_group import FORCE, AdminContext, admin_command, topics
from starquake.cli.params import check_topic


@admin_command(topics, "list")
@click.argument("namespace")
def topics_list(ctx: AdminContext, namespace: str) -> None:
    """List a namespace's topics (partitions one by one)."""
    ctx.show(ctx.admin.topics.list(namespace), raw=False, header="topic")


@admin_command(topics, "list-partitioned-topics")
@click.argument("namespace")
def topics_list_partitioned(ctx: AdminContext, namespace: str) -> None:
    """List a namespace's partitioned topics."""
    ctx.show(ctx.admin.topics.list_partitioned(namespace), raw=False, header="topic")


@admin_command(topics, "create")
@click.argument("topic")
def topics_create(ctx: AdminContext, topic: str) -> None:
    """Create a non-partitioned topic."""
    ctx.admin.topics.create(check_topic(topic))


@admin_command(topics, "delete")
@click.argument("topic")
@FORCE
def topics_delete(ctx: AdminContext, topic: str, force: bool) -> None:
    """Delete a non-partitioned topic."""
    ctx.admin.topics.delete(check_topic(topic), force)


_PARTITIONS = click.option(
    "-p", "--partitions", type=click.IntRange(min=1), required=True, help="number of partitions"
)


@admin_command(topics, "create-partitioned-topic")
@click.argument("topic")
@_PARTITIONS
def topics_create_partitioned(ctx: AdminContext, topic: str, partitions: int) -> None:
    """Create a partitioned topic."""
    ctx.admin.topics.create_partitioned(check_topic(topic), partitions)


@admin_command(topics, "update-partitioned-topic")
@click.argument("topic")
@_PARTITIONS
def topics_update_partitioned(ctx: AdminContext, topic: str, partitions: int) -> None:
    """Raise the number of partitions of a partitioned topic."""
    ctx.admin.topics.update_partitioned(check_topic(topic), partitions)


@admin_command(topics, "get-partitioned-topic-metadata")
@click.argument("topic")
def topics_partitioned_metadata(ctx: AdminContext, topic: str) -> None:
    """Show the number of partitions (0: not partitioned)."""
    ctx.show(ctx.admin.topics.partitioned_metadata(check_topic(topic)))


@admin_command(topics, "delete-partitioned-topic")
@click.argument("topic")
@FORCE
def topics_delete_partitioned(ctx: AdminContext, topic: str, force: bool) -> None:
    """Delete a partitioned topic and its partitions."""
    ctx.admin.topics.delete_partitioned(check_topic(topic), force)


@admin_command(topics, "stats")
@click.argument("topic")
@click.option(
    "-gpb",
    "--get-precise-backlog",
    is_flag=True,
    help="count backlogs exactly (Starquake always does)",
)
@click.option(
    "-etb",
    "--get-earliest-time-in-backlog",
    is_flag=True,
    help="the publish time of each subscription's first unacknowledged message",
)
def topics_stats(
    ctx: AdminContext, topic: str, get_precise_backlog: bool, get_earliest_time_in_backlog: bool
) -> None:
    """Show a topic's stats (rates, counters, publishers, subscriptions)."""
    name = check_topic(topic)
    ctx.show(ctx.admin.topics.stats(name, get_precise_backlog, get_earliest_time_in_backlog))


@admin_command(topics, "stats-internal")
@click.argument("topic")
def topics_stats_internal(ctx: AdminContext, topic: str) -> None:
    """Show a topic's internal stats (ledgers, cursors)."""
    ctx.show(ctx.admin.topics.internal_stats(check_topic(topic)))


@admin_command(topics, "partitioned-stats")
@click.argument("topic")
@click.option(
    "--per-partition/--no-per-partition", default=True, help="include each partition's stats"
)
def topics_partitioned_stats(ctx: AdminContext, topic: str, per_partition: bool) -> None:
    """Show a partitioned topic's stats, summed over its partitions."""
    ctx.show(ctx.admin.topics.partitioned_stats(check_topic(topic), per_partition))


@admin_command(topics, "last-message-id")
@click.argument("topic")
def topics_last_message_id(ctx: AdminContext, topic: str) -> None:
    """Show the id of a topic's last message."""
    ctx.show(ctx.admin.topics.last_message_id(check_topic(topic)))


@admin_command(topics, "terminate")
@click.argument("topic")
def topics_terminate(ctx: AdminContext, topic: str) -> None:
    """Terminate a topic: no more messages may be published to it."""
    last = ctx.admin.topics.terminate(check_topic(topic))
    if ctx.json:
        ctx.show(last)
    elif isinstance(last, dict) and "ledgerId" in last:
        click.echo(f"Topic terminated; last message id: {last['ledgerId']}:{last['entryId']}")
    else:
        click.echo("Topic terminated")


@admin_command(topics, "unload")
@click.argument("topic")
def topics_unload(ctx: AdminContext, topic: str) -> None:
    """Unload a topic (its clients reconnect; it loads again on use)."""
    ctx.admin.topics.unload(check_topic(topic))
