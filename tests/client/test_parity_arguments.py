"""Argument errors as the official client's: each check runs with both clients."""

from __future__ import annotations

import types
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from official_client import make_client

PRODUCER_INTS = [
    "send_timeout_millis",
    "max_pending_messages",
    "max_pending_messages_across_partitions",
    "batching_max_messages",
    "batching_max_allowed_size_in_bytes",
    "batching_max_publish_delay_ms",
]
CONSUMER_INTS = [
    "receiver_queue_size",
    "max_total_receiver_queue_size_across_partitions",
    "broker_consumer_stats_cache_time_ms",
    "negative_ack_redelivery_delay_ms",
    "pattern_auto_discovery_period",
    "max_pending_chunked_message",
]


def _topic() -> str:
    return f"persistent://public/default/args-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize("content", [5, "text", bytearray(b"x")])
def test_send_of_a_non_bytes_value_raises_type_error(client: Any, content: Any) -> None:
    producer = client.create_producer(_topic())
    with pytest.raises(TypeError, match="expected type is <class 'bytes'>"):
        producer.send(content)
    with pytest.raises(TypeError):
        producer.send_async(content, None)
    assert producer.send(b"bytes are fine") is not None


def test_send_with_a_string_schema_checks_the_type(mod: types.ModuleType, client: Any) -> None:
    producer = client.create_producer(_topic(), schema=mod.schema.StringSchema())
    with pytest.raises(TypeError, match="expected type is <class 'str'>"):
        producer.send(5)


@pytest.mark.parametrize("name", PRODUCER_INTS)
@pytest.mark.parametrize("value", [None, "1"])
def test_numeric_producer_arguments(client: Any, name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"Argument {name} is expected to be of type 'int'"):
        client.create_producer(_topic(), **{name: value})


@pytest.mark.parametrize("name", CONSUMER_INTS)
@pytest.mark.parametrize("value", [None, "1"])
def test_numeric_consumer_arguments(client: Any, name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=f"Argument {name} is expected to be of type 'int'"):
        client.subscribe(_topic(), "sub", **{name: value})


def test_unacked_timeout_may_be_none(client: Any) -> None:
    consumer = client.subscribe(_topic(), "sub", unacked_messages_timeout_ms=None)
    consumer.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"reader_name": 5}, "Argument reader_name is expected to be either None or of type 'str'"),
        (
            {"subscription_role_prefix": 5},
            "Argument subscription_role_prefix is expected to be either None or of type 'str'",
        ),
        ({"receiver_queue_size": None}, "Argument receiver_queue_size is expected"),
    ],
)
def test_reader_arguments(
    mod: types.ModuleType, client: Any, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        client.create_reader(_topic(), mod.MessageId.earliest, **kwargs)


def test_reader_name_as_a_string_is_accepted(mod: types.ModuleType, client: Any) -> None:
    reader = client.create_reader(_topic(), mod.MessageId.earliest, reader_name="named")
    reader.close()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("foo://localhost:6650", "Invalid scheme: foo"),
        ("localhost:6650", "The scheme part is missing"),
        ("", "The scheme part is missing"),
        ("pulsar://", "No service url is provided yet"),
        ("pulsar://localhost:port", "invalid hostname: localhost:port"),
    ],
)
def test_bad_service_urls_raise_value_error(mod: types.ModuleType, url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        mod.Client(url, logger=mod.ConsoleLogger(mod.LoggerLevel.Error))


@pytest.mark.parametrize("url", ["pulsar://localhost:6650", "pulsar+ssl://a:6651,b:6651"])
def test_good_service_urls_are_accepted(mod: types.ModuleType, url: str) -> None:
    client = mod.Client(url, logger=mod.ConsoleLogger(mod.LoggerLevel.Error))
    client.close()


def test_sticky_ranges_are_a_list(mod: types.ModuleType) -> None:
    sticky = mod.KeySharedMode.Sticky
    policy = mod.ConsumerKeySharedPolicy(sticky, sticky_ranges=[(0, 100), (200, 300)])
    assert policy.sticky_ranges == [(0, 100), (200, 300)]
    assert isinstance(policy.sticky_ranges, list)
    from_tuple = mod.ConsumerKeySharedPolicy(sticky, sticky_ranges=((5, 9),))
    assert from_tuple.sticky_ranges == [(5, 9)]
    assert mod.ConsumerKeySharedPolicy().sticky_ranges == []


@pytest.mark.parametrize("ranges", [[(1, 2, 3)], ["ab"], [(0.5, 9)], 5])
def test_malformed_sticky_ranges_raise_type_error(mod: types.ModuleType, ranges: Any) -> None:
    with pytest.raises(TypeError):
        mod.ConsumerKeySharedPolicy(mod.KeySharedMode.Sticky, sticky_ranges=ranges)


@pytest.mark.parametrize(
    ("ranges", "message"),
    [
        ([], "must not be empty"),
        ([(0, 100), (50, 200)], "overlap"),
        ([(0, 70000)], r"Ranges must be \[0, 65535\]"),
    ],
)
def test_invalid_sticky_ranges_raise_value_error(
    mod: types.ModuleType, ranges: Any, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        mod.ConsumerKeySharedPolicy(mod.KeySharedMode.Sticky, sticky_ranges=ranges)


# --- exception types of every argument check -------------------------------------------------
# Each row: (where, argument, bad value); both clients must raise the same exception type:
# ValueError from the official client's Python type checks, TypeError from its C++ binding
# (an int out of the range of the C++ setter, a routing mode that is not one), AttributeError
# where it calls a method of the argument unchecked.

BIG = 2**40
CLIENT_CASES: list[tuple[str, Any]] = [
    *[(name, v) for name in ("io_threads", "message_listener_threads") for v in ("x", None, 1.5)],
    *[(name, BIG) for name in ("io_threads", "message_listener_threads")],
    ("concurrent_lookup_requests", "x"),
    ("concurrent_lookup_requests", BIG),
    ("stats_interval_in_seconds", "test"),
    ("stats_interval_in_seconds", None),
    ("stats_interval_in_seconds", -1),
    ("stats_interval_in_seconds", BIG),
    ("log_conf_file_path", 5),
    ("operation_timeout_seconds", BIG),
    ("operation_timeout_seconds", "x"),
    ("connection_timeout_ms", BIG),
    ("listener_name", 5),
    ("use_tls", "x"),
    ("tls_trust_certs_file_path", 5),
    ("tls_allow_insecure_connection", 1),
    ("tls_validate_hostname", None),
    ("tls_private_key_file_path", 5),
    ("tls_certificate_file_path", b"x"),
    ("authentication", "token"),
]
PRODUCER_CASES: list[tuple[str, Any]] = [
    *[
        (name, v)
        for name in ("compression_type", "batching_type", "access_mode")
        for v in (None, 1, 1.5, "x")
    ],
    *[("message_routing_mode", v) for v in ("x", 1.5, -1, BIG)],
    ("send_timeout_millis", BIG),
    ("max_pending_messages", -1),
    ("max_pending_messages", BIG),
    ("max_pending_messages_across_partitions", -1),
    ("batching_max_messages", -1),
    ("batching_max_messages", BIG),
    ("batching_max_allowed_size_in_bytes", -1),
    ("batching_max_publish_delay_ms", -1),
    ("producer_name", 5),
    ("block_if_queue_full", None),
]
CONSUMER_CASES: list[tuple[str, Any]] = [
    *[
        (name, v)
        for name in (
            "consumer_type",
            "initial_position",
            "regex_subscription_mode",
            "crypto_failure_action",
        )
        for v in (None, 1, 1.5)
    ],
    *[
        (name, v)
        for name in ("is_read_compacted", "start_message_id_inclusive", "batch_index_ack_enabled")
        for v in (None, "x", 1)
    ],
    *[("key_shared_policy", v) for v in ("x", 1)],
    *[("dead_letter_policy", v) for v in ("x", 1)],
    ("receiver_queue_size", BIG),
    ("max_total_receiver_queue_size_across_partitions", BIG),
    ("unacked_messages_timeout_ms", -1),
    ("unacked_messages_timeout_ms", 5000),
    ("max_pending_chunked_message", -1),
    ("replicate_subscription_state_enabled", "x"),
]
READER_CASES: list[tuple[str, Any]] = [
    *[
        (name, v)
        for name in ("is_read_compacted", "start_message_id_inclusive")
        for v in (None, "x", 1)
    ],
    ("crypto_failure_action", None),
    ("crypto_failure_action", 1),
    ("receiver_queue_size", BIG),
]


def _outcome(call: Any) -> str:
    """The type name of the exception ``call()`` raises, or "accepted" (what it made is
    closed)."""
    try:
        made = call()
    except Exception as exc:
        return type(exc).__name__
    made.close()
    return "accepted"


Make = Callable[[types.ModuleType, Any, dict[str, Any]], Any]


def _outcomes(broker: Any, rows: list[tuple[str, Any]], make: Make) -> dict[str, list[str]]:
    """Per client module, the outcome of ``make(module, client, {argument: value})`` for each
    row (the client is None for rows of ``Client`` itself)."""
    import pulsar

    import starquake.client

    found: dict[str, list[str]] = {}
    for module in (pulsar, starquake.client):
        client = None if rows is CLIENT_CASES else make_client(module, broker)
        try:
            found[module.__name__] = [
                _outcome(lambda a=a, v=v, m=module, c=client: make(m, c, {a: v})) for a, v in rows
            ]
        finally:
            if client is not None:
                client.close()
    return found


def _check_rows(broker: Any, rows: list[tuple[str, Any]], make: Make) -> None:
    """Both clients give each row the same outcome, and every row is refused."""
    found = _outcomes(broker, rows, make)
    ours, official = found["starquake.client"], found["pulsar"]
    differ = [
        f"{a}={v!r}: official {o}, ours {s}"
        for (a, v), o, s in zip(rows, official, ours, strict=True)
        if o != s
    ]
    assert not differ, differ
    assert "accepted" not in official, list(zip(rows, official, strict=True))


def test_client_argument_errors_match(broker: Any) -> None:
    def make(m: types.ModuleType, _client: Any, kw: dict[str, Any]) -> Any:
        return m.Client(broker.service_url, logger=m.ConsoleLogger(m.LoggerLevel.Error), **kw)

    _check_rows(broker, CLIENT_CASES, make)


def test_producer_argument_errors_match(broker: Any) -> None:
    _check_rows(broker, PRODUCER_CASES, lambda m, c, kw: c.create_producer(_topic(), **kw))


def test_consumer_argument_errors_match(broker: Any) -> None:
    _check_rows(broker, CONSUMER_CASES, lambda m, c, kw: c.subscribe(_topic(), "s", **kw))


def test_reader_argument_errors_match(broker: Any) -> None:
    def make(m: types.ModuleType, c: Any, kw: dict[str, Any]) -> Any:
        return c.create_reader(_topic(), m.MessageId.earliest, **kw)

    _check_rows(broker, READER_CASES, make)


@pytest.mark.parametrize(
    "name", ["io_threads", "message_listener_threads", "concurrent_lookup_requests"]
)
@pytest.mark.parametrize("value", [-1, 1, 4])
def test_runtime_tuning_options_are_accepted(
    mod: types.ModuleType, broker: Any, name: str, value: int
) -> None:
    client = mod.Client(
        broker.service_url,
        operation_timeout_seconds=10,
        logger=mod.ConsoleLogger(mod.LoggerLevel.Error),
        **{name: value},
    )
    try:
        producer = client.create_producer(_topic())
        assert producer.send(b"x") is not None
    finally:
        client.close()


SEND_CASES: list[tuple[str, Any]] = [
    ("sequence_id", -1),
    ("sequence_id", 2**70),
    ("event_timestamp", -1),
    ("event_timestamp", 2**64),
    ("deliver_at", -1),
    ("properties", "x"),
    ("partition_key", 5),
    ("disable_replication", None),
    ("deliver_after", 5),
]
BAD_TARGETS = [None, "x", 1.5, -1, 2**70, object()]


def _api_outcomes(mod: types.ModuleType, broker: Any) -> list[tuple[str, str]]:
    """(call, outcome) of bad arguments to the methods of producers, consumers, readers,
    loggers and policies, with the client of ``mod``."""
    client = make_client(mod, broker)
    try:
        topic = _topic()
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "sub")
        reader = client.create_reader(topic, mod.MessageId.earliest)
        calls: list[tuple[str, Any]] = [
            (f"send({a}={v!r})", lambda a=a, v=v: producer.send(b"x", **{a: v}))
            for a, v in SEND_CASES
        ]
        for v in BAD_TARGETS:
            calls += [
                (f"acknowledge({v!r})", lambda v=v: consumer.acknowledge(v)),
                (f"negative_acknowledge({v!r})", lambda v=v: consumer.negative_acknowledge(v)),
                (f"ConsoleLogger({v!r})", lambda v=v: mod.ConsoleLogger(v)),
                (f"ConsumerDeadLetterPolicy({v!r})", lambda v=v: mod.ConsumerDeadLetterPolicy(v)),
                (f"BatchReceivePolicy({v!r})", lambda v=v: mod.ConsumerBatchReceivePolicy(v, 1, 1)),
                (f"ConsumerKeySharedPolicy({v!r})", lambda v=v: mod.ConsumerKeySharedPolicy(v)),
                (f"MessageId({v!r})", lambda v=v: mod.MessageId(v)),
                (f"MessageId(0, {v!r})", lambda v=v: mod.MessageId(0, v)),
            ]
        for v in (-1, 2**70):
            calls.append((f"seek({v!r})", lambda v=v: consumer.seek(v)))
        for v in ("x", 2**40):
            calls.append((f"receive({v!r})", lambda v=v: consumer.receive(v)))
            calls.append((f"read_next({v!r})", lambda v=v: reader.read_next(v)))
        return [(name, _raised(call)) for name, call in calls]
    finally:
        client.close()


def _raised(call: Any) -> str:
    try:
        call()
    except Exception as exc:
        return type(exc).__name__
    return "accepted"


def test_method_argument_errors_match(broker: Any) -> None:
    import pulsar

    import starquake.client

    official = _api_outcomes(pulsar, broker)
    ours = _api_outcomes(starquake.client, broker)
    differ = [
        f"{n}: official {o}, ours {s}"
        for (n, o), (_, s) in zip(official, ours, strict=True)
        if o != s
    ]
    assert not differ, differ
    refused = [n for n, o in official if o != "accepted"]
    assert len(refused) > len(official) // 2


def test_log_conf_file_path_is_accepted(mod: types.ModuleType, broker: Any, tmp_path: Any) -> None:
    """The official Python client checks its type and uses it for nothing."""
    client = mod.Client(
        broker.service_url,
        log_conf_file_path=str(tmp_path / "log.conf"),
        logger=mod.ConsoleLogger(mod.LoggerLevel.Error),
    )
    try:
        assert client.create_producer(_topic()).send(b"x") is not None
    finally:
        client.close()
