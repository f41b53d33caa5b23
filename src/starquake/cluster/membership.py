"""One broker's membership of a cluster: its registration, its bundles, the leader's role.

:class:`ClusterMembership` puts together what a broker runs in a cluster: it registers in
the cluster's brokers' bucket (``sq_<cluster>_brokers``; bundle and leader leases are in
``sq_<cluster>_owners``) with its URLs and load, releases the bundle leases a dead
predecessor at its broker id still holds, and then, every third of the lease time, renews its
registration (with a fresh load report), campaigns for the leader's lease (answering the
others' assignment requests while it leads) and renews its bundle leases. A bundle whose lease
could not be renewed in time is handed to ``on_bundle_lost`` (the broker closes its topics: a
new owner may already serve them); so is every bundle held when no round has succeeded for a
whole lease time (the store does not answer: the leases may have ended meanwhile). Lookups
go through :meth:`locate` (owned here, owned by another broker, or given out by the leader);
:meth:`owns` answers synchronously whether this broker serves a topic, for the commands
refused with ``ServiceNotReady`` otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import math
import re
import time
from collections.abc import Callable

from nats.errors import Error as NatsError

from starquake.cluster.bundles import BundleRef, NamespaceBundles, NoOwnerError, bundle_of
from starquake.cluster.leader import BundleAssigner, LeaderElection
from starquake.cluster.leases import LeaseLostError, LeaseTable
from starquake.cluster.lookup import LookupAnswer, TopicLookup
from starquake.cluster.ownership import BundleOwnership
from starquake.cluster.presence import BrokerPresence
from starquake.cluster.registry import BrokerInfo, BrokerLoad, BrokerRegistry
from starquake.storage import StorageError

__all__ = ["ClusterMembership", "ClusterView", "NoOwnerError", "brokers_bucket", "owners_bucket"]

log = logging.getLogger(__name__)


def _bucket_part(cluster: str) -> str:
    """``cluster`` in the characters a bucket name allows (others become ``_``)."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", cluster)


def brokers_bucket(cluster: str) -> str:
    """The bucket of the cluster's broker registrations."""
    return f"sq_{_bucket_part(cluster)}_brokers"


def owners_bucket(cluster: str) -> str:
    """The bucket of the cluster's bundle leases and leader lease."""
    return f"sq_{_bucket_part(cluster)}_owners"


@dataclasses.dataclass(frozen=True)
class ClusterView:
    """The cluster as the store says now: live brokers (with their load reports), the leader's
    id (None while none is elected) and the owner of every owned bundle."""

    brokers: list[BrokerInfo]
    leader: str | None
    owners: dict[BundleRef, BrokerInfo]


class ClusterMembership:
    """A joined broker; create with :meth:`join`, end with :meth:`leave`."""

    def __init__(
        self,
        me: BrokerInfo,
        brokers: LeaseTable,
        owners: LeaseTable,
        cluster: str,
        on_bundle_lost: Callable[[BundleRef], object],
        load: Callable[[], BrokerLoad],
        on_bundle_acquired: Callable[[BundleRef], object] | None = None,
    ) -> None:
        self._me = me
        self._brokers = brokers
        self._owners = owners
        self._on_bundle_lost = on_bundle_lost
        self._load = load
        self.registry = BrokerRegistry(brokers)
        self.ownership = BundleOwnership(owners, me, on_bundle_acquired)
        self.election = LeaderElection(owners, me)
        self.presence = BrokerPresence(owners.connection, me)
        self.assigner = BundleAssigner(
            owners.connection, cluster, self.registry, self.election, self.presence
        )
        self._lookup = TopicLookup(self.ownership, self.assigner, self.presence)
        self._heartbeat: asyncio.Task[None] | None = None

    @classmethod
    async def join(
        cls,
        servers: list[str],
        cluster: str,
        me: BrokerInfo,
        *,
        lease_seconds: float,
        on_bundle_lost: Callable[[BundleRef], object],
        on_bundle_acquired: Callable[[BundleRef], object] | None = None,
        load: Callable[[], BrokerLoad] = BrokerLoad,
        replicas: int = 1,
        give_up_after: float = 30,
    ) -> ClusterMembership:
        """Register ``me`` in the cluster whose JetStream nodes are ``servers`` and start
        renewing; raises what connecting raises when the nodes do not answer in time."""
        tables: list[LeaseTable] = []
        try:
            for bucket in (brokers_bucket(cluster), owners_bucket(cluster)):
                tables.append(
                    await LeaseTable.connect(
                        servers,
                        bucket=bucket,
                        ttl=lease_seconds,
                        replicas=replicas,
                        give_up_after=give_up_after,
                    )
                )
        except BaseException:
            for table in tables:
                await table.close()
            raise
        brokers, owners = tables
        member = cls(me, brokers, owners, cluster, on_bundle_lost, load, on_bundle_acquired)
        try:
            await member.presence.start()
            await member.registry.register(member._report())
            released = await member.ownership.release_predecessors()
            if released:
                log.info("released %d bundle(s) of this broker's previous run", released)
            await member._beat()
        except BaseException:
            await member._close_tables()
            raise
        member._heartbeat = asyncio.get_running_loop().create_task(member._keep_alive())
        log.info("joined cluster %s as %s", cluster, me.broker_id)
        return member

    @property
    def me(self) -> BrokerInfo:
        return self._me

    def owns(self, topic: str, namespace: str, bundles: NamespaceBundles) -> bool:
        """Whether this broker serves ``topic`` now (its bundle's lease is held here)."""
        return self.ownership.owns(bundle_of(topic, namespace, bundles))

    async def locate(
        self, topic: str, namespace: str, bundles: NamespaceBundles, authoritative: bool
    ) -> LookupAnswer:
        """Which broker serves ``topic``; takes its bundle when this broker should.
        NoOwnerError when none can be found or chosen now (no live broker, or the store
        does not answer)."""
        try:
            return await self._lookup.lookup(topic, namespace, bundles, authoritative)
        except LookupError as exc:
            raise NoOwnerError(str(exc)) from exc
        except (NatsError, TimeoutError, OSError, ValueError) as exc:
            raise NoOwnerError(f"the cluster's store did not answer: {exc}") from exc

    async def view(self) -> ClusterView:
        """The brokers, the leader and the bundles' owners; StorageError when the store does
        not answer."""
        try:
            brokers = await self.registry.brokers()
            leader = await self.election.leader()
            owners = await self.ownership.owners()
        except (NatsError, TimeoutError, OSError) as exc:
            raise StorageError(f"the cluster's store did not answer: {exc!r}") from exc
        return ClusterView(brokers, None if leader is None else leader.broker_id, owners)

    async def release(self, ref: BundleRef) -> None:
        """Give a bundle up (an unload: its topics must be closed first)."""
        await self.ownership.release(ref)

    def _report(self) -> BrokerInfo:
        """This broker's registration with its load now (bundles: those it owns)."""
        load = dataclasses.replace(self._load(), bundles=len(self.ownership.owned()))
        return self._me.with_load(load)

    async def _beat(self) -> None:
        """One round: registration and load, the leader's lease, the bundle leases."""
        try:
            await self.registry.refresh(self._report())
        except LeaseLostError:  # cut off for longer than the lease time: enter again
            log.warning("this broker's registration had expired; registering again")
            await self.registry.register(self._report())
        await self.election.campaign()
        await self.assigner.follow_leadership()
        for ref in await self.ownership.renew_all():
            self._on_bundle_lost(ref)

    async def _keep_alive(self) -> None:
        ttl = self.registry.ttl
        renewed_at = time.monotonic()
        warned_at = -math.inf  # one warning per lease time while the store is away
        failures = 0
        while True:
            await asyncio.sleep(ttl / 3)
            started = time.monotonic()
            try:
                await self._beat()
                renewed_at = started
                if failures:
                    log.info("cluster heartbeat works again (%d round(s) failed)", failures)
                    failures, warned_at = 0, -math.inf
            except (NatsError, TimeoutError, OSError) as exc:
                failures += 1
                if started - warned_at >= ttl:
                    warned_at = started
                    log.warning("cluster heartbeat failed: %s", exc)
                if time.monotonic() - renewed_at >= ttl:
                    # not renewed within the lease time: another broker may own the bundles
                    # now, so stop serving them even though the store cannot say
                    for ref in self.ownership.forget_all():
                        self._on_bundle_lost(ref)

    async def leave(self) -> None:
        """Stop renewing, give every bundle and the leader's lease up, unregister."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        with contextlib.suppress(NatsError, TimeoutError, OSError):
            await self.presence.stop()
            for ref in self.ownership.owned():
                await self.ownership.release(ref)
            await self.assigner.close()
            await self.election.resign()
            await self.registry.unregister()
        await self._close_tables()
        log.info("left the cluster")

    async def _close_tables(self) -> None:
        for table in (self._owners, self._brokers):
            with contextlib.suppress(NatsError, TimeoutError, OSError):
                await table.close()
