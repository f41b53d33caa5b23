"""The error and the start position that option parsing and offset parsing share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from starquake.client.bulk import Position
from starquake.client.topics import InvalidTopicNameError, normalize_topic

__all__ = ["PulsarOptionError", "StartSpec", "checked_topic"]


class PulsarOptionError(ValueError):
    """An option of the ``pulsar`` data source is unknown, malformed or conflicts with another."""


@dataclass(frozen=True, slots=True)
class StartSpec:
    """Where reading starts: ``earliest``, ``latest``, a publish time, or per-partition positions.

    ``positions`` maps a partition's full name to a position; ``default`` applies to partitions
    it does not name (``earliest`` or ``latest``).
    """

    kind: str  # "earliest" | "latest" | "time" | "positions"
    time_ms: int = 0
    positions: Mapping[str, Position] = field(default_factory=dict)
    default: str = "earliest"


def checked_topic(key: str, text: str) -> str:
    """The full name of the topic ``text`` given in option ``key``; PulsarOptionError if bad."""
    try:
        return normalize_topic(text.strip())
    except InvalidTopicNameError as exc:
        raise PulsarOptionError(f"option {key!r}: {exc}") from None
