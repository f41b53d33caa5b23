"""Argument errors as the official client's: each check runs with both clients."""

from __future__ import annotations

import types
import uuid
from typing import Any

import pytest

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
