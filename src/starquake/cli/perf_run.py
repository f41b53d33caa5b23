"""What the ``starquake perf`` commands share: running on an event loop until stopped, the
options of every run, the topics a run uses and how its figures are printed."""

from __future__ import annotations

import asyncio
import functools
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import click

from starquake.cli.client_commands import checked_url, client_errors
from starquake.cli.connect import DEFAULT_SERVICE_URL
from starquake.cli.output import print_json_line
from starquake.cli.params import check_topic, count_option
from starquake.cli.perf_meter import Meter, print_summary, report_progress
from starquake.cli.security_options import security_args

if TYPE_CHECKING:
    from starquake.client import Message
    from starquake.client.asyncio import Client

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def run_loop(main: Callable[[asyncio.Event], Coroutine[Any, Any, T]]) -> T:
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


async def guard(url: str, step: Awaitable[T]) -> T:
    """Await ``step`` with the client's errors turned into exit codes."""
    with client_errors(url):
        return await step


def run_options(command: F) -> F:
    """The options of every run (pulsar-perf's names): ``-u``, ``-t``, ``-time``, ``-i``,
    ``--histogram-file`` and ``--json``."""
    options = [
        click.option(
            "-u",
            "--service-url",
            default=None,
            help="the broker's service URL (default: --url of starquake perf)",
        ),
        click.option(
            "-t",
            "--num-topics",
            "--num-topic",
            type=click.IntRange(min=1),
            default=None,
            help="number of topics: TOPIC-0 ... TOPIC-(n-1) from one TOPIC, else as many as given",
        ),
        click.option(
            "-time",
            "--test-duration",
            type=click.FloatRange(min=0),
            default=0,
            help="stop after this many seconds (0: no limit)",
        ),
        click.option(
            "-i",
            "--stats-interval-seconds",
            type=click.FloatRange(min=0),
            default=5,
            show_default=True,
            help="seconds between progress lines (0: none)",
        ),
        click.option(
            "--histogram-file",
            type=click.Path(dir_okay=False, writable=True),
            default=None,
            help="write the latencies of each interval to this HdrHistogram log (microseconds)",
        ),
        click.option(
            "--json", "as_json", is_flag=True, help="print the summary as one JSON object"
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def num_messages_option(help: str, short: str = "-m") -> Callable[[F], F]:
    """``-m/--num-messages`` (``-n`` for ``perf read``, as pulsar-perf names them): how many
    messages a run handles (0: no limit)."""
    return count_option(
        short, "--num-messages", default=0, minimum=0, show_default=False, help=help
    )


def numbered(names: list[str], count: int | None, separator: str, what: str) -> list[str]:
    """``names``, or ``count`` names numbered from one given name, as pulsar-perf does for
    ``-t`` and ``-ns``; a usage error if several names are given and their number differs."""
    if count is None or count == len(names):
        return names
    if len(names) == 1:
        return [f"{names[0]}{separator}{i}" for i in range(count)]
    raise click.UsageError(f"{len(names)} {what} given but {count} asked for")


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What every perf run is given: where, on which topics, and for how long."""

    url: str
    topics: list[str]
    num_messages: int
    duration: float
    interval: float
    histogram_file: str | None = None
    client_args: dict[str, Any] = field(default_factory=dict)

    def client(self) -> Client:
        """A new asyncio client of the broker."""
        from starquake.client.asyncio import Client

        return Client(self.url, operation_timeout_seconds=30, **self.client_args)


def run_settings(
    ctx: click.Context,
    options: dict[str, Any],
    topics: tuple[str, ...],
    num_messages: int,
    separator: str = "-",
) -> dict[str, Any]:
    """The :class:`RunSettings` fields from a command's :func:`run_options` (URL and topics
    checked)."""
    names = numbered(list(topics), options["num_topics"], separator, "topics")
    checked = [check_topic(t) for t in names]
    group_url = ctx.parent.obj if ctx.parent is not None else None
    return {
        "url": checked_url(options["service_url"] or str(group_url or DEFAULT_SERVICE_URL)),
        "client_args": security_args(ctx),
        "topics": checked,
        "num_messages": num_messages,
        "duration": options["test_duration"],
        "interval": options["stats_interval_seconds"],
        "histogram_file": options["histogram_file"],
    }


def measure(
    load: Callable[[Meter, asyncio.Event], Coroutine[Any, Any, None]],
    settings: RunSettings,
    names: tuple[str, str],
    shown: dict[str, Any],
    as_json: bool,
) -> Meter:
    """Run ``load`` until it ends or is stopped, then print its summary with ``shown``
    (``names``: the command and the summary's title)."""
    meter = Meter()
    if settings.histogram_file:
        meter.open_histogram_log(settings.histogram_file)
    try:
        run_loop(functools.partial(load, meter))
        summary = meter.summary()
    finally:
        meter.close_histogram_log()
    command, title = names
    if as_json:
        print_json_line({"command": command, **summary, **shown})
    else:
        print_summary(title, summary, shown)
    return meter


def start_reporting(
    settings: RunSettings, meter: Meter, what: str, stop: asyncio.Event
) -> list[asyncio.Future[None]]:
    """The tasks printing progress and ending the run after its duration."""
    tasks: list[asyncio.Future[None]] = [
        asyncio.ensure_future(_stop_after(settings.duration, stop))
    ]
    if settings.interval > 0:
        tasks.append(asyncio.ensure_future(report_progress(meter, what, settings.interval, stop)))
    return tasks


class Pace:
    """At most ``rate`` messages a second across every consumer or reader of a run (0: no
    limit), as pulsar-perf's ``-r`` simulates a slow reader."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.count = 0
        self.start = time.perf_counter()

    async def wait(self) -> None:
        """Return when the next message may be taken."""
        if not self.rate:
            return
        self.count += 1
        delay = self.start + self.count / self.rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)


def count_received(meter: Meter, msg: Message) -> None:
    """Count a message received, with its end-to-end latency from its publish time."""
    now = time.perf_counter()
    if not meter.messages:
        meter.first_at = now
    meter.messages += 1
    meter.bytes += len(msg.data())
    meter.last_at = now
    meter.interval.record(int((time.time() * 1000 - msg.publish_timestamp()) * 1000))


async def take_until_stopped(
    settings: RunSettings,
    meter: Meter,
    stop: asyncio.Event,
    handles: Sequence[Any],
    take: Callable[[Any], Awaitable[None]],
    rate: float,
    what: str,
) -> None:
    """Run ``take(handle)`` for every consumer or reader in ``handles`` (each call takes and
    counts one message) at most ``rate`` times a second over all (0: no limit), until ``stop``
    or the run's message limit; then close the handles. Progress lines say ``what``."""
    helpers = start_reporting(settings, meter, what, stop)
    pace = Pace(rate)
    limit = settings.num_messages or sys.maxsize

    async def run(handle: Any) -> None:
        while meter.messages < limit:
            await pace.wait()
            await take(handle)
        stop.set()

    tasks = [asyncio.ensure_future(run(handle)) for handle in handles]
    try:
        await stop.wait()
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, *helpers, return_exceptions=True)
    for handle in handles:
        await handle.close()
