"""Options of the ``pulsar`` data source: parsed and checked when the query is planned.

Every problem raises :class:`PulsarOptionError` naming the option, so a typo fails at
``load()`` / ``save()`` / ``start()`` rather than inside an executor.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from starquake.spark._option_types import PulsarOptionError, StartSpec, canonical, checked_topic
from starquake.spark._passthrough import (
    admin_settings,
    client_settings,
    producer_settings,
    reader_settings,
)
from starquake.spark._read_limits import TriggerLimits, ending_spec, starting_spec, trigger_limits

__all__ = ["PulsarOptionError", "ReadOptions", "StartSpec", "WriteOptions"]

DEFAULT_SERVICE_URL = "pulsar://localhost:6650"
# The durable subscription a write keeps on its topics (option sinkSubscription; '' for none).
DEFAULT_SINK_SUBSCRIPTION = "spark-sink"

# Options Spark itself may put into a source's options.
_SPARK_OWN = {"path", "checkpointlocation", "queryname"}

_READ_KEYS = {
    "service.url",
    "admin.url",
    "topic",
    "topics",
    "topicspattern",
    "startingoffsets",
    "endingoffsets",
    "startingtime",
    "endingtime",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "includeheaders",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "maxbytespertrigger",
    "failondataloss",
    "maxrecordspertrigger",
    "maxoffsetspertrigger",
    "minpartitions",
    "polltimeoutms",
    "predefinedsubscription",
    "schema.decode",
}
_WRITE_KEYS = {
    "service.url",
    "admin.url",
    "topic",
    "writeid",
    "exactlyonce",
    "polltimeoutms",
    "schema.type",
    "schema.name",
    "sinksubscription",
    "exactlyoncemode",
    "transactiontimeoutms",
    "transactionlogtopic",
}
# exactlyOnceMode: how a write is made exactly once
DEDUPLICATION = "deduplication"
TRANSACTION = "transaction"
DEFAULT_TRANSACTION_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Checked options of a read (batch or streaming)."""

    service_url: str
    topics: tuple[str, ...]
    pattern: str | None
    starting: StartSpec
    ending: StartSpec
    fail_on_data_loss: bool
    limits: TriggerLimits
    min_partitions: int
    poll_timeout_s: float
    client_args: Mapping[str, Any]
    reader_args: Mapping[str, Any]
    subscription: str | None = None
    admin_url: str = ""
    # the settings of admin HTTP calls: client_args with the pulsar.admin.* ones over them
    admin_args: Mapping[str, Any] = field(default_factory=dict)
    include_headers: bool = False

    @property
    def max_records_per_trigger(self) -> int:
        return self.limits.max_records


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """Checked options of a write."""

    service_url: str
    admin_url: str | None
    topic: str | None
    write_id: str | None
    exactly_once: bool
    poll_timeout_s: float
    client_args: Mapping[str, Any]
    producer_args: Mapping[str, Any]
    sink_subscription: str | None = DEFAULT_SINK_SUBSCRIPTION
    admin_args: Mapping[str, Any] = field(default_factory=dict)
    # exactlyOnceMode=transaction: each task writes in a Pulsar transaction that the driver
    # commits (exactly_once, which means through deduplication, is then False)
    transactional: bool = False
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    # where a transactional write keeps its commit log and markers (transactionLogTopic)
    transaction_log_topic: str | None = None


def _get(options: Mapping[str, str], key: str) -> str | None:
    value = options.get(key)
    return None if value is None else str(value)


def _int(key: str, text: str, *, minimum: int = 0) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise PulsarOptionError(f"option {key!r}: {text!r} is not an integer") from None
    if value < minimum:
        raise PulsarOptionError(f"option {key!r}: must be at least {minimum}, got {value}")
    return value


def _bool(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise PulsarOptionError(f"option {key!r}: {text!r} is not true or false")


def _service_url(options: Mapping[str, str]) -> str:
    url = _get(options, "service.url") or DEFAULT_SERVICE_URL
    parts = urlsplit(url)
    if parts.scheme not in ("pulsar", "pulsar+ssl") or not parts.hostname:
        raise PulsarOptionError(
            f"option 'service.url': {url!r} is not a pulsar://host:port (or "
            "pulsar+ssl://host:port) service URL"
        )
    return url


def _admin_url(options: Mapping[str, str]) -> str | None:
    """The ``admin.url`` option, checked; None when not given (it is never guessed: the
    binary protocol's lookup answer carries no web service URL)."""
    url = _get(options, "admin.url")
    if url is None:
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PulsarOptionError(f"option 'admin.url': {url!r} is not an http(s) URL")
    return url.rstrip("/")


def _check_known(
    options: Mapping[str, str], allowed: set[str], prefixes: tuple[str, ...], kind: str
) -> None:
    for key in options:
        if key in allowed or key in _SPARK_OWN or key.startswith(prefixes):
            continue
        known = ", ".join(sorted(canonical(k) for k in allowed))
        raise PulsarOptionError(f"unknown option {key!r} for a {kind} (known: {known})")


def _pattern(text: str) -> str:
    pattern = text.strip()
    if "://" not in pattern:
        pattern = (
            f"persistent://public/default/{pattern}"
            if "/" not in pattern
            else f"persistent://{pattern}"
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise PulsarOptionError(f"option 'topicsPattern': bad regular expression: {exc}") from None
    if len(pattern.partition("://")[2].split("/")) < 3:
        raise PulsarOptionError(f"option 'topicsPattern': {text!r} names no namespace")
    return pattern


def _subscription(options: Mapping[str, str], streaming: bool) -> str | None:
    name = _get(options, "predefinedsubscription")
    if name is None:
        return None
    if not streaming:
        raise PulsarOptionError("option 'predefinedSubscription' is for streaming reads only")
    if not re.fullmatch(r"[^\s/]{1,256}", name):
        raise PulsarOptionError(f"option 'predefinedSubscription': {name!r} is not a name")
    return name


def _topics(options: Mapping[str, str]) -> tuple[tuple[str, ...], str | None]:
    """The topics named by ``topic`` / ``topics``, or the ``topicsPattern`` regex."""
    given = [k for k in ("topic", "topics", "topicspattern") if _get(options, k)]
    if len(given) != 1:
        raise PulsarOptionError(
            "exactly one of the options 'topic', 'topics' and 'topicsPattern' is needed"
            + (f" (got {', '.join(given)})" if given else "")
        )
    if given[0] == "topic":
        return (checked_topic("topic", _get(options, "topic") or ""),), None
    if given[0] == "topics":
        names = [t for t in (_get(options, "topics") or "").split(",") if t.strip()]
        if not names:
            raise PulsarOptionError("option 'topics': no topic named")
        return tuple(dict.fromkeys(checked_topic("topics", t) for t in names)), None
    return (), _pattern(_get(options, "topicspattern") or "")


@dataclass(frozen=True, slots=True)
class SourceTarget:
    """What the row layout of a read with ``schema.decode`` depends on."""

    service_url: str
    topics: tuple[str, ...]
    pattern: str | None
    client_args: Mapping[str, Any]


def source_target(options: Mapping[str, str]) -> SourceTarget | None:
    """The options that decide a read's row layout (the same for batch and streaming reads);
    None when ``schema.decode`` is off, the layout then being the raw one."""
    options = {str(k).lower(): v for k, v in options.items()}
    if not _bool("schema.decode", _get(options, "schema.decode") or "false"):
        return None
    topics, pattern = _topics(options)
    return SourceTarget(
        service_url=_service_url(options),
        topics=topics,
        pattern=pattern,
        client_args=client_settings(options),
    )


def include_headers(options: Mapping[str, str]) -> bool:
    """The ``includeHeaders`` option: whether rows get a ``headers`` column."""
    options = {str(k).lower(): v for k, v in options.items()}
    return _bool("includeHeaders", _get(options, "includeheaders") or "false")


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check the options of a read; raise :class:`PulsarOptionError` naming the bad one."""
    options = {str(k).lower(): v for k, v in options.items()}
    _check_known(
        options,
        _READ_KEYS,
        ("pulsar.client.", "pulsar.reader.", "pulsar.admin."),
        "read",
    )
    service_url = _service_url(options)
    topics, pattern = _topics(options)
    client_args = client_settings(options)
    return ReadOptions(
        service_url=service_url,
        topics=topics,
        pattern=pattern,
        starting=starting_spec(options, streaming),
        ending=ending_spec(options, streaming),
        fail_on_data_loss=_bool("failOnDataLoss", _get(options, "failondataloss") or "true"),
        limits=trigger_limits(options, streaming),
        min_partitions=_int("minPartitions", _get(options, "minpartitions") or "0"),
        poll_timeout_s=_int("pollTimeoutMs", _get(options, "polltimeoutms") or "120000", minimum=1)
        / 1000,
        client_args=client_args,
        reader_args=reader_settings(options),
        subscription=_subscription(options, streaming),
        admin_url=_admin_url(options) or "",
        admin_args=admin_settings(options, client_args),
        include_headers=include_headers(options),
    )


def check_read_options(options: Mapping[str, str]) -> None:
    """Raise the error that the options of a read would give both as a batch and as a
    streaming read (what only one kind refuses is raised when the reader is made)."""
    try:
        read_options(options, streaming=False)
    except PulsarOptionError as batch_error:
        try:
            read_options(options, streaming=True)
        except PulsarOptionError as stream_error:
            if str(stream_error) == str(batch_error):
                raise batch_error from None


def write_options(options: Mapping[str, str]) -> WriteOptions:
    """Check the options of a write; raise :class:`PulsarOptionError` naming the bad one."""
    options = {str(k).lower(): v for k, v in options.items()}
    _check_known(
        options, _WRITE_KEYS, ("pulsar.client.", "pulsar.producer.", "pulsar.admin."), "write"
    )
    service_url = _service_url(options)
    topic_text = _get(options, "topic")
    write_id = _get(options, "writeid")
    if write_id is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", write_id):
        raise PulsarOptionError("option 'writeId': use 1 to 64 letters, digits, '_', '-' or '.'")
    client_args = client_settings(options)
    topic = checked_topic("topic", topic_text) if topic_text else None
    exactly_once = _bool("exactlyOnce", _get(options, "exactlyonce") or "true")
    transactional = _exactly_once_mode(options, exactly_once) == TRANSACTION
    log_text = _get(options, "transactionlogtopic")
    log_topic = checked_topic("transactionLogTopic", log_text) if log_text else None
    if transactional and log_topic is None:
        if topic is None:
            raise PulsarOptionError(
                "option 'transactionLogTopic' is needed with exactlyOnceMode=transaction when "
                "the rows name their topics ('__topic' column, no option 'topic')"
            )
        log_topic = f"{topic}-spark-txn"
    return WriteOptions(
        service_url=service_url,
        admin_url=_admin_url(options),
        topic=topic,
        write_id=write_id,
        exactly_once=exactly_once and not transactional,
        transactional=transactional,
        transaction_timeout_ms=_int(
            "transactionTimeoutMs",
            _get(options, "transactiontimeoutms") or str(DEFAULT_TRANSACTION_TIMEOUT_MS),
            minimum=1000,
        ),
        transaction_log_topic=log_topic,
        poll_timeout_s=_int("pollTimeoutMs", _get(options, "polltimeoutms") or "120000", minimum=1)
        / 1000,
        client_args=client_args,
        producer_args=producer_settings(options),
        sink_subscription=_sink_subscription(options),
        admin_args=admin_settings(options, client_args),
    )


def _sink_subscription(options: Mapping[str, str]) -> str | None:
    name = _get(options, "sinksubscription")
    if name is None:
        return DEFAULT_SINK_SUBSCRIPTION
    if not name.strip():
        return None
    if not re.fullmatch(r"[^\s/]{1,256}", name):
        raise PulsarOptionError(f"option 'sinkSubscription': {name!r} is not a name")
    return name


def _exactly_once_mode(options: Mapping[str, str], exactly_once: bool) -> str:
    mode = (_get(options, "exactlyoncemode") or DEDUPLICATION).strip().lower()
    if mode not in (DEDUPLICATION, TRANSACTION):
        raise PulsarOptionError(
            f"option 'exactlyOnceMode': {mode!r} is not {DEDUPLICATION!r} or {TRANSACTION!r}"
        )
    if mode == TRANSACTION and not exactly_once:
        raise PulsarOptionError(
            "option 'exactlyOnceMode': 'transaction' makes a write exactly once; it does not "
            "go with exactlyOnce=false"
        )
    return mode
