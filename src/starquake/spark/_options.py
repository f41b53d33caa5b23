"""Options of the ``pulsar`` data source: parsed and checked when the query is planned.

Every problem raises :class:`PulsarOptionError` naming the option, so a typo fails at
``load()`` / ``save()`` / ``start()`` rather than inside an executor.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starquake.client._auth import create_authentication
from starquake.spark._offsets import parse_offsets
from starquake.spark._option_types import PulsarOptionError, StartSpec, canonical, checked_topic

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
}

_COMPRESSION = {"none", "lz4", "zlib", "zstd", "snappy"}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """Checked options of a read (batch or streaming)."""

    service_url: str
    topics: tuple[str, ...]
    pattern: str | None
    starting: StartSpec
    ending: StartSpec
    fail_on_data_loss: bool
    max_records_per_trigger: int
    min_partitions: int
    poll_timeout_s: float
    client_args: Mapping[str, Any]
    reader_args: Mapping[str, Any]
    subscription: str | None = None
    admin_url: str = ""


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


def _as_int(key: str, text: str) -> int:
    return _int(key, text)


def _thousandths(key: str, text: str) -> int:
    """ms as seconds, or µs as ms: rounded up, at least 1."""
    return max(1, math.ceil(_int(key, text) / 1000))


def _as_text(_key: str, text: str) -> str:
    return text


def _codec(key: str, text: str) -> str:
    codec = text.strip().lower()
    if codec not in _COMPRESSION:
        raise PulsarOptionError(
            f"option {key!r}: {text!r} is not one of {', '.join(sorted(_COMPRESSION))}"
        )
    return codec


Converter = Callable[[str, str], Any]
# Pass-through settings by their lowercased names (ours, and the Java client's) ->
# (keyword argument of our client, conversion of the option text).
_CLIENT: dict[str, tuple[str, Converter]] = {
    "operation_timeout_seconds": ("operation_timeout_seconds", _as_int),
    "operationtimeoutseconds": ("operation_timeout_seconds", _as_int),
    "operationtimeoutms": ("operation_timeout_seconds", _thousandths),
    "connection_timeout_ms": ("connection_timeout_ms", _as_int),
    "connectiontimeoutms": ("connection_timeout_ms", _as_int),
    "keep_alive_interval_seconds": ("keep_alive_interval_seconds", _as_int),
    "keepaliveintervalseconds": ("keep_alive_interval_seconds", _as_int),
    "listener_name": ("listener_name", _as_text),
    "listenername": ("listener_name", _as_text),
    # security: plain strings and bools, so that the options travel to executors as they are;
    # the Authentication object is built where the client is (spark/_runtime.py)
    "auth_plugin_class_name": ("auth_plugin_class_name", _as_text),
    "authpluginclassname": ("auth_plugin_class_name", _as_text),
    "auth_params": ("auth_params", _as_text),
    "authparams": ("auth_params", _as_text),
    "use_tls": ("use_tls", _bool),
    "usetls": ("use_tls", _bool),
    "tls_trust_certs_file_path": ("tls_trust_certs_file_path", _as_text),
    "tlstrustcertsfilepath": ("tls_trust_certs_file_path", _as_text),
    "tls_allow_insecure_connection": ("tls_allow_insecure_connection", _bool),
    "tlsallowinsecureconnection": ("tls_allow_insecure_connection", _bool),
    "tls_validate_hostname": ("tls_validate_hostname", _bool),
    "tlshostnameverificationenable": ("tls_validate_hostname", _bool),
    "tls_certificate_file_path": ("tls_certificate_file_path", _as_text),
    "tlscertificatefilepath": ("tls_certificate_file_path", _as_text),
    "tls_private_key_file_path": ("tls_private_key_file_path", _as_text),
    "tlskeyfilepath": ("tls_private_key_file_path", _as_text),
}
_CRYPTO_ACTIONS = ("FAIL", "DISCARD", "CONSUME")


def _crypto_action(key: str, text: str) -> str:
    action = text.strip().upper()
    if action not in _CRYPTO_ACTIONS:
        raise PulsarOptionError(
            f"option {key!r}: {text!r} is not one of {', '.join(_CRYPTO_ACTIONS)}"
        )
    return action


def _private_key_path(key: str, text: str) -> str:
    """A PEM private key file: a path or a ``file://`` URL (what the Java reader's
    ``defaultCryptoKeyReader`` takes); the driver checks that it can read it."""
    path = text.strip()
    if path.startswith("file://"):
        path = urlsplit(path).path
    elif "://" in path or path.startswith("data:"):
        raise PulsarOptionError(f"option {key!r}: {text!r} is not a file path or file:// URL")
    try:
        with open(path, "rb") as f:
            f.read(1)
    except OSError as exc:
        raise PulsarOptionError(f"option {key!r}: cannot read {path}: {exc.strerror}") from None
    return path


_READER: dict[str, tuple[str, Converter]] = {
    "receiver_queue_size": ("receiver_queue_size", _as_int),
    "receiverqueuesize": ("receiver_queue_size", _as_int),
    # end-to-end encryption: the private key that opens the data keys, and what to do with a
    # message it does not open (as the official reader's crypto_failure_action)
    "private_key_path": ("private_key_path", _private_key_path),
    "privatekeypath": ("private_key_path", _private_key_path),
    "defaultcryptokeyreader": ("private_key_path", _private_key_path),
    "crypto_failure_action": ("crypto_failure_action", _crypto_action),
    "cryptofailureaction": ("crypto_failure_action", _crypto_action),
}
_PRODUCER: dict[str, tuple[str, Converter]] = {
    "send_timeout_millis": ("send_timeout_millis", _as_int),
    "sendtimeoutms": ("send_timeout_millis", _as_int),
    "max_pending_messages": ("max_pending_messages", _as_int),
    "maxpendingmessages": ("max_pending_messages", _as_int),
    "batching_max_messages": ("batching_max_messages", _as_int),
    "batchingmaxmessages": ("batching_max_messages", _as_int),
    "batching_max_allowed_size_in_bytes": ("batching_max_allowed_size_in_bytes", _as_int),
    "batchingmaxbytes": ("batching_max_allowed_size_in_bytes", _as_int),
    "batching_max_publish_delay_ms": ("batching_max_publish_delay_ms", _as_int),
    "batchingmaxpublishdelaymicros": ("batching_max_publish_delay_ms", _thousandths),
    "batching_enabled": ("batching_enabled", _bool),
    "batchingenabled": ("batching_enabled", _bool),
    "chunking_enabled": ("chunking_enabled", _bool),
    "chunkingenabled": ("chunking_enabled", _bool),
    "compression_type": ("compression_type", _codec),
    "compressiontype": ("compression_type", _codec),
}


def _passthrough(
    options: Mapping[str, str], prefix: str, table: Mapping[str, tuple[str, Converter]]
) -> dict[str, Any]:
    """The ``<prefix>*`` options as keyword arguments of our client."""
    args: dict[str, Any] = {}
    for key, text in options.items():
        if not key.startswith(prefix):
            continue
        found = table.get(key[len(prefix) :])
        if found is None:
            known = sorted({canonical(k) for k in table if canonical(k) != k} | set(table))
            raise PulsarOptionError(f"unknown option {key!r} (known: {', '.join(known)})")
        name, convert = found
        args[name] = convert(canonical(key), text)
    return args


def _client_args(options: Mapping[str, str]) -> dict[str, Any]:
    """The ``pulsar.client.*`` options as keyword arguments of our client, the authentication
    plugin and its parameters checked (they stay strings: see spark/_runtime.py)."""
    args = _passthrough(options, "pulsar.client.", _CLIENT)
    plugin, params = args.get("auth_plugin_class_name"), args.get("auth_params")
    if plugin is None and params is None:
        return args
    if plugin is None or not plugin.strip():
        raise PulsarOptionError(
            "option 'pulsar.client.authParams' needs 'pulsar.client.authPluginClassName' "
            "(token, basic, tls or the Java plugin class name)"
        )
    if params is None or not params.strip():
        raise PulsarOptionError(
            f"option 'pulsar.client.authPluginClassName' ({plugin}) needs "
            "'pulsar.client.authParams' (e.g. token:<jwt>, file:///path/to/token, "
            '{"userId": "u", "password": "p"}, tlsCertFile:/c.pem,tlsKeyFile:/k.pem)'
        )
    try:
        create_authentication(plugin, params)
    except ValueError as exc:
        unknown = str(exc).startswith("unknown authentication plugin")
        key = "authPluginClassName" if unknown else "authParams"
        raise PulsarOptionError(f"option 'pulsar.client.{key}': {exc}") from None
    return args


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
        client_args=_client_args(options),
    )


def read_options(options: Mapping[str, str], *, streaming: bool) -> ReadOptions:
    """Check the options of a read; raise :class:`PulsarOptionError` naming the bad one."""
    options = {str(k).lower(): v for k, v in options.items()}
    _check_known(
        options,
        _READ_KEYS,
        ("pulsar.client.", "pulsar.reader."),
        "read",
    )
    service_url = _service_url(options)
    topics, pattern = _topics(options)
    default_start = "latest" if streaming else "earliest"
    starting_text = _get(options, "startingoffsets")
    starting_time = _get(options, "startingtime")
    if starting_text is not None and starting_time is not None:
        raise PulsarOptionError("options 'startingOffsets' and 'startingTime' exclude each other")
    if starting_time is not None:
        starting = StartSpec("time", time_ms=_int("startingTime", starting_time))
    elif starting_text is not None:
        starting = parse_offsets("startingOffsets", starting_text, default_start)
    else:
        starting = StartSpec(default_start, default=default_start)
    ending_text = _get(options, "endingoffsets")
    ending_time = _get(options, "endingtime")
    if streaming and (ending_text is not None or ending_time is not None):
        raise PulsarOptionError(
            "options 'endingOffsets' and 'endingTime' are for batch reads only; a streaming "
            "query reads on"
        )
    if ending_text is not None and ending_time is not None:
        raise PulsarOptionError("options 'endingOffsets' and 'endingTime' exclude each other")
    if ending_time is not None:
        ending = StartSpec("time", time_ms=_int("endingTime", ending_time))
    elif ending_text is not None:
        ending = parse_offsets("endingOffsets", ending_text, "latest")
        if ending.kind == "earliest":
            raise PulsarOptionError("option 'endingOffsets': 'earliest' would read nothing")
    else:
        ending = StartSpec("latest", default="latest")
    if not streaming and starting.kind == "latest":
        raise PulsarOptionError(
            "option 'startingOffsets': 'latest' is not allowed in a batch read (it reads nothing)"
        )
    limit_key = next(
        (k for k in ("maxrecordspertrigger", "maxoffsetspertrigger") if k in options), None
    )
    if "maxrecordspertrigger" in options and "maxoffsetspertrigger" in options:
        raise PulsarOptionError(
            "options 'maxRecordsPerTrigger' and 'maxOffsetsPerTrigger' are aliases; give one"
        )
    max_records = 0
    if limit_key is not None:
        max_records = _int(canonical(limit_key), str(options[limit_key]), minimum=1)
        if not streaming:
            raise PulsarOptionError(f"option {canonical(limit_key)!r} is for streaming reads only")
    return ReadOptions(
        service_url=service_url,
        topics=topics,
        pattern=pattern,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool("failOnDataLoss", _get(options, "failondataloss") or "true"),
        max_records_per_trigger=max_records,
        min_partitions=_int("minPartitions", _get(options, "minpartitions") or "0"),
        poll_timeout_s=_int("pollTimeoutMs", _get(options, "polltimeoutms") or "120000", minimum=1)
        / 1000,
        client_args=_client_args(options),
        reader_args=_passthrough(options, "pulsar.reader.", _READER),
        subscription=_subscription(options, streaming),
        admin_url=_admin_url(options) or "",
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
    _check_known(options, _WRITE_KEYS, ("pulsar.client.", "pulsar.producer."), "write")
    service_url = _service_url(options)
    topic_text = _get(options, "topic")
    write_id = _get(options, "writeid")
    if write_id is not None and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", write_id):
        raise PulsarOptionError("option 'writeId': use 1 to 64 letters, digits, '_', '-' or '.'")
    client_args = _client_args(options)
    return WriteOptions(
        service_url=service_url,
        admin_url=_admin_url(options),
        topic=checked_topic("topic", topic_text) if topic_text else None,
        write_id=write_id,
        exactly_once=_bool("exactlyOnce", _get(options, "exactlyonce") or "true"),
        poll_timeout_s=_int("pollTimeoutMs", _get(options, "polltimeoutms") or "120000", minimum=1)
        / 1000,
        client_args=client_args,
        producer_args=_passthrough(options, "pulsar.producer.", _PRODUCER),
        sink_subscription=_sink_subscription(options),
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
