"""Brokers joining a cluster, against a real nats-server: every topic is served by exactly one
member, lookups from any member agree on it, a member that leaves gives its bundles up at
once, one that dies (stops renewing) loses them within the lease time and is told so, and a
restarted member (same id, new incarnation) finds its predecessor's bundles free."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from starquake.cluster.bundles import BundleRef, NamespaceBundles
from starquake.cluster.membership import ClusterMembership
from starquake.cluster.nodes import JetStreamNode, jetstream_nodes
from starquake.cluster.registry import BrokerInfo

LEASE = 2.0
NAMESPACE = "public/default"
BUNDLES = NamespaceBundles.equal(4)
TOPICS = [f"persistent://public/default/t-{i}" for i in range(24)]


def _info(n: int) -> BrokerInfo:
    return BrokerInfo(
        broker_id=f"127.0.0.1:{8080 + n}",
        broker_url=f"pulsar://127.0.0.1:{6650 + n}",
        http_url=f"http://127.0.0.1:{8080 + n}",
    )


async def _join(
    node: JetStreamNode,
    cluster: str,
    n: int,
    lost: list[BundleRef] | None = None,
    lease: float = LEASE,
) -> ClusterMembership:
    sink: list[BundleRef] = [] if lost is None else lost
    return await ClusterMembership.join(
        [node.url], cluster, _info(n), lease_seconds=lease, on_bundle_lost=sink.append
    )


async def _until(check: Callable[[], Awaitable[bool]], within: float, what: str) -> None:
    deadline = time.monotonic() + within
    while not await check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


async def _owners(members: list[ClusterMembership]) -> dict[str, set[str]]:
    """For each topic: the brokers each member's lookup names (followed to the owner)."""
    named: dict[str, set[str]] = {}
    for topic in TOPICS:
        for member in members:
            answer = await member.locate(topic, NAMESPACE, BUNDLES, authoritative=False)
            if not answer.here:  # a client follows the redirect, asking authoritatively
                target = next(m for m in members if m.me.broker_id == answer.broker.broker_id)
                answer = await target.locate(topic, NAMESPACE, BUNDLES, authoritative=True)
                assert answer.here
            named.setdefault(topic, set()).add(answer.broker.broker_id)
    return named


def test_one_owner_per_topic_seen_alike_by_every_member(jetstream_node: JetStreamNode) -> None:
    cluster = f"c{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        members = [await _join(jetstream_node, cluster, n) for n in range(3)]
        try:
            named = await _owners(members)
            assert all(len(brokers) == 1 for brokers in named.values()), named
            for topic, (owner,) in named.items():
                serving = [m for m in members if m.owns(topic, NAMESPACE, BUNDLES)]
                assert [m.me.broker_id for m in serving] == [owner], topic
            assert len({b for (b,) in named.values()}) >= 2  # spread over the members
            assert sum(m.election.is_leader for m in members) == 1
        finally:
            for member in members:
                await member.leave()

    asyncio.run(scenario())


def test_leaving_frees_bundles_at_once_and_dying_within_the_lease(
    jetstream_node: JetStreamNode,
) -> None:
    cluster = f"c{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        a = await _join(jetstream_node, cluster, 1)
        b_lost: list[BundleRef] = []
        b = await _join(jetstream_node, cluster, 2, b_lost)
        try:
            for topic in TOPICS[:8]:
                await a.locate(topic, NAMESPACE, BUNDLES, authoritative=True)
            taken = a.ownership.owned()
            assert taken
            await a.leave()  # clean: the bundles are free for b at once
            for topic in TOPICS[:8]:
                answer = await b.locate(topic, NAMESPACE, BUNDLES, authoritative=True)
                assert answer.here
            held = set(b.ownership.owned())
            # b "dies": its renewals stop (the heartbeat task is stopped, nothing released)
            assert b._heartbeat is not None
            b._heartbeat.cancel()
            dead_at = time.monotonic()
            c = await _join(jetstream_node, cluster, 3)
            try:
                topic = TOPICS[0]

                async def c_serves() -> bool:
                    answer = await c.locate(topic, NAMESPACE, BUNDLES, authoritative=True)
                    return answer.here

                started = time.monotonic()
                await _until(c_serves, 4 * LEASE, "a dead member's bundle to be taken over")
                assert time.monotonic() - started <= 4 * LEASE
                # b's next renewal round reports what it lost, and it serves none of it: once
                # every lease it wrote before it "died" has ended (c's took over the first one
                # to end; b may have written the others later)
                await asyncio.sleep(max(0.0, dead_at + LEASE + 2 - time.monotonic()))
                await b._beat()
                assert set(b_lost) == held
                assert not b.ownership.owned()
                assert not b.owns(topic, NAMESPACE, BUNDLES)
            finally:
                await c.leave()
        finally:
            await b.leave()

    asyncio.run(scenario())


def test_a_restarted_member_finds_its_predecessors_bundles_free(
    jetstream_node: JetStreamNode,
) -> None:
    cluster = f"c{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        long = 30.0  # no lease ends during the test: what frees the bundle is the restart
        first = await _join(jetstream_node, cluster, 1, lease=long)
        await first.locate(TOPICS[0], NAMESPACE, BUNDLES, authoritative=True)
        assert first._heartbeat is not None
        first._heartbeat.cancel()  # killed: its leases stay until they expire
        other = await _join(jetstream_node, cluster, 2, lease=long)
        before = await other.locate(TOPICS[0], NAMESPACE, BUNDLES, authoritative=True)
        assert not before.here and before.broker.incarnation == first.me.incarnation
        again = await _join(jetstream_node, cluster, 1, lease=long)  # same id, new incarnation
        try:
            answer = await other.locate(TOPICS[0], NAMESPACE, BUNDLES, authoritative=True)
            assert answer.here
        finally:
            for member in (again, other):
                await member.leave()
            await first._close_tables()

    asyncio.run(scenario())


def test_a_member_cut_off_from_the_store_gives_its_bundles_up(tmp_path: Path) -> None:
    """When no renewal round succeeds for a whole lease time (the store is gone), every bundle
    held is reported lost: another broker may own it by now."""
    (node,) = jetstream_nodes(1, tmp_path)
    node.start()
    lost: list[BundleRef] = []

    async def scenario() -> None:
        member = await _join(node, f"c{uuid.uuid4().hex[:6]}", 1, lost)
        try:
            await member.locate(TOPICS[0], NAMESPACE, BUNDLES, authoritative=True)
            held = member.ownership.owned()
            assert held and not lost
            node.kill()
            started = time.monotonic()
            while not lost:
                assert time.monotonic() - started < 4 * LEASE, "the bundles were never given up"
                await asyncio.sleep(0.1)
            assert lost == held
            assert not member.owns(TOPICS[0], NAMESPACE, BUNDLES)
        finally:
            await asyncio.wait_for(member.leave(), 30)

    try:
        asyncio.run(scenario())
    finally:
        node.kill()
