"""Acknowledgment grouping and negative-acknowledgment timing for one consumer."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable

from starquake.client import _commands
from starquake.protocol._generated import starquake_wire_pb2 as pb

_INDIVIDUAL = pb.CommandAck.Individual
_CUMULATIVE = pb.CommandAck.Cumulative
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
            cmd = _commands.ack(self._consumer_id, _CUMULATIVE, [self._cumulative])
            if self._send(cmd):
                self._cumulative_dirty = False
        if self._individual:
            ids = list(self._individual.values())
            for start in range(0, len(ids), self._max_size):
                cmd = _commands.ack(
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
    """Holds negatively acknowledged entries until their redelivery delay has passed."""

    def __init__(self, delay_ms: int, redeliver: Callable[[list[pb.MessageIdData]], None]) -> None:
        self._delay = delay_ms / 1000
        self._redeliver = redeliver
        self._entries: dict[EntryKey, tuple[float, pb.MessageIdData]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def add(self, data: pb.MessageIdData) -> None:
        self._entries[_order(data)] = (time.monotonic() + self._delay, data)
        if self._timer is None:
            tick = max(self._delay / 3, 0.01) if self._delay > 0 else 0.001
            self._timer = asyncio.get_running_loop().call_later(tick, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        now = time.monotonic()
        due = [key for key, (deadline, _) in self._entries.items() if deadline <= now]
        if due:
            ids = [self._entries.pop(key)[1] for key in due]
            self._redeliver(ids)
        if self._entries:
            tick = max(self._delay / 3, 0.01) if self._delay > 0 else 0.001
            self._timer = asyncio.get_running_loop().call_later(tick, self._on_timer)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._entries.clear()
