"""Pieces the benchmark scripts share; imports no client module (workers import exactly one)."""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_U32 = struct.Struct(">I")


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list."""
    rank = max(1, round(q / 100 * len(sorted_values) + 0.5 - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


@dataclass
class Drained:
    """What consuming a backlog of ``count`` indexed messages took."""

    seconds: float
    cpu: float
    first_message_ms: float
    received: int
    extra_after_end: int

    def figures(self, count: int) -> dict[str, Any]:
        """The figures a report gives besides throughput: first message, redeliveries."""
        return {
            "first_message_ms": self.first_message_ms,
            "duplicates": self.received - count,
            "extra_after_end": self.extra_after_end,
        }


def drain_distinct(consumer: Any, count: int, timeout_error: type[BaseException]) -> Drained:
    """Receive and ack until all ``count`` distinct messages (u32 index first) have arrived.

    Redelivered duplicates are counted but do not end the timed phase; whatever still arrives
    afterwards is drained (and acked) outside it. ``timeout_error`` is the client's Timeout.
    """
    receive = consumer.receive
    ack = consumer.acknowledge
    unpack = _U32.unpack_from
    seen = bytearray(count)
    distinct = received = 0
    first_at = 0.0
    cpu0 = time.process_time()
    start = time.perf_counter()
    while distinct < count:
        try:
            msg = receive(10_000)
        except timeout_error:
            raise TimeoutError(f"consumer stalled at {distinct}/{count}") from None
        if received == 0:
            first_at = time.perf_counter()
        received += 1
        (index,) = unpack(msg.data())
        if not seen[index]:
            seen[index] = 1
            distinct += 1
        ack(msg)
    seconds = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    extra = 0
    while True:
        try:
            ack(receive(500))
        except timeout_error:
            break
        extra += 1
    return Drained(seconds, cpu, round((first_at - start) * 1e3, 2), received, extra)


class Completion:
    """Counts send callbacks (from the client's I/O thread) and wakes the waiter at the end."""

    def __init__(self, expected: int, ok: Any) -> None:
        self.expected = expected
        self.ok = ok  # the client's Result.Ok
        self.done = 0
        self.failed = 0
        self.first_error: str | None = None
        self.last_at = 0.0
        self._lock = threading.Lock()
        self._finished = threading.Event()

    def callback(self, result: Any, _msg_id: Any) -> None:
        """The send callback: count ``result``; the last one expected records its time."""
        with self._lock:
            self.done += 1
            if result != self.ok:
                self.failed += 1
                if self.first_error is None:
                    self.first_error = str(result)
            if self.done >= self.expected:
                self.last_at = time.perf_counter()
                self._finished.set()

    def wait(self, timeout: float) -> bool:
        """Whether every expected callback came within ``timeout`` seconds."""
        return self._finished.wait(timeout)


def produce_async(
    producer: Any, payloads: Sequence[bytes], ok: Any, timeout: float, callbacks: str = "each"
) -> tuple[float, float]:
    """Send every payload with send_async; (seconds to the last callback, client CPU seconds).

    callbacks="each" gives every message a Python callback, as applications do. "last" gives
    only the final message one (receipts arrive in order, a failure fails all pending sends):
    each callback costs the client a GIL hand-off from its I/O thread, which on a small machine
    can make the client, not the broker, the bottleneck. ``ok`` is the client's Result.Ok.
    """
    count = len(payloads)
    completion = Completion(count if callbacks == "each" else 1, ok)
    send = producer.send_async
    callback = completion.callback
    cpu0 = time.process_time()
    start = time.perf_counter()
    if callbacks == "each":
        for payload in payloads:
            send(payload, callback)
    else:
        for payload in payloads[:-1]:
            send(payload, None)
        send(payloads[-1], callback)
    producer.flush()
    if not completion.wait(timeout):
        raise TimeoutError(f"only {completion.done}/{count} send callbacks after {timeout:g}s")
    cpu = time.process_time() - cpu0
    if completion.failed:
        raise RuntimeError(f"{completion.failed} sends failed, first: {completion.first_error}")
    return completion.last_at - start, cpu


def timed_sends(
    send: Callable[[bytes], Any], payload: bytes, warmup: int, count: int
) -> tuple[list[float], float]:
    """``warmup`` untimed then ``count`` timed blocking sends: (the latencies in ms, sorted;
    the client CPU seconds of the timed sends)."""
    for _ in range(warmup):
        send(payload)
    latencies: list[float] = []
    clock = time.perf_counter_ns
    cpu0 = time.process_time()
    for _ in range(count):
        t0 = clock()
        send(payload)
        latencies.append((clock() - t0) / 1e6)
    cpu = time.process_time() - cpu0
    latencies.sort()
    return latencies, cpu


def latency_figures(latencies: list[float], *percentiles: float) -> dict[str, Any]:
    """Count, the given percentiles, max and mean in ms of sorted ``latencies``."""
    figures: dict[str, Any] = {"messages": len(latencies)}
    for q in percentiles:
        figures[f"p{q:g}_ms"] = round(percentile(latencies, q), 4)
    figures["max_ms"] = round(latencies[-1], 4)
    figures["mean_ms"] = round(statistics.fmean(latencies), 4)
    return figures


def align_columns(lines: list[list[Any]]) -> str:
    """Left-aligned text table; the first line is the header, underlined with dashes."""
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(lines[0]))]
    out = []
    for i, line in enumerate(lines):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


@dataclass(frozen=True)
class Metric:
    """One figure of one scenario, and how to judge the ratio of the two sides compared."""

    key: str
    higher_is_better: bool
    target: float | None = None  # on the ratio of the two sides

    def target_text(self) -> str:
        """The target as the report prints it (empty without one)."""
        if self.target is None:
            return ""
        return f"{'>=' if self.higher_is_better else '<='} {self.target:g}x"

    def met(self, ratio: float) -> bool:
        """Whether ``ratio`` reaches the target."""
        assert self.target is not None
        return ratio >= self.target if self.higher_is_better else ratio <= self.target


def run_stats(runs: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Median, min, max and the values of figure ``key`` over the successful ``runs``, and the
    count of failed runs."""
    values = [r[key] for r in runs if r.get("ok") and key in r]
    return {
        "median": statistics.median(values) if values else None,
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "runs": values,
        "failed": sum(1 for r in runs if not r.get("ok")),
    }


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 100_000:
        return f"{value / 1000:,.0f}k"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.3f}"


def format_cell(stats: dict[str, Any] | None) -> str:
    """A run_stats cell: median, ±half the min-max spread in %, failed runs."""
    if not stats or stats["median"] is None:
        return "FAILED" if stats and stats["failed"] else "-"
    med = stats["median"]
    spread = (stats["max"] - stats["min"]) / med * 50 if med and len(stats["runs"]) > 1 else 0.0
    text = _fmt(med) + (f" ±{spread:.0f}%" if spread else "")
    return text + (f" ({stats['failed']} failed)" if stats["failed"] else "")


def add_json_option(parser: argparse.ArgumentParser) -> None:
    """``--json [PATH]``: where :func:`print_report` writes the record."""
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        metavar="PATH",
        help="write the full record as JSON to PATH ('-' or no value: stdout, table to stderr)",
    )


def print_report(table: str, footer: str, record: dict[str, Any], json_target: str | None) -> None:
    """The table and a footer line, then the record as JSON to ``json_target`` if given: a
    path, or ``-`` for stdout (the table then goes to stderr)."""
    out = sys.stderr if json_target == "-" else sys.stdout
    print(table, file=out)
    print(f"\n{footer}", file=out)
    if json_target == "-":
        print(json.dumps(record, indent=1))
    elif json_target:
        Path(json_target).write_text(json.dumps(record, indent=1))
