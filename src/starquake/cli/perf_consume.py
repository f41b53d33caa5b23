"""``starquake perf consume``: read and acknowledge, as ``pulsar-perf consume``, measuring each
message's end-to-end latency from its publish time.

Subscriptions as pulsar-perf names them: ``-ss`` lists them (default ``sub``), ``-ns`` asks for
that many per topic (``-ss sub -ns 3``: ``sub-0``, ``sub-1``, ``sub-2``), ``-n`` consumers each
(one only on an Exclusive subscription).
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from starquake.cli.client_commands import consumer_type_of, subscription_options
from starquake.cli.params import count_option, split_values
from starquake.cli.perf_meter import Meter
from starquake.cli.perf_run import (
    RunSettings,
    count_received,
    guard,
    measure,
    num_messages_option,
    numbered,
    run_options,
    run_settings,
    take_until_stopped,
)
from starquake.cli.security_options import security_options
from starquake.cli.strict_options import StrictCommand

if TYPE_CHECKING:
    from starquake.client.asyncio import Consumer


@dataclass(frozen=True, kw_only=True)
class ConsumeSettings(RunSettings):
    """The settings of ``perf consume``."""

    subscriptions: list[str]
    subscription_type: str
    position: str
    consumers_per_subscription: int
    receiver_queue_size: int
    receiver_queue_size_across_partitions: int
    rate: float


def _subscriptions(
    listed: tuple[str, ...], subscriber_name: str | None, count: int | None
) -> list[str]:
    names = split_values(listed) or [subscriber_name or "sub"]
    return numbered(names, count, "-", "subscriptions")


@click.command("consume", cls=StrictCommand)
@click.argument("topics", nargs=-1, required=True)
@click.option(
    "-ss",
    "--subscriptions",
    multiple=True,
    help="subscriptions to consume, comma-separated (repeatable; default: sub)",
)
@click.option(
    "-ns",
    "--num-subscriptions",
    type=click.IntRange(min=1),
    default=None,
    help="subscriptions per topic, numbered from one -ss name (default: as many as -ss lists)",
)
@click.option(
    "-s",
    "--subscriber-name",
    "--subscription",
    default=None,
    help="one subscription's name (older pulsar-perf's option; -ss takes precedence)",
)
@subscription_options(("-st", "--subscription-type"), ("-sp", "--subscription-position"))
@count_option("-n", "--num-consumers", default=1, help="consumers per subscription")
@count_option("-q", "--receiver-queue-size", default=1000)
@count_option(
    "-p",
    "--receiver-queue-size-across-partitions",
    default=50000,
    help="receiver queue of a consumer of a partitioned topic, over its partitions",
)
@click.option(
    "-r",
    "--rate",
    type=click.FloatRange(min=0),
    default=0,
    help="receive at most this many messages per second (0: as fast as possible)",
)
@num_messages_option("stop after this many messages in total (0: no limit)")
@run_options
@security_options
@click.pass_context
def consume(
    ctx: click.Context,
    /,
    topics: tuple[str, ...],
    subscriptions: tuple[str, ...],
    num_subscriptions: int | None,
    subscriber_name: str | None,
    subscription_type: str,
    subscription_position: str,
    num_consumers: int,
    receiver_queue_size: int,
    receiver_queue_size_across_partitions: int,
    rate: float,
    num_messages: int,
    as_json: bool,
    **options: Any,
) -> None:
    """Consume TOPICS and report throughput and end-to-end latency (from publish time)."""
    if subscription_type.lower() == "exclusive" and num_consumers > 1:
        raise click.UsageError("only one consumer (-n 1) may use an Exclusive subscription")
    names = _subscriptions(subscriptions, subscriber_name, num_subscriptions)
    settings = ConsumeSettings(
        **run_settings(ctx, options, topics, num_messages),
        subscriptions=names,
        subscription_type=subscription_type,
        position=subscription_position,
        consumers_per_subscription=num_consumers,
        receiver_queue_size=receiver_queue_size,
        receiver_queue_size_across_partitions=receiver_queue_size_across_partitions,
        rate=rate,
    )
    shown = {
        "topics": settings.topics,
        "subscriptions": settings.subscriptions,
        "subscription_type": settings.subscription_type,
        "consumers": len(settings.topics) * len(names) * settings.consumers_per_subscription,
    }
    names_ = ("consume", "Consumed")
    measure(functools.partial(_consume, settings), settings, names_, shown, as_json)


async def _subscribe_all(settings: ConsumeSettings, client: Any) -> list[Consumer]:
    from starquake.client import InitialPosition

    consumer_type = consumer_type_of(settings.subscription_type)
    position = getattr(InitialPosition, settings.position.capitalize())
    consumers: list[Consumer] = []
    for topic in settings.topics:
        for subscription in settings.subscriptions:
            for _ in range(settings.consumers_per_subscription):
                consumer = await guard(
                    settings.url,
                    client.subscribe(
                        topic,
                        subscription,
                        consumer_type=consumer_type,
                        initial_position=position,
                        receiver_queue_size=settings.receiver_queue_size,
                        max_total_receiver_queue_size_across_partitions=(
                            settings.receiver_queue_size_across_partitions
                        ),
                    ),
                )
                consumers.append(consumer)
    return consumers


async def _consume(settings: ConsumeSettings, meter: Meter, stop: asyncio.Event) -> None:
    client = settings.client()
    try:
        consumers = await _subscribe_all(settings, client)

        async def take(consumer: Consumer) -> None:
            msg = await consumer.receive()
            count_received(meter, msg)
            await consumer.acknowledge(msg)

        await take_until_stopped(settings, meter, stop, consumers, take, settings.rate, "Consumed")
    finally:
        await client.close()
