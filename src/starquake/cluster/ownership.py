"""Bundle ownership: each namespace bundle is served by one live broker, which holds its lease.

The lease of bundle ``B`` of namespace ``tenant/ns`` is named ``bundle/tenant/ns/B``; its
value is the owner's :class:`BrokerInfo` (so any broker answers a lookup from the lease
alone). A broker takes a bundle with create-if-absent, renews all its bundles every
``ttl / 3`` and stops serving a bundle whose renewal is refused (the lease expired, perhaps
another broker holds it now). A lease left by this broker's dead predecessor (same id,
another incarnation) is released at once rather than waited out. Each bundle taken is told
to ``on_acquired`` (the broker starts what runs with the bundle, e.g. transaction
coordinators).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from starquake.cluster.bundles import BundleRef
from starquake.cluster.leases import Lease, LeaseLostError, LeaseTable
from starquake.cluster.registry import BrokerInfo, end_leases_of, parse_info

log = logging.getLogger(__name__)


def lease_name(ref: BundleRef) -> str:
    return f"bundle/{ref.namespace}/{ref.bundle}"


def _ref_of(name: str) -> BundleRef | None:
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != "bundle":
        return None
    return BundleRef(f"{parts[1]}/{parts[2]}", parts[3])


class BundleOwnership:
    """The bundle leases of one broker (``me``), and who owns the others."""

    def __init__(
        self,
        table: LeaseTable,
        me: BrokerInfo,
        on_acquired: Callable[[BundleRef], object] | None = None,
    ) -> None:
        """``on_acquired``: told of each bundle taken here (after its lease is held)."""
        self._table = table
        self._on_acquired = on_acquired
        self._me = me
        self._value = me.to_json()
        self._held: dict[BundleRef, Lease] = {}

    @property
    def me(self) -> BrokerInfo:
        return self._me

    def owns(self, ref: BundleRef) -> bool:
        return ref in self._held

    def owned(self) -> list[BundleRef]:
        return sorted(self._held)

    def _is_predecessor(self, info: BrokerInfo | None) -> bool:
        return (
            info is not None
            and info.broker_id == self._me.broker_id
            and info.incarnation != self._me.incarnation
        )

    async def acquire(self, ref: BundleRef) -> BrokerInfo | None:
        """Take ``ref`` unless another live broker owns it; the owner afterwards (None only
        when the owner's lease ended during the attempt)."""
        if ref in self._held:
            return self._me
        for _ in range(2):
            lease = await self._table.acquire(lease_name(ref), self._value)
            if lease is not None:
                self._held[ref] = lease
                log.info("bundle %s/%s owned", ref.namespace, ref.bundle)
                if self._on_acquired is not None:
                    try:
                        self._on_acquired(ref)
                    except Exception:  # the bundle is owned all the same
                        log.exception("bundle %s/%s: a listener failed", *ref)
                return self._me
            held = await self._held_by(ref)
            if held is None:
                continue  # it ended meanwhile: try again
            owner, stale = held
            if not self._is_predecessor(owner):
                return owner
            await self._table.release(stale)
        return await self.owner(ref)

    async def _held_by(self, ref: BundleRef) -> tuple[BrokerInfo | None, Lease] | None:
        for lease in await self._table.leases():
            if lease.name == lease_name(ref):
                return parse_info(lease.value), lease
        return None

    async def owner(self, ref: BundleRef) -> BrokerInfo | None:
        """Who owns ``ref`` now (None: nobody)."""
        if ref in self._held:
            return self._me
        raw = await self._table.holder(lease_name(ref))
        if raw is None:
            return None
        info = parse_info(raw)
        return None if self._is_predecessor(info) else info

    async def owners(self) -> dict[BundleRef, BrokerInfo]:
        """Every owned bundle of the cluster and its owner."""
        out = {}
        for name, raw in (await self._table.holders()).items():
            ref, info = _ref_of(name), parse_info(raw)
            if ref is not None and info is not None and not self._is_predecessor(info):
                out[ref] = info
        return out

    async def renew_all(self) -> list[BundleRef]:
        """Renew every lease held; returns the bundles lost (no longer served from now)."""
        lost = []
        for ref, lease in list(self._held.items()):
            try:
                self._held[ref] = await self._table.renew(lease)
            except LeaseLostError:
                del self._held[ref]
                lost.append(ref)
                log.warning("bundle %s/%s lost: its lease was not renewed in time", *ref)
        return lost

    def forget_all(self) -> list[BundleRef]:
        """Stop counting every held lease as this broker's (they could not be renewed within
        the lease time: another broker may own them now); the bundles given up."""
        lost = sorted(self._held)
        self._held.clear()
        return lost

    async def release(self, ref: BundleRef) -> None:
        """Give ``ref`` up now (an unload)."""
        lease = self._held.pop(ref, None)
        if lease is not None:
            await self._table.release(lease)
            log.info("bundle %s/%s released", ref.namespace, ref.bundle)

    async def end_leases_of(self, gone: BrokerInfo) -> int:
        """End every lease the broker incarnation ``gone`` holds (its process is gone): its
        bundles and, if it led, the leader's lease; how many."""
        return await end_leases_of(self._table, gone)

    async def release_predecessors(self) -> int:
        """Release every lease a dead predecessor at this broker's id still holds; how many."""
        released = 0
        for lease in await self._table.leases():
            if _ref_of(lease.name) is not None and self._is_predecessor(parse_info(lease.value)):
                await self._table.release(lease)
                released += 1
        return released
