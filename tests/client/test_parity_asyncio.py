"""The asyncio API with both clients (``pulsar.asyncio`` and ``starquake.client.asyncio``):
pattern subscriptions through ``is_pattern_topic``, and the argument errors around them."""

from __future__ import annotations

import asyncio
import types
import uuid
from typing import Any

import pulsar.asyncio
import pytest

import starquake.client
import starquake.client.asyncio
from starquake.broker.embedded import EmbeddedBroker

ASYNC_MODULES = {"official": pulsar.asyncio, "starquake": starquake.client.asyncio}


@pytest.fixture(params=sorted(ASYNC_MODULES))
def amod(request: pytest.FixtureRequest) -> types.ModuleType:
    return ASYNC_MODULES[request.param]


def _client(amod: types.ModuleType, broker: EmbeddedBroker) -> Any:
    return amod.Client(broker.service_url, operation_timeout_seconds=10)


def test_is_pattern_topic_subscribes_to_every_matching_topic(
    amod: types.ModuleType, broker: EmbeddedBroker
) -> None:
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    topics = [f"persistent://public/default/{prefix}-{i}" for i in range(3)]
    other = f"persistent://public/default/other-{uuid.uuid4().hex[:8]}"

    async def run() -> list[bytes]:
        client = _client(amod, broker)
        try:
            for name in [*topics, other]:  # the topics exist before the subscription
                producer = await client.create_producer(name)
                await producer.close()
            consumer = await client.subscribe(
                f"persistent://public/default/{prefix}-.*",
                "sub",
                initial_position=pulsar.InitialPosition.Earliest,
                is_pattern_topic=True,
            )
            for name in [*topics, other]:
                producer = await client.create_producer(name)
                await producer.send(name.encode())
                await producer.close()
            got = []
            for _ in topics:
                msg = await asyncio.wait_for(consumer.receive(), 10)
                got.append(msg.data())
                await consumer.acknowledge(msg)
            await consumer.close()
            return sorted(got)
        finally:
            await client.close()

    assert asyncio.run(run()) == sorted(t.encode() for t in topics)


def test_a_string_without_is_pattern_topic_is_one_topic_name(
    amod: types.ModuleType, broker: EmbeddedBroker
) -> None:
    name = f"persistent://public/default/plain-{uuid.uuid4().hex[:8]}"

    async def run() -> bytes:
        client = _client(amod, broker)
        try:
            consumer = await client.subscribe(name, "sub")
            producer = await client.create_producer(name)
            await producer.send(b"one")
            msg = await asyncio.wait_for(consumer.receive(), 10)
            await consumer.close()
            await producer.close()
            return bytes(msg.data())
        finally:
            await client.close()

    assert asyncio.run(run()) == b"one"


def test_a_list_with_is_pattern_topic_is_a_value_error(
    amod: types.ModuleType, broker: EmbeddedBroker
) -> None:
    async def run() -> None:
        client = _client(amod, broker)
        try:
            with pytest.raises(ValueError, match="is_pattern_topic"):
                await client.subscribe(
                    ["persistent://public/default/a"], "sub", is_pattern_topic=True
                )
        finally:
            await client.close()

    asyncio.run(run())


def test_a_listener_is_not_an_asyncio_argument(
    amod: types.ModuleType, broker: EmbeddedBroker
) -> None:
    """The asyncio API has no message or reader listeners: passing one is a TypeError."""
    earliest = (pulsar if amod is pulsar.asyncio else starquake.client).MessageId.earliest

    async def run() -> None:
        client = _client(amod, broker)
        try:
            with pytest.raises(TypeError):
                await client.subscribe("t", "sub", message_listener=print)
            with pytest.raises(TypeError):
                await client.create_reader("t", earliest, reader_listener=print)
        finally:
            await client.close()

    asyncio.run(run())
