"""Pieces the benchmark scripts share; imports no client module (workers import exactly one)."""

from __future__ import annotations

import struct
import time
from dataclasses import dataclass
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


def align_columns(lines: list[list[Any]]) -> str:
    """Left-aligned text table; the first line is the header, underlined with dashes."""
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(lines[0]))]
    out = []
    for i, line in enumerate(lines):
        out.append("  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)
