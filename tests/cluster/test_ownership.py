"""The broker registry, bundle ownership and the leader, against a real nats-server: live
brokers are listed with their URLs and load and drop out when they stop renewing; a bundle
has one owner at a time, seen by every broker, taken over once its owner stops renewing; a
restarted broker clears its dead predecessor's leases; one leader, replaced when it dies, and
its assignments spread bundles over the least-loaded brokers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from starquake.cluster.bundles import BundleRef, NamespaceBundles, bundle_of
from starquake.cluster.leader import BundleAssigner, LeaderElection
from starquake.cluster.leases import LeaseTable
from starquake.cluster.lookup import LookupAnswer, TopicLookup
from starquake.cluster.nodes import JetStreamNode
from starquake.cluster.ownership import BundleOwnership
from starquake.cluster.presence import BrokerPresence
from starquake.cluster.registry import (
    BrokerInfo,
    BrokerLoad,
    BrokerRegistry,
    least_loaded,
    load_score,
)

TTL = 2.0


def _broker(n: int, **load: float) -> BrokerInfo:
    return BrokerInfo(
        broker_id=f"127.0.0.1:{8080 + n}",
        broker_url=f"pulsar://127.0.0.1:{6650 + n}",
        http_url=f"http://127.0.0.1:{8080 + n}",
        load=BrokerLoad(**load),  # type: ignore[arg-type]
    )


async def _until(check: Callable[[], Awaitable[bool]], within: float, what: str) -> float:
    start = time.monotonic()
    while not await check():
        assert time.monotonic() - start < within, what
        await asyncio.sleep(0.1)
    return time.monotonic() - start


async def _table(node: JetStreamNode, bucket: str, ttl: float = TTL) -> LeaseTable:
    return await LeaseTable.connect([node.url], bucket=bucket, ttl=ttl)


async def _present(table: LeaseTable, info: BrokerInfo) -> BrokerPresence:
    presence = BrokerPresence(table.connection, info)
    await presence.start()
    return presence


def test_registry_lists_live_brokers_and_drops_the_dead(jetstream_node: JetStreamNode) -> None:
    bucket = f"brokers_{uuid.uuid4().hex[:6]}"

    async def scenario() -> None:
        tables = [await _table(jetstream_node, bucket) for _ in range(2)]
        a, b = (BrokerRegistry(t) for t in tables)
        try:
            info_a, info_b = _broker(1), _broker(2)
            await a.register(info_a)
            await b.register(info_b)
            assert [x.broker_id for x in await a.brokers()] == [info_a.broker_id, info_b.broker_id]
            # a load report is seen by the others
            loaded = info_a.with_load(BrokerLoad(topics=7, msg_rate_in=120.0))
            await a.refresh(loaded)
            seen = await b.broker(info_a.broker_id)
            assert seen == loaded
            # b keeps renewing for longer than the lease time; a stops (it "died")
            deadline = time.monotonic() + 2 * TTL
            while time.monotonic() < deadline:
                await b.refresh(info_b)
                await asyncio.sleep(TTL / 4)

            async def only_b() -> bool:
                await b.refresh(info_b)
                return [x.broker_id for x in await b.brokers()] == [info_b.broker_id]

            await _until(only_b, TTL + 5, "the dead broker stayed registered")
            # a restarted broker at the same address registers at once
            restarted = _broker(1)
            assert restarted.incarnation != info_a.incarnation
            await a.register(restarted)
            assert await b.broker(restarted.broker_id) == restarted
            await b.unregister()
            assert await a.broker(info_b.broker_id) is None
        finally:
            for t in tables:
                await t.close()

    asyncio.run(scenario())


def test_one_owner_per_bundle_seen_everywhere_and_taken_over(
    jetstream_node: JetStreamNode,
) -> None:
    bucket = f"owners_{uuid.uuid4().hex[:6]}"
    ref = BundleRef("public/default", "0x00000000_0x40000000")
    other = BundleRef("public/default", "0x40000000_0x80000000")

    async def scenario() -> None:
        tables = [await _table(jetstream_node, bucket) for _ in range(3)]
        brokers = [_broker(i) for i in range(3)]
        taken: dict[str, list[BundleRef]] = {b.broker_id: [] for b in brokers}
        owners = [
            BundleOwnership(t, b, taken[b.broker_id].append)
            for t, b in zip(tables, brokers, strict=True)
        ]
        try:
            results = await asyncio.gather(*(o.acquire(ref) for o in owners))
            winner = results[0]
            assert winner is not None
            assert all(r == winner for r in results), "two brokers think they own the bundle"
            holders = [o for o in owners if o.owns(ref)]
            assert len(holders) == 1 and holders[0].me == winner
            # only the new owner is told, once (taking a bundle held already tells nobody)
            assert await holders[0].acquire(ref) == winner
            assert taken == {b.broker_id: [ref] if b == winner else [] for b in brokers}
            for o in owners:
                assert await o.owner(ref) == winner
                assert (await o.owners())[ref] == winner
            rest = [o for o in owners if not o.owns(ref)]
            # another bundle is free for another broker
            assert await rest[0].acquire(other) == rest[0].me
            assert await rest[1].owner(other) == rest[0].me
            # renewals keep it; the owner stops renewing: it ends, another takes it
            assert await holders[0].renew_all() == []
            started = time.monotonic()

            async def free() -> bool:
                await rest[0].renew_all()
                return await rest[1].owner(ref) is None

            await _until(free, TTL + 5, "the dead owner's lease never ended")
            assert time.monotonic() - started >= TTL * 0.75
            assert await rest[1].acquire(ref) == rest[1].me
            assert taken[rest[1].me.broker_id] == [ref]
            assert await holders[0].renew_all() == [ref]
            assert not holders[0].owns(ref)
            assert await holders[0].owner(ref) == rest[1].me
            # an unload gives it up at once
            await rest[1].release(ref)
            assert await holders[0].owner(ref) is None
            assert rest[0].owns(other)
        finally:
            for t in tables:
                await t.close()

    asyncio.run(scenario())


def test_a_restarted_broker_clears_its_predecessors_leases(jetstream_node: JetStreamNode) -> None:
    bucket = f"owners_{uuid.uuid4().hex[:6]}"
    refs = [BundleRef("t/ns", f"0x{i:08x}_0x{i + 1:08x}") for i in range(3)]

    async def scenario() -> None:
        tables = [await _table(jetstream_node, bucket) for _ in range(3)]
        try:
            dead = BundleOwnership(tables[0], _broker(1))
            for ref in refs:
                assert await dead.acquire(ref) == dead.me
            neighbour = BundleOwnership(tables[2], _broker(2))
            assert await neighbour.acquire(refs[0]) == dead.me
            reborn = BundleOwnership(tables[1], _broker(1))  # same id, new incarnation
            # the predecessor's leases do not count as anyone's
            assert await reborn.owner(refs[0]) is None
            assert await reborn.acquire(refs[0]) == reborn.me
            assert await reborn.release_predecessors() == 2
            assert await neighbour.owner(refs[1]) is None
            assert await neighbour.acquire(refs[1]) == neighbour.me
        finally:
            for t in tables:
                await t.close()

    asyncio.run(scenario())


def test_load_score_prefers_low_rates_and_shuns_overloaded_brokers() -> None:
    idle, busy = _broker(1), _broker(2, msg_rate_in=500.0, msg_rate_out=500.0)
    hot = _broker(3, cpu_percent=95.0)
    assert least_loaded([busy, hot, idle], {}) == idle
    assert load_score(hot.load) == float("inf")
    assert least_loaded([hot, busy], {}) == busy
    # bundles given since the last report count: the next one goes elsewhere
    twin = _broker(4)
    assert least_loaded([idle, twin], {idle.broker_id: 1}) == twin
    with pytest.raises(ValueError):
        least_loaded([], {})
    assert BrokerInfo.from_json(busy.to_json()) == busy
    with pytest.raises(ValueError):
        BrokerInfo.from_json(b'{"broker_id": 3, "nope": 1}')


def test_one_leader_spreads_bundles_and_is_replaced_when_it_dies(
    jetstream_node: JetStreamNode,
) -> None:
    suffix = uuid.uuid4().hex[:6]
    cluster = f"c{suffix}"

    async def scenario() -> None:
        owner_tables = [await _table(jetstream_node, f"owners_{suffix}") for _ in range(3)]
        registry_tables = [await _table(jetstream_node, f"brokers_{suffix}") for _ in range(3)]
        infos = [_broker(i) for i in range(3)]
        registries = [BrokerRegistry(t) for t in registry_tables]
        elections = [LeaderElection(t, i) for t, i in zip(owner_tables, infos, strict=True)]
        presences = [await _present(t, i) for t, i in zip(owner_tables, infos, strict=True)]
        assigners = [
            BundleAssigner(t.connection, cluster, r, e, p)
            for t, r, e, p in zip(owner_tables, registries, elections, presences, strict=True)
        ]
        try:
            for registry, info in zip(registries, infos, strict=True):
                await registry.register(info)
            # no leader yet: a broker chooses by itself
            assert (await assigners[1].assign(BundleRef("t/ns", "x"))).broker_id in {
                i.broker_id for i in infos
            }
            won = await asyncio.gather(*(e.campaign() for e in elections))
            assert sum(won) == 1
            leader = won.index(True)
            for a in assigners:
                await a.follow_leadership()
            assert await elections[(leader + 1) % 3].leader() == infos[leader]
            # six bundles asked for through a follower: two per broker
            asker = assigners[(leader + 1) % 3]
            chosen = [await asker.assign(BundleRef("t/ns", f"b{i}")) for i in range(6)]
            assert Counter(c.broker_id for c in chosen) == {i.broker_id: 2 for i in infos}
            # the leader dies (stops renewing); a follower takes over within the lease time
            followers = [i for i in range(3) if i != leader]
            await assigners[leader].close()

            async def new_leader() -> bool:
                return any([await elections[i].campaign() for i in followers])

            await _until(new_leader, TTL + 5, "no new leader")
            assert await elections[leader].campaign() is False
            assert not elections[leader].is_leader
            successor = next(i for i in followers if elections[i].is_leader)
            assert await elections[leader].leader() == infos[successor]
        finally:
            for a in assigners:
                await a.close()
            for t in owner_tables + registry_tables:
                await t.close()

    asyncio.run(scenario())


async def _member(
    node: JetStreamNode, suffix: str, n: int, ttl: float
) -> tuple[list[LeaseTable], BrokerRegistry, TopicLookup, Any]:
    """Broker ``n`` of cluster ``c{suffix}``: its tables, registry, lookup and parts."""
    owners_t = await _table(node, f"owners_{suffix}", ttl)
    brokers_t = await _table(node, f"brokers_{suffix}", ttl)
    info = _broker(n)
    registry = BrokerRegistry(brokers_t)
    await registry.register(info)
    election = LeaderElection(owners_t, info)
    presence = await _present(owners_t, info)
    assigner = BundleAssigner(owners_t.connection, f"c{suffix}", registry, election, presence)
    ownership = BundleOwnership(owners_t, info)
    return (
        [owners_t, brokers_t],
        registry,
        TopicLookup(ownership, assigner, presence),
        (election, assigner, ownership, info),
    )


async def _close_members(
    members: list[tuple[list[LeaseTable], BrokerRegistry, TopicLookup, Any]],
) -> None:
    for m in members:
        await m[3][1].close()
        for t in m[0]:
            await t.close()


async def _follow(
    lookups: dict[str, TopicLookup], first: str, topic: str, bundles: NamespaceBundles
) -> LookupAnswer:
    """Look ``topic`` up through broker ``first`` and follow the redirects."""
    answer = await lookups[first].lookup(topic, "t/ns", bundles, authoritative=False)
    hops = 0
    while not answer.here:
        hops += 1
        assert hops <= 2, f"{topic}: redirected in a loop"
        target = answer.broker.broker_id
        answer = await lookups[target].lookup(topic, "t/ns", bundles, authoritative=True)
    return answer


def test_lookups_through_any_broker_agree_and_skip_a_dead_one(
    jetstream_node: JetStreamNode,
) -> None:
    suffix = uuid.uuid4().hex[:6]
    bundles = NamespaceBundles.equal(4)
    topics = [f"persistent://t/ns/topic-{i}-partition-{p}" for i in range(5) for p in range(4)]

    async def member(n: int) -> tuple[list[LeaseTable], BrokerRegistry, TopicLookup, Any]:
        return await _member(jetstream_node, suffix, n, TTL)

    async def scenario() -> None:
        members = [await member(n) for n in range(3)]
        lookups = {m[3][3].broker_id: m[2] for m in members}
        ids = sorted(lookups)
        try:
            for m in members:
                await m[3][0].campaign()
                await m[3][1].follow_leadership()
            served: dict[str, str] = {}
            for i, topic in enumerate(topics):
                answer = await _follow(lookups, ids[i % 3], topic, bundles)
                served[topic] = answer.broker.broker_id
                assert answer.bundle == bundle_of(topic, "t/ns", bundles)
            # the same bundle, the same broker; every broker sees the same owners
            by_bundle: dict[BundleRef, set[str]] = {}
            for topic, broker_id in served.items():
                by_bundle.setdefault(bundle_of(topic, "t/ns", bundles), set()).add(broker_id)
            assert all(len(v) == 1 for v in by_bundle.values())
            assert len(by_bundle) == 4
            assert sorted(Counter(next(iter(v)) for v in by_bundle.values()).values()) == [1, 1, 2]
            for m in members:
                answers = [await m[2].lookup(t, "t/ns", bundles, False) for t in topics]
                assert {
                    t: a.broker.broker_id for t, a in zip(topics, answers, strict=True)
                } == served
            # broker 0 hangs (its connection lives, it renews nothing): its registration and
            # bundles expire; lookups go to live ones
            dead = members[0][3][3].broker_id
            live = members[1:]

            async def renewed_everything_else() -> bool:
                for m in live:
                    await m[1].refresh(m[3][3])
                    await m[3][2].renew_all()
                    await m[3][0].campaign()
                    await m[3][1].follow_leadership()
                return dead not in [b.broker_id for b in await live[0][1].brokers()] and all(
                    ref.bundle and owner.broker_id != dead
                    for ref, owner in (await live[0][3][2].owners()).items()
                )

            await _until(renewed_everything_else, 2 * TTL + 5, "the dead broker stayed")
            del lookups[dead]
            for i, topic in enumerate(topics):
                answer = await _follow(lookups, sorted(lookups)[i % 2], topic, bundles)
                assert answer.broker.broker_id != dead
        finally:
            await _close_members(members)

    asyncio.run(scenario())


def test_a_killed_broker_loses_its_bundles_before_its_leases_end(
    jetstream_node: JetStreamNode,
) -> None:
    """A broker whose connection to NATS is gone (a killed process) is counted gone at the
    next lookup of one of its bundles: its leases end then, not at their expiry (60 s here),
    the bundle goes to a live broker, and the leader stops giving it bundles."""
    suffix = uuid.uuid4().hex[:6]
    bundles = NamespaceBundles.equal(4)
    topics = [f"persistent://t/ns/topic-{i}" for i in range(16)]

    async def scenario() -> None:
        members = [await _member(jetstream_node, suffix, n, 60.0) for n in range(3)]
        lookups = {m[3][3].broker_id: m[2] for m in members}
        try:
            for m in members:
                await m[3][0].campaign()
                await m[3][1].follow_leadership()
            ids = sorted(lookups)
            served = {t: (await _follow(lookups, ids[0], t, bundles)).broker for t in topics}
            victim = Counter(b.broker_id for b in served.values()).most_common(1)[0][0]
            dead = next(m for m in members if m[3][3].broker_id == victim)
            for table in dead[0]:  # its sockets close, as the OS closes a killed process's
                await table.close()
            members.remove(dead)
            del lookups[victim]
            live = sorted(lookups)
            for i, topic in enumerate(topics):
                answer = await _follow(lookups, live[i % 2], topic, bundles)
                assert answer.broker.broker_id != victim, topic
                if served[topic].broker_id != victim:
                    assert answer.broker.broker_id == served[topic].broker_id, topic
            registered = [b.broker_id for b in await members[0][1].brokers()]
            assert victim not in registered
            owners = await members[0][3][2].owners()
            assert victim not in {o.broker_id for o in owners.values()}
            leader = await members[0][3][0].leader()
            assert leader is None or leader.broker_id != victim
        finally:
            await _close_members(members)

    asyncio.run(scenario())
