"""Values as pulsar-admin's options write them: message ids, durations and sizes."""

from __future__ import annotations

import re

__all__ = ["EARLIEST", "LATEST", "parse_message_id", "parse_relative_seconds", "parse_size_mb"]

# MessageId.latest and MessageId.earliest as Pulsar's admin API spells them
LATEST = (2**63 - 1, 2**63 - 1)
EARLIEST = (-1, -1)


def parse_message_id(text: str) -> tuple[int, int]:
    """``ledgerId:entryId``, ``earliest`` or ``latest`` as ``(ledger, entry)``."""
    lowered = text.strip().lower()
    if lowered == "latest":
        return LATEST
    if lowered == "earliest":
        return EARLIEST
    parts = lowered.split(":")
    if len(parts) != 2:
        raise ValueError(f"invalid message id {text!r}: expected LEDGER:ENTRY")
    try:
        return int(parts[0]), int(parts[1])
    except ValueError:
        raise ValueError(f"invalid message id {text!r}: expected LEDGER:ENTRY") from None


_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_RELATIVE_TIME = re.compile(r"(-?\d+)([smhdwy]?)")


def parse_relative_seconds(text: str) -> int:
    """A duration such as ``30``, ``90s``, ``10m``, ``1h``, ``2d``, ``1w`` in seconds (a bare
    number is seconds, as in pulsar-admin)."""
    match = _RELATIVE_TIME.fullmatch(text.strip().lower())
    if not match:
        raise ValueError(f"invalid time {text!r}: expected a number with s, m, h, d, w or y")
    return int(match.group(1)) * _TIME_UNITS[match.group(2) or "s"]


_SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}
_SIZE = re.compile(r"(-?\d+)([kmgt]?)")


def parse_size_mb(text: str) -> int:
    """A size such as ``4096``, ``10M``, ``16G``, ``3T`` (a bare number is bytes) in MB, as
    pulsar-admin's ``--size``; ``-1`` stays -1 (no limit)."""
    match = _SIZE.fullmatch(text.strip().lower())
    if not match:
        raise ValueError(f"invalid size {text!r}: expected a number with k, M, G or T")
    value = int(match.group(1))
    if value < 0:
        return -1
    return value * _SIZE_UNITS[match.group(2)] // 1024**2
