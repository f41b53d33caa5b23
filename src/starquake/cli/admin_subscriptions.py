"""``starquake admin topics ...`` on subscriptions: list, create, delete, skip, reset, expire
and peek, as pulsar-admin."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import click

from starquake.cli.admin_group import (
    FORCE,
    SUBSCRIPTION,
    AdminContext,
    admin_command,
    topics,
)
from starquake.cli.output import hex_dump, payload_fields, print_json_line, utf8_or_none
from starquake.cli.params import check_topic, message_id_value, relative_seconds

if TYPE_CHECKING:
    from starquake.admin.client import PeekedMessage


@admin_command(topics, "subscriptions")
@click.argument("topic")
def topics_subscriptions(ctx: AdminContext, topic: str) -> None:
    """List a topic's subscriptions."""
    ctx.show(ctx.admin.subscriptions.list(check_topic(topic)), header="subscription")


@admin_command(topics, "create-subscription")
@click.argument("topic")
@SUBSCRIPTION
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
    position = message_id_value(message_id)
    ctx.admin.subscriptions.create(check_topic(topic), subscription, position)


@admin_command(topics, "unsubscribe")
@click.argument("topic")
@SUBSCRIPTION
@FORCE
def topics_unsubscribe(ctx: AdminContext, topic: str, subscription: str, force: bool) -> None:
    """Delete a subscription."""
    ctx.admin.subscriptions.delete(check_topic(topic), subscription, force)


@admin_command(topics, "skip")
@click.argument("topic")
@SUBSCRIPTION
@click.option("-n", "--count", type=click.IntRange(min=1), required=True, help="messages to skip")
def topics_skip(ctx: AdminContext, topic: str, subscription: str, count: int) -> None:
    """Skip (acknowledge) the next N messages of a subscription."""
    ctx.admin.subscriptions.skip(check_topic(topic), subscription, count)


@admin_command(topics, "clear-backlog")
@click.argument("topic")
@SUBSCRIPTION
def topics_clear_backlog(ctx: AdminContext, topic: str, subscription: str) -> None:
    """Skip every message of a subscription's backlog."""
    ctx.admin.subscriptions.clear_backlog(check_topic(topic), subscription)


@admin_command(topics, "reset-cursor")
@click.argument("topic")
@SUBSCRIPTION
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
    name = check_topic(topic)
    if message_id is not None:
        position = message_id_value(message_id)
        ctx.admin.subscriptions.reset_cursor_to_message_id(name, subscription, position)
        return
    seconds = relative_seconds(time_ or "", "--time")
    timestamp = int(time.time() * 1000) - seconds * 1000
    ctx.admin.subscriptions.reset_cursor_to_time(name, subscription, timestamp)


@admin_command(topics, "expire-messages")
@click.argument("topic")
@SUBSCRIPTION
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
    seconds = relative_seconds(expire_time, "--expireTime")
    ctx.admin.subscriptions.expire_messages(check_topic(topic), subscription, seconds)


@admin_command(topics, "peek-messages")
@click.argument("topic")
@SUBSCRIPTION
@click.option(
    "-n", "--count", type=click.IntRange(min=1), default=1, show_default=True, help="messages"
)
def topics_peek_messages(ctx: AdminContext, topic: str, subscription: str, count: int) -> None:
    """Show the next messages of a subscription without consuming them."""
    messages = ctx.admin.subscriptions.peek(check_topic(topic), subscription, count)
    if ctx.json:
        for message in messages:
            print_json_line(peeked_json(message))
        return
    for index, message in enumerate(messages):
        if index:
            click.echo()
        print_peeked(message)


def peeked_json(message: PeekedMessage) -> dict[str, Any]:
    return {
        "messageId": message.message_id,
        "properties": message.properties,
        "metadata": message.metadata,
        **payload_fields(message.payload),
    }


def print_peeked(message: PeekedMessage) -> None:
    """The id, the metadata, then the payload as text, or as a hex dump when it is not
    printable UTF-8."""
    click.echo(f"Message ID: {message.message_id}")
    for key, value in message.metadata.items():
        click.echo(f"{key}: {value}")
    if message.properties:
        props = ", ".join(f"{k}={v}" for k, v in message.properties.items())
        click.echo(f"Properties: {props}")
    text = utf8_or_none(message.payload)
    if text is not None and all(c.isprintable() or c in "\t\r\n" for c in text):
        click.echo(text)
        return
    for line in hex_dump(message.payload):
        click.echo(line)
