"""What ``starquake perf`` measures and reports: latencies in an HdrHistogram, the counts of a
run, the progress lines on stderr and the summary table."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import IO, Any

PERCENTILES = (50.0, 95.0, 99.0, 99.9, 99.99)
_HIGHEST_MICROS = 600_000_000  # latencies above 10 minutes are counted as 10 minutes


class Latencies:
    """Latencies in microseconds in an HdrHistogram (1 µs to 10 min, 3 significant digits)."""

    def __init__(self) -> None:
        from hdrh.histogram import HdrHistogram

        self._histogram = HdrHistogram(1, _HIGHEST_MICROS, 3)
        self.count = 0

    def record(self, micros: int) -> None:
        """Count one latency (clamped to the histogram's range)."""
        self._histogram.record_value(min(max(micros, 1), _HIGHEST_MICROS))
        self.count += 1

    def add(self, other: Latencies) -> None:
        """Add the latencies counted by ``other``."""
        self._histogram.add(other._histogram)
        self.count += other.count

    def write_interval(self, writer: Any, start: float, end: float) -> None:
        """Write the latencies counted as one interval of an HdrHistogram log (``writer``: a
        ``hdrh.log.HistogramLogWriter``; ``start``, ``end``: seconds since the log's start)."""
        writer.output_interval_histogram(self._histogram, start, end, max_value_unit_ratio=1000.0)

    def reset(self) -> None:
        """Forget every latency counted."""
        self._histogram.reset()
        self.count = 0

    def summary_ms(self) -> dict[str, float]:
        """mean, p50, p95, p99, p99.9, p99.99 and max in milliseconds (zeros when empty)."""
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
    _log: Any = None  # hdrh.log.HistogramLogWriter of --histogram-file
    _log_file: IO[str] | None = None
    _log_start: float = 0.0

    def open_histogram_log(self, path: str) -> None:
        """Write each interval's latencies to an HdrHistogram log at ``path``."""
        from hdrh.log import HistogramLogWriter

        self._log_file = open(path, "w")  # noqa: SIM115 (closed by close_histogram_log)
        self._log = HistogramLogWriter(self._log_file)
        self._log_start = time.perf_counter()
        self._log.output_log_format_version()
        started = time.time()  # hdrh's own output_start_time fails on Python 3
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started))
        self._log_file.write(f"#[StartTime: {started:.3f} (seconds since epoch), {stamp}]\n")
        self._log.output_legend()

    def close_histogram_log(self) -> None:
        """Close the HdrHistogram log, if one is written."""
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = self._log = None

    def _end_interval(self, now: float) -> None:
        """Log the interval's latencies (with --histogram-file), add them to the total and
        start a new interval."""
        if self._log is not None and self.interval.count:
            start = self._interval_start - self._log_start
            self.interval.write_interval(self._log, max(start, 0.0), now - self._log_start)
        self.total.add(self.interval)
        self.interval.reset()
        self._interval_start = now

    def progress(self, what: str) -> str:
        """The progress line of the interval since the last call (and start a new one)."""
        now = time.perf_counter()
        seconds = max(now - self._interval_start, 1e-9)
        count = self.messages - self._interval_messages
        size = self.bytes - self._interval_bytes
        lat = self.interval.summary_ms()
        self._end_interval(now)
        self._interval_messages = self.messages
        self._interval_bytes = self.bytes
        return (
            f"{what}: {count / seconds:,.1f} msg/s, {size / seconds / 1e6:,.2f} MB/s, "
            f"{self.messages:,} total, {self.failed} failed --- latency ms: "
            f"mean {lat['mean']:.3f} p50 {lat['p50']:.3f} p95 {lat['p95']:.3f} "
            f"p99 {lat['p99']:.3f} p99.9 {lat['p99.9']:.3f} p99.99 {lat['p99.99']:.3f} "
            f"max {lat['max']:.3f}"
        )

    def summary(self) -> dict[str, Any]:
        """The whole run's figures: counts, seconds, throughput and latency percentiles."""
        self._end_interval(time.perf_counter())
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


async def report_progress(meter: Meter, what: str, interval: float, stop: asyncio.Event) -> None:
    """Print the meter's progress line on stderr every ``interval`` seconds until ``stop``."""
    from rich.console import Console

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), interval)
        except TimeoutError:
            console.print(meter.progress(what), markup=False)


def print_summary(title: str, summary: dict[str, Any], settings: dict[str, Any]) -> None:
    """The summary of a run and its settings as a table on stdout."""
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
