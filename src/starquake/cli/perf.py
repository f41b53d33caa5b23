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
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import click

from starquake.cli.client_commands import (
    URL_OPTION,
    checked_url,
    client_errors,
    consumer_type_of,
    subscription_options,
)
from starquake.cli.connect import DEFAULT_SERVICE_URL
from starquake.cli.output import CommandError, print_json_line
from starquake.cli.params import check_topic, count_option
from starquake.cli.perf_meter import Meter, print_summary, report_progress
from starquake.cli.security_options import security_args, security_options

if TYPE_CHECKING:
    from starquake.client.asyncio import Client, Consumer, Producer

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

COMPRESSIONS = ("none", "lz4", "zlib", "zstd", "snappy")


# --- running -----------------------------------------------------------------------------------


def _run(main: Callable[[asyncio.Event], Coroutine[Any, Any, T]]) -> T:
    """Run ``main(stop)`` on uvloop when installed; the first Ctrl-C or SIGTERM sets ``stop``
    (the run ends cleanly and reports), a second Ctrl-C interrupts."""

    async def wrapper() -> T:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()

        def on_signal() -> None:
            stop.set()
            loop.remove_signal_handler(signal.SIGINT)

        loop.add_signal_handler(signal.SIGINT, on_signal)
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        return await main(stop)

    try:
        import uvloop
    except ImportError:
        return asyncio.run(wrapper())
    return uvloop.run(wrapper())


async def _stop_after(seconds: float, stop: asyncio.Event) -> None:
    if seconds > 0:
        try:
            await asyncio.wait_for(stop.wait(), seconds)
        except TimeoutError:
            stop.set()


async def _guard(url: str, step: Awaitable[T]) -> T:
    """Await ``step`` with the client's errors turned into exit codes."""
    with client_errors(url):
        return await step


def _run_options(command: F) -> F:
    """How long a run lasts and how it reports: ``-time``, ``-i`` and ``--json``."""
    duration = click.option(
        "-time",
        "--test-duration",
        type=click.FloatRange(min=0),
        default=0,
        help="stop after this many seconds (0: no limit)",
    )
    interval = click.option(
        "-i",
        "--stats-interval-seconds",
        type=click.FloatRange(min=0.1),
        default=5,
        show_default=True,
        help="seconds between progress lines",
    )
    as_json = click.option(
        "--json", "as_json", is_flag=True, help="print the summary as one JSON object"
    )
    return duration(interval(as_json(command)))


_SERVICE_URL = click.option(
    "-u",
    "--service-url",
    default=None,
    help="the broker's service URL (default: --url of starquake perf)",
)


@click.group("perf")
@URL_OPTION
@security_options
@click.pass_context
def perf(ctx: click.Context, url: str) -> None:
    """Measure throughput and latency (as pulsar-perf)."""
    ctx.obj = url


def _service_url(ctx: click.Context, service_url: str | None) -> str:
    return checked_url(service_url or str(ctx.obj or DEFAULT_SERVICE_URL))


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What every perf run is given: where, on which topics, and for how long."""

    url: str
    topics: list[str]
    num_messages: int
    duration: float
    interval: float
    client_args: dict[str, Any] = field(default_factory=dict)

    def client(self) -> Client:
        """A new asyncio client of the broker."""
        from starquake.client.asyncio import Client

        return Client(self.url, operation_timeout_seconds=30, **self.client_args)


def _run_settings(
    ctx: click.Context,
    service_url: str | None,
    topics: tuple[str, ...],
    num_messages: int,
    duration: float,
    interval: float,
) -> dict[str, Any]:
    """The :class:`RunSettings` fields from a command's options (URL and topics checked)."""
    return {
        "url": _service_url(ctx, service_url),
        "client_args": security_args(ctx),
        "topics": [check_topic(t) for t in topics],
        "num_messages": num_messages,
        "duration": duration,
        "interval": interval,
    }


def _measure(
    load: Callable[[Meter, asyncio.Event], Coroutine[Any, Any, None]],
    command: str,
    title: str,
    shown: dict[str, Any],
    as_json: bool,
) -> Meter:
    """Run ``load`` until it ends or is stopped, then print its summary with ``shown``."""
    meter = Meter()
    _run(functools.partial(load, meter))
    summary = meter.summary()
    if as_json:
        print_json_line({"command": command, **summary, **shown})
    else:
        print_summary(title, summary, shown)
    return meter


def _start_reporting(
    settings: RunSettings, meter: Meter, what: str, stop: asyncio.Event
) -> list[asyncio.Future[None]]:
    """The tasks printing progress and ending the run after its duration."""
    return [
        asyncio.ensure_future(report_progress(meter, what, settings.interval, stop)),
        asyncio.ensure_future(_stop_after(settings.duration, stop)),
    ]


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
    batch_max_publish_delay_ms: int
    compression: str


@perf.command("produce")
@click.argument("topics", nargs=-1, required=True)
@_SERVICE_URL
@click.option(
    "-r",
    "--rate",
    type=click.FloatRange(min=0),
    default=100,
    show_default=True,
    help="messages per second across all producers (0: as fast as possible)",
)
@count_option("-s", "--size", default=1024, minimum=0, help="bytes")
@count_option("-n", "--num-producers", default=1, help="producers per topic")
@count_option(
    "-o",
    "--max-outstanding",
    default=1000,
    help="messages a producer may have waiting for a receipt",
)
@count_option("-bm", "--batch-max-messages", default=1000, help="messages per batch")
@count_option(
    "-b",
    "--batch-max-publish-delay",
    default=1,
    minimum=0,
    help="ms a batch waits for more messages",
)
@click.option("-bd", "--disable-batching", is_flag=True, help="one entry per message")
@count_option(
    "-m",
    "--num-messages",
    default=0,
    minimum=0,
    show_default=False,
    help="messages to send in total (0: no limit)",
)
@click.option(
    "-z",
    "--compression",
    type=click.Choice(COMPRESSIONS, case_sensitive=False),
    default="none",
    show_default=True,
)
@_run_options
@click.pass_context
def produce(
    ctx: click.Context,
    topics: tuple[str, ...],
    service_url: str | None,
    rate: float,
    size: int,
    num_producers: int,
    max_outstanding: int,
    batch_max_messages: int,
    batch_max_publish_delay: int,
    disable_batching: bool,
    num_messages: int,
    test_duration: float,
    stats_interval_seconds: float,
    compression: str,
    as_json: bool,
) -> None:
    """Publish to TOPICS and report throughput and publish latency."""
    settings = ProduceSettings(
        **_run_settings(
            ctx, service_url, topics, num_messages, test_duration, stats_interval_seconds
        ),
        rate=rate,
        size=size,
        producers_per_topic=num_producers,
        max_outstanding=max_outstanding,
        batching=not disable_batching,
        batch_max_messages=batch_max_messages,
        batch_max_publish_delay_ms=batch_max_publish_delay,
        compression=compression.lower(),
    )
    shown = {
        "topics": settings.topics,
        "producers": len(settings.topics) * settings.producers_per_topic,
        "size": settings.size,
        "rate": settings.rate,
        "batching": settings.batching,
        "batch_max_messages": settings.batch_max_messages,
        "batch_max_publish_delay_ms": settings.batch_max_publish_delay_ms,
        "max_outstanding": settings.max_outstanding,
    }
    meter = _measure(functools.partial(_produce, settings), "produce", "Produced", shown, as_json)
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
                producer = await _guard(
                    settings.url,
                    client.create_producer(
                        topic,
                        batching_enabled=settings.batching,
                        batching_max_messages=settings.batch_max_messages,
                        batching_max_allowed_size_in_bytes=max(
                            128 * 1024, settings.size * settings.batch_max_messages
                        ),
                        batching_max_publish_delay_ms=settings.batch_max_publish_delay_ms,
                        max_pending_messages=settings.max_outstanding,
                        block_if_queue_full=True,
                        compression_type=compression,
                    ),
                )
                producers.append(producer)
        helpers = _start_reporting(settings, meter, "Produced", stop)
        try:
            await _send_all(settings, producers, meter, stop)
            stop.set()
            for producer in producers:
                await _guard(settings.url, producer.flush())
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


# --- consume -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ConsumeSettings(RunSettings):
    """The settings of ``perf consume``."""

    subscription: str
    subscription_type: str
    position: str
    consumers_per_topic: int
    receiver_queue_size: int


@perf.command("consume")
@click.argument("topics", nargs=-1, required=True)
@_SERVICE_URL
@click.option("-s", "--subscription", default="sub", show_default=True, help="subscription name")
@subscription_options
@count_option("-n", "--num-consumers", default=1, help="consumers per topic")
@count_option("-q", "--receiver-queue-size", default=1000)
@count_option(
    "-m",
    "--num-messages",
    default=0,
    minimum=0,
    show_default=False,
    help="stop after this many messages in total (0: no limit)",
)
@_run_options
@click.pass_context
def consume(
    ctx: click.Context,
    topics: tuple[str, ...],
    service_url: str | None,
    subscription: str,
    subscription_type: str,
    subscription_position: str,
    num_consumers: int,
    receiver_queue_size: int,
    num_messages: int,
    test_duration: float,
    stats_interval_seconds: float,
    as_json: bool,
) -> None:
    """Consume TOPICS and report throughput and end-to-end latency (from publish time)."""
    settings = ConsumeSettings(
        **_run_settings(
            ctx, service_url, topics, num_messages, test_duration, stats_interval_seconds
        ),
        subscription=subscription,
        subscription_type=subscription_type,
        position=subscription_position,
        consumers_per_topic=num_consumers,
        receiver_queue_size=receiver_queue_size,
    )
    shown = {
        "topics": settings.topics,
        "subscription": settings.subscription,
        "subscription_type": settings.subscription_type,
        "consumers": len(settings.topics) * settings.consumers_per_topic,
    }
    _measure(functools.partial(_consume, settings), "consume", "Consumed", shown, as_json)


async def _consume(settings: ConsumeSettings, meter: Meter, stop: asyncio.Event) -> None:
    from starquake.client import InitialPosition

    consumer_type = consumer_type_of(settings.subscription_type)
    position = getattr(InitialPosition, settings.position.capitalize())
    client = settings.client()
    consumers: list[Consumer] = []
    try:
        for topic in settings.topics:
            for _ in range(settings.consumers_per_topic):
                consumer = await _guard(
                    settings.url,
                    client.subscribe(
                        topic,
                        settings.subscription,
                        consumer_type=consumer_type,
                        initial_position=position,
                        receiver_queue_size=settings.receiver_queue_size,
                    ),
                )
                consumers.append(consumer)
        helpers = _start_reporting(settings, meter, "Consumed", stop)
        readers = [asyncio.ensure_future(_receive(c, settings, meter, stop)) for c in consumers]
        try:
            await stop.wait()
        finally:
            stop.set()
            for reader in readers:
                reader.cancel()
            await asyncio.gather(*readers, *helpers, return_exceptions=True)
        for consumer in consumers:
            await consumer.close()
    finally:
        await client.close()


async def _receive(
    consumer: Consumer, settings: ConsumeSettings, meter: Meter, stop: asyncio.Event
) -> None:
    limit = settings.num_messages or sys.maxsize
    clock = time.perf_counter
    wall = time.time
    record_interval = meter.interval.record
    receive = consumer.receive
    acknowledge = consumer.acknowledge
    while meter.messages < limit:
        msg = await receive()
        now = clock()
        if not meter.messages:
            meter.first_at = now
        meter.messages += 1
        meter.bytes += len(msg.data())
        meter.last_at = now
        record_interval(int((wall() * 1000 - msg.publish_timestamp()) * 1000))
        await acknowledge(msg)
    stop.set()
