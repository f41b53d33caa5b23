"""Leases in a JetStream key-value bucket, against a real nats-server: one holder at a time,
kept while renewed, ended when not renewed (the basis of bundle ownership and of the broker
registry), given up at once by release, and a lost lease's renewal refused."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from starquake.cluster.leases import LeaseLostError, LeaseTable
from starquake.cluster.nodes import JetStreamNode

TTL = 2.0


def test_one_holder_renewals_expiry_and_takeover(jetstream_node: JetStreamNode) -> None:
    name = f"public/default/0x00000000_0x40000000-{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        table = await LeaseTable.connect([jetstream_node.url], bucket="owners_a", ttl=TTL)
        try:
            lease = await table.acquire(name, b"broker-a")
            assert lease is not None
            assert await table.acquire(name, b"broker-b") is None
            # renewed for longer than the time to live: still held
            until = time.monotonic() + 2 * TTL
            while time.monotonic() < until:
                lease = await table.renew(lease)
                await asyncio.sleep(TTL / 4)
            assert await table.holder(name) == b"broker-a"
            assert (await table.holders()).get(name) == b"broker-a"
            # no more renewals: the lease ends, and another holder may take it
            stopped = time.monotonic()
            while await table.holder(name) is not None:
                assert time.monotonic() - stopped < TTL + 5, "the lease never expired"
                await asyncio.sleep(0.1)
            assert time.monotonic() - stopped >= TTL * 0.75
            taken = await table.acquire(name, b"broker-b")
            assert taken is not None
            # taken over within about the lease time (not after the expiry marker's own
            # lifetime too)
            assert time.monotonic() - stopped < TTL + 1.5
            with pytest.raises(LeaseLostError):
                await table.renew(lease)
            assert await table.holder(name) == b"broker-b"
            await table.release(lease)  # a lost lease's release changes nothing
            assert await table.holder(name) == b"broker-b"
            await table.release(taken)
            assert await table.holder(name) is None
            again = await table.acquire(name, b"broker-c")
            assert again is not None and await table.holder(name) == b"broker-c"
        finally:
            await table.close()

    asyncio.run(scenario())


def test_two_contenders_never_both_hold(jetstream_node: JetStreamNode) -> None:
    name = f"leader-{uuid.uuid4().hex[:6]}"

    async def scenario() -> list[bool]:
        tables = [
            await LeaseTable.connect([jetstream_node.url], bucket="owners_b", ttl=30)
            for _ in range(4)
        ]
        try:
            won = await asyncio.gather(
                *(t.acquire(name, f"b{i}".encode()) for i, t in enumerate(tables))
            )
            return [lease is not None for lease in won]
        finally:
            for t in tables:
                await t.close()

    assert sum(asyncio.run(scenario())) == 1


def test_listings_leave_no_consumers_behind(jetstream_node: JetStreamNode) -> None:
    """Each listing of the holders is a watch (a consumer on the server); many listings in a
    row must not pile consumers up (the server refuses new ones past its limit)."""

    async def scenario() -> tuple[int, int]:
        table = await LeaseTable.connect([jetstream_node.url], bucket="owners_c", ttl=30)
        try:
            await table.acquire("some/lease", b"x")
            for _ in range(40):
                assert await table.holders() == {"some/lease": b"x"}
            js = table.connection.jetstream()
            right_after = (await js.stream_info("KV_owners_c")).state.consumer_count
            deadline = time.monotonic() + 15
            while (await js.stream_info("KV_owners_c")).state.consumer_count > 0:
                assert time.monotonic() < deadline, "the listings' consumers stayed"
                await asyncio.sleep(0.25)
            return right_after, 0
        finally:
            await table.close()

    right_after, later = asyncio.run(scenario())
    assert later == 0 and right_after <= 40
