"""The client's extensions for writers that cross processes (the Spark sink's transaction
mode): packed batch entries sent in a transaction, a transaction ended by another client from
its id, and the count of a producer's registrations (more than one after a reconnection)."""

from __future__ import annotations

import asyncio

import pytest
from txn_helpers import new_topic

from starquake.broker.embedded import EmbeddedBroker
from starquake.client import InitialPosition
from starquake.client import asyncio as aio
from starquake.client.bulk import pack_rows
from starquake.client.exceptions import InvalidConfiguration, TransactionNotFound


async def _drain(consumer: aio.Consumer, quiet: float = 0.5) -> list[bytes]:
    got = []
    while True:
        try:
            msg = await asyncio.wait_for(consumer.receive(), quiet)
        except TimeoutError:
            return got
        await consumer.acknowledge(msg)
        got.append(msg.data())


def test_packed_entries_of_a_transaction_show_at_its_commit_only(
    txn_broker: EmbeddedBroker,
) -> None:
    async def scenario() -> tuple[list[bytes], list[bytes], int]:
        writer = aio.Client(txn_broker.service_url, enable_transaction=True)
        ender = aio.Client(txn_broker.service_url, enable_transaction=True)
        try:
            topic = new_topic()
            consumer = await writer.subscribe(
                topic, "sub", initial_position=InitialPosition.Earliest
            )
            producer = await writer.create_producer(topic)
            kept, dropped = await writer.new_transaction(), await writer.new_transaction()
            for txn, prefix in ((dropped, b"x"), (kept, b"k")):
                await txn.register_produced_topic(producer.topic())
                values = [prefix + str(i).encode() for i in range(5)]
                await producer.send_packed(pack_rows(values, list(range(5))), txn)
            before = await _drain(consumer)
            # another client (another process) ends them from their ids
            await ender.resume_transaction(dropped.txn_id).abort()
            await ender.resume_transaction(kept.txn_id).commit()
            after = await _drain(consumer)
            with pytest.raises(TransactionNotFound):  # ended: the coordinator forgot it
                await ender.resume_transaction(kept.txn_id).commit()
            return before, after, producer.registrations
        finally:
            await writer.close()
            await ender.close()

    before, after, registrations = asyncio.run(scenario())
    assert before == []
    assert after == [b"k0", b"k1", b"k2", b"k3", b"k4"]
    assert registrations == 1


def test_resume_transaction_needs_transactions_enabled(txn_broker: EmbeddedBroker) -> None:
    async def scenario() -> None:
        client = aio.Client(txn_broker.service_url)
        try:
            with pytest.raises(InvalidConfiguration, match="enable_transaction=True"):
                client.resume_transaction((0, 1))
        finally:
            await client.close()

    asyncio.run(scenario())
