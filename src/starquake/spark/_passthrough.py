"""Pass-through options: ``pulsar.client.*``, ``pulsar.reader.*``, ``pulsar.producer.*`` and
``pulsar.admin.*`` become keyword arguments of the client, checked when the query is planned.

Every keyword of the client's ``Client``, ``create_reader`` and ``create_producer`` is accepted
under its own name (``pulsar.producer.batching_max_messages``) and, where the Java client has
the same setting, under the Java name that StreamNative's pulsar-spark passes on
(``pulsar.producer.batchingMaxMessages``, ``pulsar.client.operationTimeoutMs``). The option
text is converted to the keyword's type (units converted: ms to seconds rounded up, µs to ms).
A keyword the data source sets itself (the topic, the producer name, ...) or that takes a
Python object is refused with the reason; so is a Java setting this client does not have.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Mapping
from enum import IntEnum
from typing import Any
from urllib.parse import urlsplit

from starquake.client import (
    BatchingType,
    ConsumerCryptoFailureAction,
    ProducerAccessMode,
)
from starquake.client.base._auth import create_authentication
from starquake.spark._option_types import PulsarOptionError

__all__ = ["admin_settings", "client_settings", "producer_settings", "reader_settings"]

Converter = Callable[[str, str], Any]

_COMPRESSION = ("none", "lz4", "zlib", "zstd", "snappy")


def _int(key: str, text: str, minimum: int = 0) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise PulsarOptionError(f"option {key!r}: {text!r} is not an integer") from None
    if value < minimum:
        raise PulsarOptionError(f"option {key!r}: must be at least {minimum}, got {value}")
    if value >= 1 << 31:
        raise PulsarOptionError(f"option {key!r}: {value} is too large (at most {(1 << 31) - 1})")
    return value


def _positive(key: str, text: str) -> int:
    return _int(key, text, 1)


def _count(key: str, text: str) -> int:
    return _int(key, text, 0)


def _number(key: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise PulsarOptionError(f"option {key!r}: {text!r} is not a number") from None
    if not value >= 0 or math.isinf(value):
        raise PulsarOptionError(f"option {key!r}: must be a finite number >= 0, got {text!r}")
    return value


def _stats_interval(key: str, text: str) -> int:
    if _int(key, text) != 600:
        raise PulsarOptionError(
            f"option {key!r}: only 600 (the default) is supported: this client keeps no "
            "periodic statistics"
        )
    return 600


def _ms_as_seconds(key: str, text: str) -> int:
    """A Java ``...Ms`` setting for a keyword in whole seconds: rounded up, at least 1."""
    return max(1, math.ceil(_int(key, text) / 1000))


def _micros_as_ms(key: str, text: str) -> float:
    return _int(key, text) / 1000


def _bool(key: str, text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise PulsarOptionError(f"option {key!r}: {text!r} is not true or false")


def _text(key: str, text: str) -> str:
    if not text.strip():
        raise PulsarOptionError(f"option {key!r}: empty")
    return text


def _codec(key: str, text: str) -> str:
    codec = text.strip().lower()
    if codec not in _COMPRESSION:
        raise PulsarOptionError(f"option {key!r}: {text!r} is not one of {', '.join(_COMPRESSION)}")
    return codec


def _enum(kind: type[IntEnum]) -> Converter:
    members = {m.name.lower(): m for m in kind}

    def convert(key: str, text: str) -> IntEnum:
        found = members.get(text.strip().lower().rpartition(".")[2])
        if found is None:
            names = ", ".join(m.name for m in kind)
            raise PulsarOptionError(f"option {key!r}: {text!r} is not one of {names}")
        return found

    return convert


def _key_path(key: str, text: str) -> str:
    """A PEM key file: a path or a ``file://`` URL (what the Java reader's and producer's
    ``defaultCryptoKeyReader`` take); the driver checks that it can read it."""
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


def _encryption_key(key: str, text: str) -> str:
    """The name of the key that encrypts (the Java producer's ``encryptionKeys`` is a set:
    this client's producers take one name)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if len(names) != 1:
        raise PulsarOptionError(
            f"option {key!r}: give one key name (this client's producers encrypt with one), "
            f"got {text!r}"
        )
    return names[0]


def _string_map(key: str, text: str) -> dict[str, str]:
    """A JSON object of strings, or ``k1=v1,k2=v2``."""
    if text.strip().startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            raise PulsarOptionError(f"option {key!r}: {text!r} is not a JSON object") from None
        if isinstance(data, dict) and all(isinstance(v, str) for v in data.values()):
            return {str(k): v for k, v in data.items()}
        raise PulsarOptionError(f"option {key!r}: the JSON object's values must be strings")
    out: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise PulsarOptionError(
                f"option {key!r}: {item!r} is not name=value (give k1=v1,k2=v2 or a JSON object)"
            )
        out[name.strip()] = value.strip()
    return out


# (keyword, conversion, Java names of the same setting)
_Row = tuple[str, Converter, tuple[str, ...]]

_TLS_AND_AUTH: tuple[_Row, ...] = (
    # plain strings and bools, so that the settings travel to executors as they are; the
    # Authentication object is built where the client is (spark/_runtime.py)
    ("auth_plugin_class_name", _text, ("authPluginClassName",)),
    ("auth_params", _text, ("authParams",)),
    ("tls_trust_certs_file_path", _text, ("tlsTrustCertsFilePath",)),
    ("tls_allow_insecure_connection", _bool, ("tlsAllowInsecureConnection",)),
    ("tls_validate_hostname", _bool, ("tlsHostnameVerificationEnable",)),
    ("tls_certificate_file_path", _text, ("tlsCertificateFilePath",)),
    ("tls_private_key_file_path", _text, ("tlsKeyFilePath",)),
)
_CLIENT_ROWS: tuple[_Row, ...] = (
    ("operation_timeout_seconds", _positive, ("operationTimeoutSeconds",)),
    ("connection_timeout_ms", _positive, ("connectionTimeoutMs",)),
    ("keep_alive_interval_seconds", _positive, ("keepAliveIntervalSeconds",)),
    ("listener_name", _text, ("listenerName",)),
    ("partitions_update_interval_seconds", _number, ("autoUpdatePartitionsIntervalSeconds",)),
    ("use_tls", _bool, ("useTls",)),
    *_TLS_AND_AUTH,
    ("io_threads", _positive, ("numIoThreads",)),
    ("message_listener_threads", _positive, ("numListenerThreads",)),
    ("concurrent_lookup_requests", _positive, ("concurrentLookupRequest",)),
    ("log_conf_file_path", _text, ()),
    ("stats_interval_in_seconds", _stats_interval, ("statsIntervalSeconds",)),
)
_READER_ROWS: tuple[_Row, ...] = (
    ("receiver_queue_size", _positive, ("receiverQueueSize",)),
    ("reader_name", _text, ("readerName",)),
    ("subscription_role_prefix", _text, ("subscriptionRolePrefix",)),
    # end-to-end encryption: the private key that opens the data keys, and what to do with a
    # message it does not open (as the official reader's crypto_failure_action)
    ("private_key_path", _key_path, ("privateKeyPath", "defaultCryptoKeyReader")),
    ("crypto_failure_action", _enum(ConsumerCryptoFailureAction), ("cryptoFailureAction",)),
)
_PRODUCER_ROWS: tuple[_Row, ...] = (
    ("send_timeout_millis", _count, ("sendTimeoutMs",)),
    ("compression_type", _codec, ("compressionType",)),
    ("max_pending_messages", _positive, ("maxPendingMessages",)),
    ("max_pending_messages_across_partitions", _positive, ("maxPendingMessagesAcrossPartitions",)),
    ("batching_enabled", _bool, ("batchingEnabled",)),
    ("batching_max_messages", _positive, ("batchingMaxMessages",)),
    ("batching_max_allowed_size_in_bytes", _positive, ("batchingMaxBytes",)),
    ("batching_max_publish_delay_ms", _number, ()),
    ("chunking_enabled", _bool, ("chunkingEnabled",)),
    ("properties", _string_map, ("properties",)),
    ("batching_type", _enum(BatchingType), ()),
    ("access_mode", _enum(ProducerAccessMode), ("accessMode",)),
    # end-to-end encryption: the key name and the PEM public key that wraps the data keys
    # (given together; the official producer's encryption_key and crypto_key_reader)
    ("encryption_key", _encryption_key, ("encryptionKeys",)),
    ("public_key_path", _key_path, ("publicKeyPath", "defaultCryptoKeyReader")),
)
# Java names whose unit differs from the keyword's: (Java name, keyword, conversion)
_CLIENT_UNITS = (("operationTimeoutMs", "operation_timeout_seconds", _ms_as_seconds),)
_PRODUCER_UNITS = (
    ("batchingMaxPublishDelayMicros", "batching_max_publish_delay_ms", _micros_as_ms),
)

# Keywords (and Java names) refused, with the reason.
_OWN = "set by the data source"
_OBJECT = "takes a Python object, which an option cannot give"
_JAVA = "a Java client setting that this client does not have"
_NO_TXN = "the data source reads and writes without transactions"
_CLIENT_REFUSED = {
    "service_url": "use the option 'service.url'",
    "serviceUrl": "use the option 'service.url'",
    "authentication": "use authPluginClassName and authParams",
    "logger": _OBJECT,
    **dict.fromkeys(["enable_transaction", "enableTransaction"], _NO_TXN),
    **dict.fromkeys(
        [
            "maxLookupRequest",
            "maxLookupRedirects",
            "maxNumberOfRejectedRequestPerConnection",
            "useTcpNoDelay",
            "requestTimeoutMs",
            "initialBackoffIntervalNanos",
            "maxBackoffIntervalNanos",
            "connectionsPerBroker",
            "memoryLimitBytes",
            "lookupTimeoutMs",
            "enableBusyWait",
            "tlsCiphers",
            "tlsProtocols",
            "useKeyStoreTls",
            "tlsTrustStorePath",
            "tlsTrustStorePassword",
            "tlsTrustStoreType",
            "sslProvider",
            "proxyServiceUrl",
            "proxyProtocol",
            "socks5ProxyAddress",
            "dnsLookupBindAddress",
        ],
        _JAVA,
    ),
}
_READER_REFUSED = {
    "topic": f"{_OWN} (options topic, topics, topicsPattern)",
    "topicNames": f"{_OWN} (options topic, topics, topicsPattern)",
    "start_message_id": f"{_OWN} (option startingOffsets)",
    "startMessageId": f"{_OWN} (option startingOffsets)",
    "start_message_id_inclusive": f"{_OWN} (option startingOffsets)",
    "resetIncludeHead": f"{_OWN} (option startingOffsets)",
    "schema": f"{_OWN} (option schema.decode)",
    "is_read_compacted": "not supported: the source reads every message of the log",
    "readCompacted": "not supported: the source reads every message of the log",
    "crypto_key_reader": _OBJECT,
    "cryptoKeyReader": _OBJECT,
    "readerListener": _OBJECT,
}
_PRODUCER_REFUSED = {
    "topic": f"{_OWN} (option topic or column __topic)",
    "topicName": f"{_OWN} (option topic or column __topic)",
    "producer_name": f"{_OWN} (from the query and task, for exactly-once)",
    "producerName": f"{_OWN} (from the query and task, for exactly-once)",
    "initial_sequence_id": f"{_OWN} (sequence ids come from the batch id, for exactly-once)",
    "initialSequenceId": f"{_OWN} (sequence ids come from the batch id, for exactly-once)",
    "schema": f"{_OWN} (options schema.type, schema.name)",
    "block_if_queue_full": f"{_OWN} (always true: the sink waits for room)",
    "blockIfQueueFull": f"{_OWN} (always true: the sink waits for room)",
    "message_routing_mode": f"{_OWN}: the sink routes rows to partitions itself",
    "messageRoutingMode": f"{_OWN}: the sink routes rows to partitions itself",
    "hashing_scheme": f"{_OWN}: the sink routes rows to partitions itself",
    "hashingScheme": f"{_OWN}: the sink routes rows to partitions itself",
    "message_router": f"{_OWN}: the sink routes rows to partitions itself",
    "lazy_start_partitioned_producers": f"{_OWN}: the sink opens one producer per partition",
    "lazyStartPartitionedProducers": f"{_OWN}: the sink opens one producer per partition",
    "crypto_key_reader": f"{_OBJECT} (give publicKeyPath)",
    "cryptoKeyReader": f"{_OBJECT} (give publicKeyPath)",
    **dict.fromkeys(
        [
            "cryptoFailureAction",
            "batchingPartitionSwitchFrequencyByPublishDelay",
            "chunkMaxMessageSize",
            "autoUpdatePartitions",
            "autoUpdatePartitionsIntervalSeconds",
            "multiSchema",
            "batcherBuilder",
        ],
        _JAVA,
    ),
}
_ADMIN_REFUSED = {
    "serviceUrl": "use the option 'admin.url'",
    "service_url": "use the option 'admin.url'",
}


class _Table:
    """The settings one prefix accepts, by lowercased name, and those it refuses."""

    def __init__(
        self,
        prefix: str,
        rows: tuple[_Row, ...],
        units: tuple[tuple[str, str, Converter], ...],
        refused: Mapping[str, str],
    ) -> None:
        self.prefix = prefix
        self.known: dict[str, tuple[str, str, Converter]] = {}  # name -> (spelling, kw, conv)
        for keyword, convert, java in rows:
            for name in (keyword, *java):
                self.known[name.lower()] = (name, keyword, convert)
        for name, keyword, convert in units:
            self.known[name.lower()] = (name, keyword, convert)
        self.refused = {name.lower(): (name, reason) for name, reason in refused.items()}
        self.keywords = sorted({keyword for keyword, _c, _j in rows})

    def parse(self, options: Mapping[str, str]) -> dict[str, Any]:
        args: dict[str, Any] = {}
        given: dict[str, str] = {}
        for key, text in sorted(options.items()):
            if not key.startswith(self.prefix):
                continue
            rest = key[len(self.prefix) :]
            found = self.known.get(rest)
            if found is None:
                raise self._unknown(rest)
            spelling, keyword, convert = found
            option = self.prefix + spelling
            if keyword in given:
                raise PulsarOptionError(
                    f"options {given[keyword]!r} and {option!r} set the same thing; give one"
                )
            given[keyword] = option
            args[keyword] = convert(option, str(text))
        return args

    def _unknown(self, rest: str) -> PulsarOptionError:
        refused = self.refused.get(rest)
        if refused is not None:
            return PulsarOptionError(f"option {self.prefix + refused[0]!r}: {refused[1]}")
        close = difflib.get_close_matches(rest, list(self.known), n=1)
        hint = f"did you mean {self.prefix + self.known[close[0]][0]!r}? " if close else ""
        return PulsarOptionError(
            f"unknown option {self.prefix + rest!r} ({hint}known: {', '.join(self.keywords)}, "
            "or their Java client names)"
        )


CLIENT = _Table("pulsar.client.", _CLIENT_ROWS, _CLIENT_UNITS, _CLIENT_REFUSED)
READER = _Table("pulsar.reader.", _READER_ROWS, (), _READER_REFUSED)
PRODUCER = _Table("pulsar.producer.", _PRODUCER_ROWS, _PRODUCER_UNITS, _PRODUCER_REFUSED)
ADMIN = _Table("pulsar.admin.", _TLS_AND_AUTH, (), _ADMIN_REFUSED)


def _check_auth(args: Mapping[str, Any], prefix: str) -> None:
    """The authentication plugin and its parameters, checked (they stay strings)."""
    plugin, params = args.get("auth_plugin_class_name"), args.get("auth_params")
    if plugin is None and params is None:
        return
    if plugin is None:
        raise PulsarOptionError(
            f"option '{prefix}authParams' needs '{prefix}authPluginClassName' "
            "(token, basic, tls or the Java plugin class name)"
        )
    if params is None:
        raise PulsarOptionError(
            f"option '{prefix}authPluginClassName' ({plugin}) needs "
            f"'{prefix}authParams' (e.g. token:<jwt>, file:///path/to/token, "
            '{"userId": "u", "password": "p"}, tlsCertFile:/c.pem,tlsKeyFile:/k.pem)'
        )
    try:
        create_authentication(plugin, params)
    except ValueError as exc:
        unknown = str(exc).startswith("unknown authentication plugin")
        key = "authPluginClassName" if unknown else "authParams"
        raise PulsarOptionError(f"option '{prefix}{key}': {exc}") from None


def client_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """The ``pulsar.client.*`` options as keyword arguments of ``Client`` (authentication as
    the ``auth_plugin_class_name`` / ``auth_params`` strings: see spark/_runtime.py)."""
    args = CLIENT.parse(options)
    _check_auth(args, CLIENT.prefix)
    return args


def admin_settings(options: Mapping[str, str], client_args: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of the admin HTTP calls: the client's, with the ``pulsar.admin.*``
    authentication and TLS settings in place of the client's where given."""
    admin = ADMIN.parse(options)
    _check_auth(admin, ADMIN.prefix)
    merged = dict(client_args)
    if "auth_plugin_class_name" in admin:
        merged.pop("auth_params", None)
    merged.update(admin)
    return merged


def reader_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """The ``pulsar.reader.*`` options as keyword arguments of the source's readers."""
    return READER.parse(options)


def producer_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """The ``pulsar.producer.*`` options as keyword arguments of ``create_producer`` (with
    ``public_key_path`` for the key reader that goes with ``encryption_key``)."""
    args = PRODUCER.parse(options)
    if ("encryption_key" in args) != ("public_key_path" in args):
        raise PulsarOptionError(
            "options 'pulsar.producer.encryptionKeys' (the key name) and "
            "'pulsar.producer.publicKeyPath' (the PEM public key file; also "
            "'defaultCryptoKeyReader') encrypt together; give both"
        )
    return args
