"""Redelivery timing: the backoff policy, and the ack-timeout (unacked messages) tracker.

Both trackers here and in :mod:`._acks` hold message ids keyed by their stored entry
``(ledger_id, entry_id)``: redelivery is requested per entry, and a chunked message is keyed by
its last chunk (its id carries every chunk, and all of them are redelivered together).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Protocol

from starquake.client.base._message import MessageId

EntryKey = tuple[int, int]

# The official clients refuse an ack timeout under 10 s (C++ ConsumerConfiguration).
MIN_UNACKED_MESSAGES_TIMEOUT_MS = 10_000
DEFAULT_TICK_DURATION_MS = 1000


class RedeliveryBackoff(Protocol):
    """What a redelivery backoff offers: the delay (ms) for a message's redelivery count."""

    def next(self, redelivery_count: int) -> int: ...


class MultiplierRedeliveryBackoff:
    """Exponential backoff, as the Java client's ``MultiplierRedeliveryBackoff``.

    ``next(n)`` is ``min_delay_ms`` for ``n <= 0``, otherwise
    ``min(min_delay_ms * multiplier ** n, max_delay_ms)``, where ``n`` is the redelivery count of
    the message being negatively acknowledged (0 on its first delivery). With the defaults
    below changed to min 1 s, max 60 s, multiplier 2, successive nacks of one message wait
    1, 2, 4, 8, 16, 32, 60, 60, ... seconds.

    The official Python client has no backoff argument; this is a Starquake extension (Java's
    defaults: 10 s, 10 min, 2).
    """

    def __init__(
        self, min_delay_ms: int = 10_000, max_delay_ms: int = 600_000, multiplier: float = 2.0
    ) -> None:
        if min_delay_ms < 0:
            raise ValueError("min_delay_ms must be >= 0")
        if max_delay_ms < min_delay_ms:
            raise ValueError("max_delay_ms must be >= min_delay_ms")
        if multiplier <= 1:
            raise ValueError("multiplier must be > 1")
        self.min_delay_ms = min_delay_ms
        self.max_delay_ms = max_delay_ms
        self.multiplier = multiplier
        ratio = max_delay_ms / min_delay_ms if min_delay_ms > 0 else 1.0
        self._max_power = int(math.log(ratio) / math.log(multiplier)) + 1

    def next(self, redelivery_count: int) -> int:
        """Delay in ms before redelivering a message seen ``redelivery_count`` times before."""
        if redelivery_count <= 0 or self.min_delay_ms <= 0:
            return self.min_delay_ms
        if redelivery_count > self._max_power:
            return self.max_delay_ms
        return min(int(self.min_delay_ms * self.multiplier**redelivery_count), self.max_delay_ms)

    def __repr__(self) -> str:
        return (
            f"MultiplierRedeliveryBackoff(min_delay_ms={self.min_delay_ms}, "
            f"max_delay_ms={self.max_delay_ms}, multiplier={self.multiplier})"
        )


def pop_due(entries: dict[EntryKey, tuple[float, MessageId]], now: float) -> list[MessageId]:
    """Remove the entries whose deadline is ``now`` or earlier; their ids, in order."""
    due = [key for key, (deadline, _) in entries.items() if deadline <= now]
    return [entries.pop(key)[1] for key in due]


class UnackedMessageTracker:
    """Redelivers messages the application received but did not acknowledge in time.

    A message is tracked from the moment the application takes it; every ``tick_ms`` the
    tracker asks for the redelivery of those older than the timeout (plus ``backoff(count)``
    when a backoff is set), so a message comes back between ``timeout`` and ``timeout + tick``.
    """

    def __init__(
        self,
        timeout_ms: int,
        tick_ms: int,
        redeliver: Callable[[list[MessageId]], None],
        backoff: RedeliveryBackoff | None = None,
    ) -> None:
        self._timeout = timeout_ms / 1000
        self._tick = max(tick_ms, 1) / 1000
        self._redeliver = redeliver
        self._backoff = backoff
        self._entries: dict[EntryKey, tuple[float, MessageId]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, mid: MessageId, redelivery_count: int = 0) -> None:
        """Start the clock for ``mid`` (a no-op if its entry is already tracked)."""
        key = mid.entry_key
        if key in self._entries:
            return
        delay = self._timeout
        if self._backoff is not None:
            delay += self._backoff.next(redelivery_count) / 1000
        self._entries[key] = (time.monotonic() + delay, mid)
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._tick, self._on_tick)

    def remove(self, key: EntryKey) -> None:
        """The entry was acknowledged (or negatively acknowledged)."""
        self._entries.pop(key, None)

    def remove_up_to(self, key: EntryKey) -> None:
        """A cumulative acknowledgment covered every entry up to ``key``."""
        for tracked in [k for k in self._entries if k <= key]:
            del self._entries[tracked]

    def clear(self) -> None:
        """Everything unacknowledged is being redelivered anyway."""
        self._entries.clear()

    def _on_tick(self) -> None:
        self._timer = None
        now = time.monotonic()
        due = pop_due(self._entries, now)
        if due:
            self._redeliver(due)
        if self._entries:
            self._timer = asyncio.get_running_loop().call_later(self._tick, self._on_tick)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._entries.clear()
