"""What a backend whose ledgers commit by themselves (cluster mode's JetStream records) tells
the broker's metrics about its appends: each durable record's latency, entries and bytes, and
the appends that failed."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["AppendObserver", "AppendStats"]

AppendObserver = Callable[[float, int, int], None]
"""Called with a durable record's seconds from write to acknowledgement, entries and bytes."""


class AppendStats:
    """The observers of a backend's appends and its count of failed ones."""

    def __init__(self) -> None:
        self.observers: list[AppendObserver] = []
        self.failures = 0
        """Appends that failed (fenced, refused, or unanswered: their ledgers were fenced)."""

    def appended(self, seconds: float, entries: int, size: int) -> None:
        for observer in self.observers:
            observer(seconds, entries, size)

    def failed(self) -> None:
        self.failures += 1
