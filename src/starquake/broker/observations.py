"""Counters the broker keeps on its hot paths for ``/metrics``: bucketed latencies and sizes,
and connection counts.

Observing a value costs one bisection over a tuple of bounds and one increment of a list slot:
nothing is allocated per message. Pulsar reports its bucketed topic values (the
``pulsar_storage_write_latency_le_*`` and ``pulsar_entry_size_le_*`` gauges) over the last
completed stats interval (``statsUpdateFrequencyInSecs``), and so do these: :meth:`Buckets.tick`
closes an interval. The broker's publish latency is a summary: its count and sum run since
start, its quantiles cover the last completed interval.
"""

from __future__ import annotations

from bisect import bisect_left

# Pulsar's bucket bounds (a value v lands in the first bucket whose bound is >= v; one more
# bucket past the last bound holds the overflow), and the suffixes of its metric names.
WRITE_LATENCY_BOUNDS_MS = (0.5, 1.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 1000.0)
WRITE_LATENCY_SUFFIXES = ("0_5", "1", "5", "10", "20", "50", "100", "200", "1000", "overflow")
ENTRY_SIZE_BOUNDS = (128, 512, 1024, 2048, 4096, 16384, 102400, 1048576)
ENTRY_SIZE_SUFFIXES = ("128", "512", "1_kb", "2_kb", "4_kb", "16_kb", "100_kb", "1_mb", "overflow")

# The broker-wide publish latency in finer buckets (about 12% apart, 10 µs .. 60 s), for its
# quantiles.
_FINE_BOUNDS_MS = tuple(sorted({round(0.01 * 1.125**i, 6) for i in range(133)}))
PUBLISH_QUANTILES = (0.0, 0.5, 0.95, 0.99, 0.999, 0.9999, 1.0)


class Buckets:
    """Observations counted by bucket, with their number and sum, since creation and over
    the last completed interval."""

    __slots__ = ("_mark", "bounds", "counts", "last", "last_count", "last_sum", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        """Observations per bucket since creation (the last one: over the last bound)."""
        self.sum = 0.0
        self.last = [0] * (len(bounds) + 1)
        """Observations per bucket over the last completed interval."""
        self.last_count = 0
        self.last_sum = 0.0
        self._mark: tuple[list[int], float] = (list(self.counts), 0.0)

    def observe(self, value: float) -> None:
        """Count ``value`` in its bucket."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    @property
    def count(self) -> int:
        """Observations since creation."""
        return sum(self.counts)

    def tick(self) -> None:
        """Close the interval: what was observed since the previous tick becomes ``last``."""
        counts, total = self._mark
        self.last = [now - then for now, then in zip(self.counts, counts, strict=True)]
        self.last_count = sum(self.last)
        self.last_sum = self.sum - total
        self._mark = (list(self.counts), self.sum)


class PublishLatency(Buckets):
    """The broker's publish latency, in milliseconds: from reading a SEND off the connection to
    the entry being durable (its receipt is sent then)."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__(_FINE_BOUNDS_MS)

    def quantile(self, q: float) -> float:
        """The ``q`` quantile over the last completed interval (the upper bound of the bucket
        it falls in; NaN when nothing was published in that interval)."""
        total = self.last_count
        if total == 0:
            return float("nan")
        rank = max(q * total, 1.0)
        seen = 0
        for index, count in enumerate(self.last):
            seen += count
            if seen >= rank:
                return self.bounds[index] if index < len(self.bounds) else float("inf")
        return float("inf")


class ConnectionCounts:
    """Connections of the binary protocol as Pulsar counts them."""

    __slots__ = ("closed", "created", "failed", "succeeded")

    def __init__(self) -> None:
        self.created = 0
        """Connections accepted."""
        self.succeeded = 0
        """Connections whose CONNECT was accepted."""
        self.failed = 0
        """Connections whose CONNECT was refused (authentication)."""
        self.closed = 0
        """Connections closed."""
