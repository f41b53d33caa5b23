"""The next consumer of a Shared subscription, as Pulsar picks it.

Consumers of the highest priority (the lowest ``priority_level``) among those that can take an
entry get entries round-robin; a consumer of a lower priority gets entries only while no
consumer of a higher one can take them. With one priority level (the usual case: the official
Python client cannot set another) this is a plain round-robin.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer


class RoundRobin:
    """Round-robin over a list of consumers, highest priority first."""

    __slots__ = ("_mixed", "_next")

    def __init__(self) -> None:
        self._next = 0
        self._mixed = False

    def consumers_changed(self, consumers: list[Consumer]) -> None:
        """Consumers came or went: note whether they are of more than one priority level."""
        self._mixed = len({c.priority_level for c in consumers}) > 1

    def pick(
        self, consumers: list[Consumer], can_receive: Callable[[Consumer], bool]
    ) -> Consumer | None:
        """The next consumer that ``can_receive``, of the highest priority among those that
        can (None when none can)."""
        n = len(consumers)
        level = None
        if self._mixed:
            levels = [c.priority_level for c in consumers if can_receive(c)]
            if not levels:
                return None
            level = min(levels)
        for _ in range(n):
            if self._next >= n:
                self._next = 0
            consumer = consumers[self._next]
            self._next += 1
            if (level is None or consumer.priority_level == level) and can_receive(consumer):
                return consumer
        return None
