"""``starquake perf``: load tests as ``pulsar-perf``, on Starquake's asyncio client.

``produce`` sends fixed-size messages at a rate (or as fast as the pending window allows) and
measures each message's latency from the send call to the broker's receipt; ``consume`` reads
and acknowledges, measuring each message's end-to-end latency from its publish time. Both print
a progress line every few seconds on stderr and a summary at the end: throughput (msg/s, MB/s
with MB = 10^6 bytes) and latency percentiles from an HdrHistogram. ``--json`` prints the
summary as one JSON object on stdout instead.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from starquake.cli.client_commands import DISABLE_BATCHING, URL_OPTION
from starquake.cli.output import CommandError
from starquake.cli.params import count_option
from starquake.cli.perf_consume import consume
from starquake.cli.perf_meter import Meter
from starquake.cli.perf_read import read
from starquake.cli.perf_run import (
    RunSettings,
    guard,
    measure,
    num_messages_option,
    run_options,
    run_settings,
    start_reporting,
)
from starquake.cli.security_options import security_options
from starquake.cli.strict_options import StrictGroup

if TYPE_CHECKING:
    from starquake.client.asyncio import Producer

COMPRESSIONS = ("none", "lz4", "zlib", "zstd", "snappy")


@click.group("perf", cls=StrictGroup)
@URL_OPTION
@security_options
@click.pass_context
def perf(ctx: click.Context, url: str) -> None:
    """Measure throughput and latency (as pulsar-perf)."""
    ctx.obj = url


perf.add_command(consume)
perf.add_command(read)


# --- produce -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ProduceSettings(RunSettings):
    """The settings of ``perf produce``."""

    rate: float
    size: int
    producers_per_topic: int
    max_outstanding: int
    batching: bool
    batch_max_messages: int
    batch_max_bytes: int
    batch_time_window_ms: float
    chunking: bool
    compression: str


@perf.command("produce")
@click.argument("topics", nargs=-1, required=True)
@click.option(
    "-r",
    "--rate",
    type=click.FloatRange(min=0),
    default=100,
    show_default=True,
    help="messages per second across all producers (0: as fast as possible)",
)
@count_option("-s", "--size", default=1024, minimum=0, help="message size in bytes")
@count_option("-n", "--num-producers", default=1, help="producers per topic")
@click.option("--separator", default="-", show_default=True, help="between topic and number")
@count_option(
    "-o",
    "--max-outstanding",
    default=1000,
    help="messages a producer may have waiting for a receipt",
)
@count_option("-bm", "--batch-max-messages", default=1000, help="messages per batch")
@count_option("-bb", "--batch-max-bytes", default=4 * 1024 * 1024, help="bytes per batch")
@click.option(
    "-b",
    "--batch-time-window",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="ms a batch waits for more messages (fractions allowed)",
)
@DISABLE_BATCHING
@click.option(
    "-ch",
    "--chunking",
    is_flag=True,
    help="split messages larger than the broker's maximum into chunks (needs -db)",
)
@num_messages_option("messages to send in total (0: no limit)")
@click.option(
    "-z",
    "--compression",
    type=click.Choice(COMPRESSIONS, case_sensitive=False),
    default="none",
    show_default=True,
)
@run_options
@security_options
@click.pass_context
def produce(
    ctx: click.Context,
    /,
    topics: tuple[str, ...],
    rate: float,
    size: int,
    num_producers: int,
    separator: str,
    max_outstanding: int,
    batch_max_messages: int,
    batch_max_bytes: int,
    batch_time_window: float,
    disable_batching: bool,
    chunking: bool,
    num_messages: int,
    compression: str,
    as_json: bool,
    **options: Any,
) -> None:
    """Publish to TOPICS and report throughput and publish latency."""
    if chunking and not disable_batching:
        raise click.UsageError("chunking (-ch) needs batching off (-db)")
    settings = ProduceSettings(
        **run_settings(ctx, options, topics, num_messages, separator),
        rate=rate,
        size=size,
        producers_per_topic=num_producers,
        max_outstanding=max_outstanding,
        batching=not disable_batching,
        batch_max_messages=batch_max_messages,
        batch_max_bytes=batch_max_bytes,
        batch_time_window_ms=batch_time_window,
        chunking=chunking,
        compression=compression.lower(),
    )
    shown = {
        "topics": settings.topics,
        "producers": len(settings.topics) * settings.producers_per_topic,
        "size": settings.size,
        "rate": settings.rate,
        "batching": settings.batching,
        "batch_max_messages": settings.batch_max_messages,
        "batch_time_window_ms": settings.batch_time_window_ms,
        "max_outstanding": settings.max_outstanding,
    }
    names = ("produce", "Produced")
    meter = measure(functools.partial(_produce, settings), settings, names, shown, as_json)
    if meter.failed:
        raise CommandError(f"{meter.failed} sends failed, the first: {meter.first_error}")


async def _produce(settings: ProduceSettings, meter: Meter, stop: asyncio.Event) -> None:
    from starquake.client import CompressionType

    client = settings.client()
    producers: list[Producer] = []
    try:
        compression = {
            "none": CompressionType.NONE,
            "lz4": CompressionType.LZ4,
            "zlib": CompressionType.ZLib,
            "zstd": CompressionType.ZSTD,
            "snappy": CompressionType.SNAPPY,
        }[settings.compression]
        for topic in settings.topics:
            for _ in range(settings.producers_per_topic):
                producer = await guard(
                    settings.url,
                    client.create_producer(
                        topic,
                        batching_enabled=settings.batching,
                        batching_max_messages=settings.batch_max_messages,
                        batching_max_allowed_size_in_bytes=settings.batch_max_bytes,
                        batching_max_publish_delay_ms=settings.batch_time_window_ms,
                        chunking_enabled=settings.chunking,
                        max_pending_messages=settings.max_outstanding,
                        block_if_queue_full=True,
                        compression_type=compression,
                    ),
                )
                producers.append(producer)
        helpers = start_reporting(settings, meter, "Produced", stop)
        try:
            await _send_all(settings, producers, meter, stop)
            stop.set()
            for producer in producers:
                await guard(settings.url, producer.flush())
        finally:
            stop.set()
            await asyncio.gather(*helpers)
        for producer in producers:
            await producer.close()
    finally:
        await client.close()


async def _send_all(
    settings: ProduceSettings, producers: list[Producer], meter: Meter, stop: asyncio.Event
) -> None:
    """Send until ``stop``, the message limit or the end of the test duration."""
    from starquake.client.asyncio import OutgoingMessage
    from starquake.client.exceptions import ProducerQueueIsFull

    payload = os.urandom(settings.size)
    message = OutgoingMessage(payload)
    size = len(payload)
    clock = time.perf_counter
    record_interval = meter.interval.record

    def done(sent_at: float, fut: asyncio.Future[Any]) -> None:
        now = clock()
        if fut.cancelled():
            meter.failed += 1
            return
        exc = fut.exception()
        if exc is not None:
            meter.failed += 1
            if meter.first_error is None:
                meter.first_error = f"{type(exc).__name__}: {exc}"
            return
        meter.messages += 1
        meter.bytes += size
        meter.last_at = now
        record_interval(int((now - sent_at) * 1e6))

    limit = settings.num_messages or sys.maxsize
    count = len(producers)
    rate = settings.rate
    sent = 0
    start = meter.first_at = clock()
    while sent < limit and not stop.is_set():
        if rate:
            due = min(int((clock() - start) * rate) + 1, limit)
            if due <= sent:
                await asyncio.sleep(max((sent + 1) / rate - (clock() - start), 0))
                continue
        else:
            due = min(sent + 1000, limit)
        while sent < due:
            producer = producers[sent % count]
            sent_at = clock()
            try:
                fut = producer.send_nowait(message)
            except ProducerQueueIsFull:
                # the latency counts from when the message enters the producer's queue
                fut = await producer.send_queued(message)
                sent_at = clock()
            fut.add_done_callback(functools.partial(done, sent_at))
            sent += 1
        await asyncio.sleep(0)
