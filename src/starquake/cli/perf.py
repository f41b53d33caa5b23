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
    check_topic,
    checked_url,
    consumer_type_of,
    subscription_options,
)
from starquake.cli.connect import DEFAULT_SERVICE_URL
from starquake.cli.output import CannotConnect, CommandError, print_json_line
from starquake.cli.security_options import security_args, security_options

if TYPE_CHECKING:
    from starquake.client.asyncio import Consumer, Producer

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

PERCENTILES = (50.0, 95.0, 99.0, 99.9)
COMPRESSIONS = ("none", "lz4", "zlib", "zstd", "snappy")
_HIGHEST_MICROS = 600_000_000  # latencies above 10 minutes are counted as 10 minutes


class Latencies:
    """Latencies in microseconds in an HdrHistogram (1 µs to 10 min, 3 significant digits)."""

    def __init__(self) -> None:
        from hdrh.histogram import HdrHistogram

        self._histogram = HdrHistogram(1, _HIGHEST_MICROS, 3)
        self.count = 0

    def record(self, micros: int) -> None:
        self._histogram.record_value(min(max(micros, 1), _HIGHEST_MICROS))
        self.count += 1

    def add(self, other: Latencies) -> None:
        self._histogram.add(other._histogram)
        self.count += other.count

    def reset(self) -> None:
        self._histogram.reset()
        self.count = 0

    def summary_ms(self) -> dict[str, float]:
        """mean, p50, p95, p99, p99.9 and max in milliseconds (zeros when empty)."""
        if not self.count:
            return {"mean": 0.0, **{f"p{p:g}": 0.0 for p in PERCENTILES}, "max": 0.0}
        h = self._histogram
        values = h.get_percentile_to_value_dict(list(PERCENTILES))
        out = {"mean": round(h.get_mean_value() / 1000, 3)}
        for p in PERCENTILES:
            out[f"p{p:g}"] = round(values[p] / 1000, 3)
        out["max"] = round(h.get_max_value() / 1000, 3)
        return out


@dataclass
class Meter:
    """Counts of one run and of the current progress interval."""

    messages: int = 0
    bytes: int = 0
    failed: int = 0
    first_at: float = 0.0  # perf_counter of the first send (produce) or receive (consume)
    last_at: float = 0.0  # perf_counter of the last receipt or receive
    first_error: str | None = None
    interval: Latencies = field(default_factory=Latencies)
    total: Latencies = field(default_factory=Latencies)
    _interval_messages: int = 0
    _interval_bytes: int = 0
    _interval_start: float = field(default_factory=time.perf_counter)

    def progress(self, what: str) -> str:
        """The progress line of the interval since the last call (and start a new one)."""
        now = time.perf_counter()
        seconds = max(now - self._interval_start, 1e-9)
        count = self.messages - self._interval_messages
        size = self.bytes - self._interval_bytes
        lat = self.interval.summary_ms()
        self.total.add(self.interval)
        self.interval.reset()
        self._interval_start = now
        self._interval_messages = self.messages
        self._interval_bytes = self.bytes
        return (
            f"{what}: {count / seconds:,.1f} msg/s, {size / seconds / 1e6:,.2f} MB/s, "
            f"{self.messages:,} total, {self.failed} failed --- latency ms: "
            f"mean {lat['mean']:.3f} p50 {lat['p50']:.3f} p95 {lat['p95']:.3f} "
            f"p99 {lat['p99']:.3f} p99.9 {lat['p99.9']:.3f} max {lat['max']:.3f}"
        )

    def summary(self) -> dict[str, Any]:
        self.total.add(self.interval)
        self.interval.reset()
        seconds = max(self.last_at - self.first_at, 0.0) if self.messages else 0.0
        rate = self.messages / seconds if seconds else 0.0
        return {
            "messages": self.messages,
            "failed": self.failed,
            "bytes": self.bytes,
            "seconds": round(seconds, 4),
            "msgs_per_s": round(rate, 1),
            "mb_per_s": round(self.bytes / seconds / 1e6, 3) if seconds else 0.0,
            "latency_ms": self.total.summary_ms(),
        }


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


async def _progress(meter: Meter, what: str, interval: float, stop: asyncio.Event) -> None:
    from rich.console import Console

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except TimeoutError:
            console.print(meter.progress(what), markup=False)


async def _stop_after(seconds: float, stop: asyncio.Event) -> None:
    if seconds > 0:
        try:
            await asyncio.wait_for(stop.wait(), seconds)
        except TimeoutError:
            stop.set()


async def _guard(url: str, step: Awaitable[T]) -> T:
    from starquake.client.exceptions import PulsarException

    try:
        return await step
    except PulsarException as exc:
        text = str(exc)
        if "cannot connect" in text:
            raise CannotConnect(f"cannot connect to {url}: {text}") from None
        raise CommandError(f"{text} ({type(exc).__name__})") from None


def _print_summary(title: str, summary: dict[str, Any], settings: dict[str, Any]) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    lat = summary["latency_ms"]
    table = Table(
        title=title,
        box=box.SIMPLE_HEAD,
        title_justify="left",
        title_style="bold",
        show_header=False,
        show_edge=False,
    )
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("messages", f"{summary['messages']:,}")
    table.add_row("failed", f"{summary['failed']:,}")
    table.add_row("seconds", f"{summary['seconds']:.3f}")
    table.add_row("throughput", f"{summary['msgs_per_s']:,.1f} msg/s")
    table.add_row("", f"{summary['mb_per_s']:,.3f} MB/s")
    for key in ("mean", *(f"p{p:g}" for p in PERCENTILES), "max"):
        table.add_row(f"latency {key}", f"{lat[key]:.3f} ms")
    for key, value in settings.items():
        if isinstance(value, bool):
            text = "on" if value else "off"
        elif isinstance(value, list):
            text = ", ".join(str(v) for v in value)
        elif key == "rate":
            text = f"{value:,g} msg/s" if value else "unlimited"
        else:
            text = str(value)
        table.add_row(key, text)
    Console(highlight=False).print(table)


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


# --- produce -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProduceSettings:
    url: str
    topics: list[str]
    rate: float
    size: int
    producers_per_topic: int
    max_outstanding: int
    batching: bool
    batch_max_messages: int
    batch_max_publish_delay_ms: int
    num_messages: int
    duration: float
    interval: float
    compression: str
    client_args: dict[str, Any] = field(default_factory=dict)


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
@click.option(
    "-s", "--size", type=click.IntRange(min=0), default=1024, show_default=True, help="bytes"
)
@click.option(
    "-n",
    "--num-producers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="producers per topic",
)
@click.option(
    "-o",
    "--max-outstanding",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="messages a producer may have waiting for a receipt",
)
@click.option(
    "-bm",
    "--batch-max-messages",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="messages per batch",
)
@click.option(
    "-b",
    "--batch-max-publish-delay",
    type=click.IntRange(min=0),
    default=1,
    show_default=True,
    help="ms a batch waits for more messages",
)
@click.option("-bd", "--disable-batching", is_flag=True, help="one entry per message")
@click.option(
    "-m",
    "--num-messages",
    type=click.IntRange(min=0),
    default=0,
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
        url=_service_url(ctx, service_url),
        client_args=security_args(ctx),
        topics=[check_topic(t) for t in topics],
        rate=rate,
        size=size,
        producers_per_topic=num_producers,
        max_outstanding=max_outstanding,
        batching=not disable_batching,
        batch_max_messages=batch_max_messages,
        batch_max_publish_delay_ms=batch_max_publish_delay,
        num_messages=num_messages,
        duration=test_duration,
        interval=stats_interval_seconds,
        compression=compression.lower(),
    )
    meter = Meter()
    _run(functools.partial(_produce, settings, meter))
    summary = meter.summary()
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
    if as_json:
        print_json_line({"command": "produce", **summary, **shown})
    else:
        _print_summary("Produced", summary, shown)
    if meter.failed:
        raise CommandError(f"{meter.failed} sends failed, the first: {meter.first_error}")


async def _produce(settings: ProduceSettings, meter: Meter, stop: asyncio.Event) -> None:
    from starquake.client import CompressionType
    from starquake.client.asyncio import Client

    client = Client(settings.url, operation_timeout_seconds=30, **settings.client_args)
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
        helpers = [
            asyncio.ensure_future(_progress(meter, "Produced", settings.interval, stop)),
            asyncio.ensure_future(_stop_after(settings.duration, stop)),
        ]
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


@dataclass(frozen=True)
class ConsumeSettings:
    url: str
    topics: list[str]
    subscription: str
    subscription_type: str
    position: str
    consumers_per_topic: int
    receiver_queue_size: int
    num_messages: int
    duration: float
    interval: float
    client_args: dict[str, Any] = field(default_factory=dict)


@perf.command("consume")
@click.argument("topics", nargs=-1, required=True)
@_SERVICE_URL
@click.option("-s", "--subscription", default="sub", show_default=True, help="subscription name")
@subscription_options
@click.option(
    "-n",
    "--num-consumers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="consumers per topic",
)
@click.option(
    "-q",
    "--receiver-queue-size",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
)
@click.option(
    "-m",
    "--num-messages",
    type=click.IntRange(min=0),
    default=0,
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
        url=_service_url(ctx, service_url),
        client_args=security_args(ctx),
        topics=[check_topic(t) for t in topics],
        subscription=subscription,
        subscription_type=subscription_type,
        position=subscription_position,
        consumers_per_topic=num_consumers,
        receiver_queue_size=receiver_queue_size,
        num_messages=num_messages,
        duration=test_duration,
        interval=stats_interval_seconds,
    )
    meter = Meter()
    _run(functools.partial(_consume, settings, meter))
    summary = meter.summary()
    shown = {
        "topics": settings.topics,
        "subscription": settings.subscription,
        "subscription_type": settings.subscription_type,
        "consumers": len(settings.topics) * settings.consumers_per_topic,
    }
    if as_json:
        print_json_line({"command": "consume", **summary, **shown})
    else:
        _print_summary("Consumed", summary, shown)


async def _consume(settings: ConsumeSettings, meter: Meter, stop: asyncio.Event) -> None:
    from starquake.client import InitialPosition
    from starquake.client.asyncio import Client

    consumer_type = consumer_type_of(settings.subscription_type)
    position = getattr(InitialPosition, settings.position.capitalize())
    client = Client(settings.url, operation_timeout_seconds=30, **settings.client_args)
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
        helpers = [
            asyncio.ensure_future(_progress(meter, "Consumed", settings.interval, stop)),
            asyncio.ensure_future(_stop_after(settings.duration, stop)),
        ]
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
