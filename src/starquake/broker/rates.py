"""Message and byte rates for the stats, from running counters.

Each object that counts (a topic, producer, subscription or consumer) keeps its own running
counters; a :class:`RateWindow` beside them remembers the counters at the last two stats ticks
(``statsUpdateFrequencyInSecs`` apart). A rate is the change since the older of the two over the
time since then: an average over one to two intervals, always up to date, and nothing is done
per message beyond the counting.
"""

from __future__ import annotations

import time


class RateWindow:
    """The counters (messages, bytes) at the last two ticks."""

    __slots__ = ("_last", "_previous")

    def __init__(self, now: float | None = None) -> None:
        start = (time.monotonic() if now is None else now, 0, 0)
        self._previous = start
        self._last = start

    def tick(self, now: float, messages: int, size: int) -> None:
        """Remember the counters as they are at ``now`` (called once per stats interval)."""
        self._previous = self._last
        self._last = (now, messages, size)

    def rates(self, now: float, messages: int, size: int) -> tuple[float, float]:
        """(messages per second, bytes per second) over the time since the older tick."""
        since, messages_then, size_then = self._previous
        elapsed = now - since
        if elapsed <= 0:
            return 0.0, 0.0
        return (messages - messages_then) / elapsed, (size - size_then) / elapsed
