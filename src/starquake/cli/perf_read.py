"""``starquake perf read``: read with readers (no subscription), as ``pulsar-perf read``,
measuring each message's end-to-end latency from its publish time; ``-m`` is where each reader
starts: ``earliest`` (the default), ``latest`` or ``LEDGER:ENTRY``."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from starquake.cli.params import count_option
from starquake.cli.params import start_message_id as reader_start
from starquake.cli.perf_meter import Meter
from starquake.cli.perf_run import (
    RunSettings,
    count_received,
    guard,
    measure,
    num_messages_option,
    run_options,
    run_settings,
    take_until_stopped,
)
from starquake.cli.security_options import security_options
from starquake.cli.strict_options import StrictCommand

if TYPE_CHECKING:
    from starquake.client import MessageId
    from starquake.client.asyncio import Reader


@dataclass(frozen=True, kw_only=True)
class ReadSettings(RunSettings):
    """The settings of ``perf read``."""

    start: MessageId
    receiver_queue_size: int
    rate: float


@click.command("read", cls=StrictCommand)
@click.argument("topics", nargs=-1, required=True)
@click.option(
    "-m",
    "--start-message-id",
    default="earliest",
    show_default=True,
    help="where each reader starts: earliest, latest or LEDGER:ENTRY",
)
@count_option("-q", "--receiver-queue-size", default=1000)
@click.option(
    "-r",
    "--rate",
    type=click.FloatRange(min=0),
    default=0,
    help="read at most this many messages per second (0: as fast as possible)",
)
@num_messages_option("stop after this many messages in total (0: no limit)", "-n")
@run_options
@security_options
@click.pass_context
def read(
    ctx: click.Context,
    /,
    topics: tuple[str, ...],
    start_message_id: str,
    receiver_queue_size: int,
    rate: float,
    num_messages: int,
    as_json: bool,
    **options: Any,
) -> None:
    """Read TOPICS with readers and report throughput and end-to-end latency."""
    start = reader_start(start_message_id)
    settings = ReadSettings(
        **run_settings(ctx, options, topics, num_messages),
        start=start,
        receiver_queue_size=receiver_queue_size,
        rate=rate,
    )
    shown = {"topics": settings.topics, "start_message_id": start_message_id}
    names = ("read", "Read")
    measure(functools.partial(_read, settings), settings, names, shown, as_json)


async def _read(settings: ReadSettings, meter: Meter, stop: asyncio.Event) -> None:
    start = settings.start
    client = settings.client()
    try:
        readers = [
            await guard(
                settings.url,
                client.create_reader(
                    topic, start, receiver_queue_size=settings.receiver_queue_size
                ),
            )
            for topic in settings.topics
        ]

        async def take(reader: Reader) -> None:
            count_received(meter, await reader.read_next())

        await take_until_stopped(settings, meter, stop, readers, take, settings.rate, "Read")
    finally:
        await client.close()
