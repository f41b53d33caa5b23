"""Acknowledgment grouping and negative-acknowledgment timing for one consumer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from starquake.client.base._message import MessageId
from starquake.client.consumer._timeouts import pop_due
from starquake.protocol import client_commands
from starquake.protocol.enums import AckType
from starquake.protocol.wire import pb

_INDIVIDUAL = AckType.Individual
_CUMULATIVE = AckType.Cumulative
EntryKey = tuple[int, int]


def _order(data: pb.MessageIdData) -> tuple[int, int]:
    def signed(v: int) -> int:
        return v - (1 << 64) if v >= 1 << 63 else v

    return (signed(data.ledgerId), signed(data.entryId))


class AckGroupingTracker:
    """Collects acks and sends them every ``group_ms`` (or at ``max_size`` ids).

    ``send`` writes a command and returns False when there is no connection; the acks are then
    kept and sent after the next flush on a live connection.
    """

    def __init__(
        self, consumer_id: int, send: Callable[[pb.BaseCommand], bool], group_ms: int, max_size: int
    ) -> None:
        self._consumer_id = consumer_id
        self._send = send
        self._group = group_ms / 1000
        self._max_size = max_size
        self._individual: dict[EntryKey, pb.MessageIdData] = {}
        self._cumulative: pb.MessageIdData | None = None
        self._cumulative_dirty = False
        self._timer: asyncio.TimerHandle | None = None

    def add_individual(self, ids: Iterable[pb.MessageIdData]) -> None:
        for data in ids:
            self._individual[_order(data)] = data
        if self._group <= 0 or len(self._individual) >= self._max_size:
            self.flush()
        else:
            self._arm()

    def add_cumulative(self, data: pb.MessageIdData) -> None:
        if self._cumulative is None or _order(data) > _order(self._cumulative):
            self._cumulative = data
            self._cumulative_dirty = True
        if self._group <= 0:
            self.flush()
        else:
            self._arm()

    def _arm(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._group, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> None:
        """Send whatever is pending (kept when not connected)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._cumulative_dirty and self._cumulative is not None:
            cmd = client_commands.ack(self._consumer_id, _CUMULATIVE, [self._cumulative])
            if self._send(cmd):
                self._cumulative_dirty = False
        if self._individual:
            ids = list(self._individual.values())
            for start in range(0, len(ids), self._max_size):
                cmd = client_commands.ack(
                    self._consumer_id, _INDIVIDUAL, ids[start : start + self._max_size]
                )
                if not self._send(cmd):
                    return
            self._individual.clear()

    def reset(self) -> None:
        """Forget acks that are no longer meaningful (after a seek)."""
        self._individual.clear()
        self._cumulative = None
        self._cumulative_dirty = False

    def close(self) -> None:
        self.flush()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class NegativeAcksTracker:
    """Holds negatively acknowledged messages until their redelivery delay has passed.

    Each message has its own delay (the fixed ``negative_ack_redelivery_delay_ms`` or a backoff
    of its redelivery count); the timer fires at the earliest deadline and hands every due
    message to ``redeliver`` in one call.
    """

    def __init__(self, redeliver: Callable[[list[MessageId]], None]) -> None:
        self._redeliver = redeliver
        self._entries: dict[EntryKey, tuple[float, MessageId]] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, mid: MessageId, delay_ms: int) -> None:
        deadline = time.monotonic() + max(delay_ms, 0) / 1000
        self._entries[mid.entry_key] = (deadline, mid)
        self._arm(deadline)

    def _arm(self, deadline: float) -> None:
        if self._timer is not None:
            if self._timer_at <= deadline:
                return
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer_at = deadline
        self._timer = loop.call_later(max(deadline - time.monotonic(), 0.0), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = time.monotonic()
        due = pop_due(self._entries, now)
        if due:
            self._redeliver(due)
        if self._entries:
            self._arm(min(deadline for deadline, _ in self._entries.values()))

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._entries.clear()
