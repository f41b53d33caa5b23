"""Offsets given as options (``startingOffsets``, ``endingOffsets``): parsed into positions."""

from __future__ import annotations

import json
from typing import Any

from starquake.client.bulk import EARLIEST, Position
from starquake.client.topics import partition_name
from starquake.spark._option_types import PulsarOptionError, StartSpec, checked_topic

__all__ = ["is_latest_sentinel", "parse_offsets"]


def _position(key: str, value: Any) -> Position | str:
    """One partition's position in an offsets JSON (see :func:`parse_offsets`)."""
    if value in (-2, "earliest"):
        return "earliest"
    if value in (-1, "latest"):
        return "latest"
    if isinstance(value, dict):
        try:
            return (int(value["ledger"]), int(value["entry"]), max(int(value.get("batch", 0)), 0))
        except (KeyError, TypeError, ValueError):
            raise PulsarOptionError(
                f"option {key!r}: {value!r} is not {{'ledger': L, 'entry': E, 'batch': B}}"
            ) from None
    if isinstance(value, list) and all(isinstance(v, int) for v in value):
        if len(value) == 3:
            return (value[0], value[1], max(value[2], 0))
        if len(value) >= 4 and all(0 <= v < 256 for v in value):
            from starquake.client import MessageId

            try:
                mid = MessageId.deserialize(bytes(value))
            except Exception:
                raise PulsarOptionError(
                    f"option {key!r}: {value!r} is not a serialized message id"
                ) from None
            return (mid.ledger_id(), mid.entry_id(), max(mid.batch_index(), 0))
    raise PulsarOptionError(
        f"option {key!r}: {value!r} is not a position ([ledger, entry, batch], "
        "a serialized message id as a list of bytes, -2/'earliest' or -1/'latest')"
    )


def parse_offsets(key: str, text: str, default: str) -> StartSpec:
    """``earliest``, ``latest`` or JSON: ``{"<partition topic>": position}`` or, as Kafka writes
    it, ``{"<topic>": {"<partition index>": position}}``."""
    lowered = text.strip().lower()
    if lowered in ("earliest", "latest"):
        return StartSpec(lowered, default=lowered)
    try:
        data = json.loads(text)
    except ValueError:
        raise PulsarOptionError(
            f"option {key!r}: {text!r} is neither 'earliest', 'latest' nor JSON"
        ) from None
    if not isinstance(data, dict):
        raise PulsarOptionError(f"option {key!r}: the JSON must be an object keyed by topic")
    positions: dict[str, Position] = {}
    defaults: dict[str, str] = {}
    for topic_text, value in data.items():
        topic = checked_topic(key, topic_text)
        if isinstance(value, dict) and not {"ledger", "entry"} <= set(value):
            for index_text, inner in value.items():
                try:
                    index = int(index_text)
                except ValueError:
                    raise PulsarOptionError(
                        f"option {key!r}: partition {index_text!r} of {topic} is not a number"
                    ) from None
                name = partition_name(topic, index) if index >= 0 else topic
                _put(positions, defaults, name, _position(key, inner))
        else:
            _put(positions, defaults, topic, _position(key, value))
    return StartSpec("positions", positions=_with_sentinels(positions, defaults), default=default)


def _put(
    positions: dict[str, Position], defaults: dict[str, str], name: str, where: Position | str
) -> None:
    if isinstance(where, str):
        defaults[name] = where
    else:
        positions[name] = where


_LATEST_SENTINEL: Position = (-9, -9, -9)


def _with_sentinels(
    positions: dict[str, Position], defaults: dict[str, str]
) -> dict[str, Position]:
    merged = dict(positions)
    for name, where in defaults.items():
        merged[name] = EARLIEST if where == "earliest" else _LATEST_SENTINEL
    return merged


def is_latest_sentinel(position: Position) -> bool:
    """True for a partition given as ``latest`` (-1) inside an offsets JSON."""
    return position == _LATEST_SENTINEL
