"""``starquake admin topics compact | compaction-status``: topic compaction, as
``pulsar-admin topics compact`` and ``compaction-status``."""

from __future__ import annotations

import time

import click

from starquake.cli.admin_group import AdminContext, admin_command, topics
from starquake.cli.params import check_topic

_POLL_SECONDS = 1.0


@admin_command(topics, "compact")
@click.argument("topic")
def topics_compact(ctx: AdminContext, topic: str) -> None:
    """Start compacting a topic (every partition of a partitioned topic)."""
    ctx.admin.topics.trigger_compaction(check_topic(topic))


@admin_command(topics, "compaction-status")
@click.argument("topic")
@click.option(
    "-w", "--wait-complete", is_flag=True, help="wait for a running compaction to complete"
)
def topics_compaction_status(ctx: AdminContext, topic: str, wait_complete: bool) -> None:
    """Show the status of the topic's last compaction (exit status 1 if it failed)."""
    name = check_topic(topic)
    status = ctx.admin.topics.compaction_status(name)
    while wait_complete and status.get("status") == "RUNNING":
        time.sleep(_POLL_SECONDS)
        status = ctx.admin.topics.compaction_status(name)
    ctx.show(status)
    if status.get("status") == "ERROR":
        raise click.exceptions.Exit(1)
