"""Options of the official client that starquake.client accepts but does not implement fail
loudly (NotImplementedError naming the option) unless given their default value."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import starquake.client
import starquake.client.asyncio
from starquake.broker.embedded import EmbeddedBroker

RUNTIME_OPTIONS = [
    ("stats_interval_in_seconds", 60),
]


def _topic() -> str:
    return f"persistent://public/default/loud-{uuid.uuid4().hex[:12]}"


@pytest.mark.parametrize(("name", "value"), RUNTIME_OPTIONS)
def test_client_runtime_options_other_than_the_default_are_refused(
    broker: EmbeddedBroker, name: str, value: Any
) -> None:
    with pytest.raises(NotImplementedError, match=name):
        starquake.client.Client(broker.service_url, **{name: value})
    with pytest.raises(NotImplementedError, match=name):
        starquake.client.asyncio.Client(broker.service_url, **{name: value})


@pytest.mark.parametrize(("name", "value"), RUNTIME_OPTIONS)
def test_client_runtime_options_at_their_default_work(
    broker: EmbeddedBroker, name: str, value: Any
) -> None:
    default = {"stats_interval_in_seconds": 600}.get(name)
    options = {name: default} if default is not None else {}
    client = starquake.client.Client(broker.service_url, **options)
    try:
        producer = client.create_producer(_topic())
        assert producer.send(b"x") is not None
    finally:
        client.close()


def test_unknown_asyncio_client_options_are_refused(broker: EmbeddedBroker) -> None:
    with pytest.raises(TypeError, match="no_such_option"):
        starquake.client.asyncio.Client(broker.service_url, no_such_option=1)


def test_lazy_start_partitioned_producers_is_refused(broker: EmbeddedBroker) -> None:
    client = starquake.client.Client(broker.service_url)
    try:
        with pytest.raises(NotImplementedError, match="lazy_start_partitioned_producers"):
            client.create_producer(_topic(), lazy_start_partitioned_producers=True)
        assert client.create_producer(_topic(), lazy_start_partitioned_producers=False)
    finally:
        client.close()


def test_broker_consumer_stats_cache_time_is_refused(broker: EmbeddedBroker) -> None:
    client = starquake.client.Client(broker.service_url)
    try:
        with pytest.raises(NotImplementedError, match="broker_consumer_stats_cache_time_ms"):
            client.subscribe(_topic(), "sub", broker_consumer_stats_cache_time_ms=1000)
        consumer = client.subscribe(_topic(), "sub", broker_consumer_stats_cache_time_ms=30000)
        consumer.close()
    finally:
        client.close()


def test_the_asyncio_api_refuses_them_too(broker: EmbeddedBroker) -> None:
    async def scenario() -> None:
        client = starquake.client.asyncio.Client(broker.service_url)
        try:
            with pytest.raises(NotImplementedError, match="lazy_start_partitioned_producers"):
                await client.create_producer(_topic(), lazy_start_partitioned_producers=True)
            with pytest.raises(NotImplementedError, match="broker_consumer_stats_cache_time_ms"):
                await client.subscribe(_topic(), "s", broker_consumer_stats_cache_time_ms=1)
        finally:
            await client.close()

    asyncio.run(scenario())
