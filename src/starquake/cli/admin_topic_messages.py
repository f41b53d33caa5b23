"""``starquake admin topics ...`` on a topic's messages and brokers, as pulsar-admin: lookups,
messages by id, time or position, truncation, expiry on every subscription, and the internal
stats of a partitioned topic."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from starquake.cli.admin_group import AdminContext, admin_command, topics
from starquake.cli.admin_subscriptions import peeked_json, print_peeked
from starquake.cli.output import print_json_line
from starquake.cli.params import check_topic, relative_seconds

if TYPE_CHECKING:
    from starquake.admin.client import PeekedMessage

_FRACTION = re.compile(r"(\.\d{6})\d+")


def epoch_millis(text: str) -> int:
    """An ISO 8601 date-time (``2021-06-28T16:53:08Z``, ``...08.123456789+08:00``; UTC when
    it has no offset) in milliseconds since the epoch; a usage error if malformed."""
    try:
        moment = datetime.fromisoformat(_FRACTION.sub(r"\1", text.strip()))
    except ValueError:
        raise click.BadParameter(
            f"{text!r} is not a date-time such as 2021-06-28T16:53:08Z", param_hint="--datetime"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _show(ctx: AdminContext, message: PeekedMessage) -> None:
    """A message as peek-messages shows one."""
    if ctx.json:
        print_json_line(peeked_json(message))
    else:
        print_peeked(message)


@admin_command(topics, "lookup")
@click.argument("topic")
def topics_lookup(ctx: AdminContext, topic: str) -> None:
    """Show the service URL of the broker serving TOPIC."""
    answer = ctx.admin.topics.lookup(check_topic(topic))
    if ctx.json:
        ctx.show(answer)
    else:
        click.echo(answer.get("brokerUrl") or answer.get("brokerUrlTls"))


@admin_command(topics, "partitioned-lookup")
@click.argument("topic")
def topics_partitioned_lookup(ctx: AdminContext, topic: str) -> None:
    """Show the broker serving each partition of TOPIC."""
    ctx.show(ctx.admin.topics.partitioned_lookup(check_topic(topic)), raw=False)


@admin_command(topics, "get-message-by-id")
@click.argument("topic")
@click.option("-l", "--ledgerId", "ledger_id", type=click.IntRange(min=0), required=True)
@click.option("-e", "--entryId", "entry_id", type=click.IntRange(min=0), required=True)
def topics_get_message_by_id(ctx: AdminContext, topic: str, ledger_id: int, entry_id: int) -> None:
    """Show the message stored at LEDGER:ENTRY."""
    _show(ctx, ctx.admin.topics.message_by_id(check_topic(topic), ledger_id, entry_id))


@admin_command(topics, "get-message-id")
@click.argument("topic")
@click.option(
    "-d",
    "--datetime",
    "when",
    required=True,
    help="ISO 8601 date-time, e.g. 2021-06-28T16:53:08Z: the first message at or after it",
)
def topics_get_message_id(ctx: AdminContext, topic: str, when: str) -> None:
    """Show the id of the first message published at or after a date-time."""
    millis = epoch_millis(when)
    ctx.show(ctx.admin.topics.message_id_by_timestamp(check_topic(topic), millis))


@admin_command(topics, "examine-messages")
@click.argument("topic")
@click.option(
    "-i",
    "--initialPosition",
    "initial_position",
    type=click.Choice(("latest", "earliest"), case_sensitive=False),
    default="latest",
    show_default=True,
    help="count from the latest or from the earliest message",
)
@click.option(
    "-m",
    "--messagePosition",
    "message_position",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="which message from there (1: the latest or the earliest itself)",
)
def topics_examine_messages(
    ctx: AdminContext, topic: str, initial_position: str, message_position: int
) -> None:
    """Show one message by its position from the earliest or the latest."""
    topic = check_topic(topic)
    _show(ctx, ctx.admin.topics.examine_message(topic, initial_position.lower(), message_position))


@admin_command(topics, "truncate")
@click.argument("topic")
def topics_truncate(ctx: AdminContext, topic: str) -> None:
    """Move every subscription to the end and delete the data nothing reads any more."""
    ctx.admin.topics.truncate(check_topic(topic))


@admin_command(topics, "expire-messages-all-subscriptions")
@click.argument("topic")
@click.option(
    "-t",
    "--expireTime",
    "expire_time",
    required=True,
    help="acknowledge messages older than this: seconds, or with m/h/d/w (100m, 3h)",
)
def topics_expire_all(ctx: AdminContext, topic: str, expire_time: str) -> None:
    """Acknowledge, on every subscription, the messages older than --expireTime."""
    seconds = relative_seconds(expire_time, "--expireTime")
    ctx.admin.topics.expire_messages_all_subscriptions(check_topic(topic), seconds)


@admin_command(topics, "partitioned-stats-internal")
@click.argument("topic")
def topics_partitioned_stats_internal(ctx: AdminContext, topic: str) -> None:
    """Show the internal stats (ledgers, cursors) of each partition."""
    ctx.show(ctx.admin.topics.partitioned_internal_stats(check_topic(topic)))
