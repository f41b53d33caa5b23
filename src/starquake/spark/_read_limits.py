"""Read options with Kafka's names: where a read starts and ends, and how much one micro-batch
takes (``maxRecordsPerTrigger``/``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` with
``maxTriggerDelay``, ``maxBytesPerTrigger``)."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

from starquake.client.topics import partition_name
from starquake.spark._offsets import parse_offsets
from starquake.spark._option_types import PulsarOptionError, StartSpec, checked_topic

__all__ = ["TriggerLimits", "ending_spec", "starting_spec", "trigger_limits"]

# Kafka's default maxTriggerDelay, 15 minutes
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000

_STARTS = ("startingOffsets", "startingTime", "startingTimestamp", "startingOffsetsByTimestamp")
# Kafka's names of the start-time options: their strategy defaults to Kafka's ("error")
_KAFKA_TIME_STARTS = ("startingTimestamp", "startingOffsetsByTimestamp")
_ENDS = ("endingOffsets", "endingTime", "endingTimestamp", "endingOffsetsByTimestamp")
_UNITS_MS = {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000}
_UNITS_MS["d"] = 24 * _UNITS_MS["h"]


def _whole(key: str, text: str, minimum: int = 0) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise PulsarOptionError(f"option {key!r}: {text!r} is not an integer") from None
    if value < minimum:
        raise PulsarOptionError(f"option {key!r}: must be at least {minimum}, got {value}")
    return value


def _one_of(options: Mapping[str, str], names: tuple[str, ...]) -> tuple[str, str] | None:
    given = [n for n in names if n.lower() in options]
    if len(given) > 1:
        raise PulsarOptionError(
            f"options {' and '.join(repr(n) for n in given)} exclude each other; give one"
        )
    return (given[0], str(options[given[0].lower()])) if given else None


def parse_timestamps(key: str, text: str, default: str) -> StartSpec:
    """Kafka's ``...OffsetsByTimestamp`` JSON, ``{"<topic>": {"<partition index>": ms}}``; a
    topic may also map to one time for all its partitions, and a partition's full name may be
    a key."""
    try:
        data = json.loads(text)
    except ValueError:
        raise PulsarOptionError(f"option {key!r}: {text!r} is not JSON") from None
    if not isinstance(data, dict) or not data:
        raise PulsarOptionError(
            f'option {key!r}: give a JSON object such as {{"topic": {{"0": 1700000000000}}}}'
        )
    times: dict[str, int] = {}
    for topic_text, value in data.items():
        topic = checked_topic(key, str(topic_text))
        items = value.items() if isinstance(value, dict) else [("-1", value)]
        for index_text, ms in items:
            try:
                index = int(index_text)
            except ValueError:
                raise PulsarOptionError(
                    f"option {key!r}: partition {index_text!r} of {topic} is not a number"
                ) from None
            if isinstance(ms, bool) or not isinstance(ms, int) or ms < 0:
                raise PulsarOptionError(
                    f"option {key!r}: {ms!r} for {topic} is not a time in ms since the epoch"
                )
            times[partition_name(topic, index) if index >= 0 else topic] = ms
    return StartSpec("times", times=times, default=default, option=key)


def _spec(options: Mapping[str, str], names: tuple[str, ...], default: str) -> StartSpec | None:
    found = _one_of(options, names)
    if found is None:
        return None
    key, text = found
    if key.endswith("ByTimestamp"):
        return parse_timestamps(key, text, default)
    if key.endswith(("Time", "Timestamp")):
        return StartSpec("time", time_ms=_whole(key, text), option=key)
    return parse_offsets(key, text, default)


def _strategy(options: Mapping[str, str], spec: StartSpec) -> str:
    """``startingOffsetsByTimestampStrategy``: what a start time does on a partition with no
    message published at or after it. ``error`` (Kafka's default, and the default with Kafka's
    option names) fails the query, ``latest`` starts the partition at its end (the default
    with ``startingTime``, pulsar-spark's name)."""
    key = "startingOffsetsByTimestampStrategy"
    text = options.get(key.lower())
    if text is None:
        return "error" if spec.option in _KAFKA_TIME_STARTS else "latest"
    if spec.kind not in ("time", "times"):
        raise PulsarOptionError(
            f"option {key!r} applies only with 'startingTimestamp', 'startingTime' or "
            "'startingOffsetsByTimestamp'"
        )
    strategy = str(text).strip().lower()
    if strategy not in ("error", "latest"):
        raise PulsarOptionError(f"option {key!r}: {text!r} is not 'error' or 'latest'")
    return strategy


def starting_spec(options: Mapping[str, str], streaming: bool) -> StartSpec:
    """Where the read starts: one of ``startingOffsets``, ``startingTime`` (alias
    ``startingTimestamp``) and ``startingOffsetsByTimestamp``, with
    ``startingOffsetsByTimestampStrategy`` for the times."""
    default = "latest" if streaming else "earliest"
    spec = _spec(options, _STARTS, default) or StartSpec(default, default=default)
    if not streaming and spec.kind == "latest":
        raise PulsarOptionError(
            "option 'startingOffsets': 'latest' is not allowed in a batch read (it reads nothing)"
        )
    return dataclasses.replace(spec, strategy=_strategy(options, spec))


def ending_spec(options: Mapping[str, str], streaming: bool) -> StartSpec:
    """Where a batch read ends: one of ``endingOffsets``, ``endingTime`` (alias
    ``endingTimestamp``) and ``endingOffsetsByTimestamp``; latest by default."""
    given = [n for n in _ENDS if n.lower() in options]
    if streaming and given:
        raise PulsarOptionError(
            f"option {given[0]!r} is for batch reads only; a streaming query reads on"
        )
    spec = _spec(options, _ENDS, "latest") or StartSpec("latest", default="latest")
    if spec.kind == "earliest":
        raise PulsarOptionError("option 'endingOffsets': 'earliest' would read nothing")
    return spec


def duration_ms(key: str, text: str) -> int:
    """A duration as Spark writes them (``15m``, ``30s``, ``500ms``; a bare number is ms)."""
    match = re.fullmatch(r"\s*(\d+)\s*(us|ms|s|m|min|h|d)?\s*", text.lower())
    if match is None:
        raise PulsarOptionError(
            f"option {key!r}: {text!r} is not a duration (e.g. 500ms, 30s, 15m, 1h)"
        )
    return int(int(match.group(1)) * _UNITS_MS[match.group(2) or "ms"])


@dataclass(frozen=True, slots=True)
class TriggerLimits:
    """How much one micro-batch reads (0: no such limit)."""

    max_records: int = 0
    min_records: int = 0
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    max_bytes: int = 0


def trigger_limits(options: Mapping[str, str], streaming: bool) -> TriggerLimits:
    """The per-trigger limits of a streaming read (each refused in a batch read)."""
    if "maxrecordspertrigger" in options and "maxoffsetspertrigger" in options:
        raise PulsarOptionError(
            "options 'maxRecordsPerTrigger' and 'maxOffsetsPerTrigger' are aliases; give one"
        )
    max_found = _one_of(options, ("maxRecordsPerTrigger", "maxOffsetsPerTrigger"))
    limits = TriggerLimits(
        max_records=_whole(*max_found, 1) if max_found else 0,
        min_records=_whole("minOffsetsPerTrigger", options.get("minoffsetspertrigger", "0"), 0),
        max_bytes=_whole("maxBytesPerTrigger", options.get("maxbytespertrigger", "0"), 0),
    )
    names = [n for n in ("minOffsetsPerTrigger", "maxTriggerDelay") if n.lower() in options]
    names += ["maxBytesPerTrigger"] if "maxbytespertrigger" in options else []
    if max_found is not None:
        names.insert(0, max_found[0])
    if names and not streaming:
        raise PulsarOptionError(f"option {names[0]!r} is for streaming reads only")
    for name in ("minOffsetsPerTrigger", "maxBytesPerTrigger"):
        if name.lower() in options and _whole(name, options[name.lower()]) < 1:
            raise PulsarOptionError(f"option {name!r}: must be at least 1")
    if "maxtriggerdelay" in options:
        if not limits.min_records:
            raise PulsarOptionError(
                "option 'maxTriggerDelay' applies only with 'minOffsetsPerTrigger'"
            )
        delay = duration_ms("maxTriggerDelay", str(options["maxtriggerdelay"]))
        limits = TriggerLimits(limits.max_records, limits.min_records, delay, limits.max_bytes)
    if limits.max_records and limits.min_records > limits.max_records:
        raise PulsarOptionError(
            f"option 'minOffsetsPerTrigger' ({limits.min_records}) is higher than "
            f"{max_found[0] if max_found else 'maxRecordsPerTrigger'!r} ({limits.max_records})"
        )
    return limits
