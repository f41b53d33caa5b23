"""The leader broker, and how unowned bundles are given to brokers.

One broker leads: it holds the lease ``leader`` in the owners' bucket (the same mechanics as
a bundle's lease, so it changes hands within the lease time when the leader dies). A broker
asked to look up a topic whose bundle nobody owns asks the leader which broker should own it,
over a NATS request on ``sq.<cluster>.assign``; the leader answers with the least-loaded live
broker (as Pulsar's load manager picks), counting the bundles it gave out since each broker's
last load report. The chosen broker takes the bundle's lease when the client reaches it; the
lease, not the leader's answer, decides the owner, so two answers that disagree (a leader
change) cost a redirect, never two owners. Without a leader (none elected yet, or its answer
late), the asking broker chooses by the same rule itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from typing import Any

from nats.errors import Error as NatsError

from starquake.cluster.bundles import BundleRef
from starquake.cluster.leases import Lease, LeaseLostError, LeaseTable
from starquake.cluster.presence import BrokerPresence
from starquake.cluster.registry import BrokerInfo, BrokerRegistry, least_loaded, parse_info

log = logging.getLogger(__name__)

LEADER_LEASE = "leader"
ASK_TIMEOUT = 2.0


def assign_subject(cluster: str) -> str:
    return f"sq.{cluster}.assign"


class LeaderElection:
    """Campaign for the leader's lease and keep it while renewing."""

    def __init__(self, table: LeaseTable, me: BrokerInfo) -> None:
        self._table = table
        self._me = me
        self._lease: Lease | None = None

    @property
    def is_leader(self) -> bool:
        return self._lease is not None

    async def campaign(self) -> bool:
        """One round (every ``ttl / 3``): renew the lease if held, else try to take it.
        True while this broker leads."""
        if self._lease is not None:
            try:
                self._lease = await self._table.renew(self._lease)
            except LeaseLostError:
                self._lease = None
                log.warning("no longer the leader broker: the lease was not renewed in time")
            return self._lease is not None
        self._lease = await self._table.acquire(LEADER_LEASE, self._me.to_json())
        if self._lease is not None:
            log.info("this broker is the leader broker")
        return self._lease is not None

    async def resign(self) -> None:
        if self._lease is not None:
            await self._table.release(self._lease)
            self._lease = None

    async def leader(self) -> BrokerInfo | None:
        return parse_info(await self._table.holder(LEADER_LEASE))


class BundleAssigner:
    """Chooses owners for unowned bundles: answers the others' requests while leading."""

    def __init__(
        self,
        nc: Any,
        cluster: str,
        registry: BrokerRegistry,
        election: LeaderElection,
        presence: BrokerPresence,
    ) -> None:
        self._nc = nc
        self._presence = presence
        self._subject = assign_subject(cluster)
        self._registry = registry
        self._election = election
        self._given: dict[str, list[float]] = {}  # broker id -> when bundles were given
        self._subscription: Any = None

    async def follow_leadership(self) -> None:
        """Answer requests exactly while this broker leads (call after each campaign)."""
        if self._election.is_leader and self._subscription is None:
            self._subscription = await self._nc.subscribe(self._subject, cb=self._answer)
        elif not self._election.is_leader:
            await self.close()

    async def _answer(self, msg: Any) -> None:
        try:
            chosen = await self.choose()
        except ValueError:  # no live broker registered (yet)
            return
        with contextlib.suppress(NatsError):
            await msg.respond(chosen.to_json())

    async def choose(self) -> BrokerInfo:
        """The least-loaded live broker, counting what was given since its last report (a
        registered broker whose process is gone is left out, and its registration ended)."""
        now = time.monotonic()
        horizon = now - self._registry.ttl
        for broker_id in list(self._given):
            recent = [t for t in self._given[broker_id] if t > horizon]
            if recent:
                self._given[broker_id] = recent
            else:
                del self._given[broker_id]
        brokers = []
        for broker in await self._registry.brokers():
            if await self._presence.gone(broker):
                await self._registry.remove(broker)
            else:
                brokers.append(broker)
        chosen = least_loaded(brokers, {b: len(ts) for b, ts in self._given.items()})
        self._given.setdefault(chosen.broker_id, []).append(now)
        return chosen

    async def assign(self, ref: BundleRef) -> BrokerInfo:
        """Which broker should own ``ref``: the leader's answer, or this broker's own choice
        when no leader answers. ValueError when no broker is registered."""
        if self._election.is_leader:
            return await self.choose()
        request = json.dumps({"namespace": ref.namespace, "bundle": ref.bundle}).encode()
        try:
            reply = await self._nc.request(self._subject, request, timeout=ASK_TIMEOUT)
            return BrokerInfo.from_json(reply.data)
        except (TimeoutError, NatsError, ValueError):
            return await self.choose()

    async def close(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            with contextlib.suppress(NatsError):
                await subscription.unsubscribe()
