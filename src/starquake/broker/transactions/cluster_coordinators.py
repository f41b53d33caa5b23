"""Cluster mode: each transaction coordinator runs on the owner of its assign partition.

Coordinator ``N`` runs on the broker that owns the bundle of partition ``N`` of
``persistent://pulsar/system/transaction_coordinator_assign``. As Pulsar's broker loads the
coordinators when it takes the bundle of the system namespace that holds their partitions
(not only when a client connects to them), a broker here loads them:

- when it acquires a bundle (:meth:`ClusterCoordinators.bundle_acquired`, told by the
  placement): the coordinators whose partitions are in it are recovered from their logs in a
  task each (the recovery fences a previous owner's log, re-drives the transactions being
  ended and times out the open ones);
- at a client's TC_CLIENT_CONNECT (:meth:`ClusterCoordinators.ensure`), as before: loading
  is shared, so a coordinator is recovered once whichever comes first;
- by adoption: a bundle whose owner died is taken by nobody until a lookup asks for it, so
  every lease period each broker looks up the owner of each assign partition whose
  coordinator is not loaded here (authoritatively every other round, see :meth:`_adopt`).
  While a live broker owns it, that is a read of its lease (and a cached presence check),
  no write; when none does, one broker takes the bundle and recovers the coordinator, so
  that its open transactions time out and their topics and subscriptions move on.

A bundle closed here stops its coordinators (their logs are unloaded; the next owner
recovers them).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from starquake.broker.errors import ServiceNotReadyError
from starquake.broker.topic_placement import TopicPlacement
from starquake.broker.transactions.errors import CoordinatorNotFoundError
from starquake.cluster.bundles import BundleRef, NamespaceBundles
from starquake.common.topic_name import TopicName

__all__ = ["ASSIGN_TOPIC", "ClusterCoordinators"]

log = logging.getLogger(__name__)

ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"


class ClusterCoordinators:
    """Loads and stops this broker's coordinators as their assign partitions come and go."""

    def __init__(
        self,
        placement: TopicPlacement,
        count: int,
        load: Callable[[int], Awaitable[None]],
        stop: Callable[[int], None],
        loaded: Callable[[int], bool],
    ) -> None:
        """``count`` partitions of the assign topic; ``load`` recovers coordinator ``N``
        here, ``stop`` stops it, ``loaded`` tells whether it runs here."""
        self._placement = placement
        self._count = count
        self._load = load
        self._stop = stop
        self._loaded = loaded
        self._assign = TopicName.parse(ASSIGN_TOPIC)
        self._loading: dict[int, asyncio.Task[None]] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._adopter: asyncio.Task[None] | None = None
        self._elsewhere: set[int] = set()
        """Partitions whose last lookup here, not authoritative, named another broker."""

    def start(self, period: float) -> None:
        """Follow the bundles acquired and closed here; adopt every ``period`` seconds."""
        self._placement.on_bundle_acquired.append(self.bundle_acquired)
        self._placement.on_bundle_closed.append(self.bundle_closed)
        loop = asyncio.get_running_loop()
        self._adopter = loop.create_task(self._adopt_every(period))

    async def stop(self) -> None:
        """Stop adopting and every load under way."""
        tasks = [*self._background, *self._loading.values()]
        if self._adopter is not None:
            tasks.append(self._adopter)
            self._adopter = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def partition(self, tc_id: int) -> TopicName:
        """Partition ``tc_id`` of the assign topic."""
        return self._assign.partition(tc_id)

    async def ensure(self, tc_id: int) -> None:
        """Recover coordinator ``tc_id`` here unless it runs already (one load at a time);
        stopped again if its bundle was closed here meanwhile."""
        if self._loaded(tc_id):
            return
        loading = self._loading.get(tc_id)
        if loading is None:
            loading = asyncio.get_running_loop().create_task(self._load_owned(tc_id))
            self._loading[tc_id] = loading
            loading.add_done_callback(lambda _: self._loading.pop(tc_id, None))
        await asyncio.shield(loading)

    async def _load_owned(self, tc_id: int) -> None:
        await self._load(tc_id)
        if not self._placement.serves(self.partition(tc_id)):
            self._stop(tc_id)  # its bundle closed while it was recovering
            raise ServiceNotReadyError(f"Transaction coordinator {tc_id} moved away")

    def check_id(self, tc_id: int) -> None:
        """TransactionCoordinatorNotFound unless the cluster has coordinator ``tc_id``."""
        if not 0 <= tc_id < self._count:
            raise CoordinatorNotFoundError(f"Transaction coordinator {tc_id} not found")

    def bundle_acquired(self, ref: BundleRef, bundles: NamespaceBundles) -> None:
        """A bundle now owned here: recover the coordinators of its assign partitions."""
        for tc_id in range(self._count):
            if self._placement.in_bundle(self.partition(tc_id), ref, bundles):
                self._in_background(tc_id)

    def bundle_closed(self, ref: BundleRef, bundles: NamespaceBundles) -> None:
        """A bundle no longer served here: stop the coordinators of its assign partitions."""
        for tc_id in range(self._count):
            if self._loaded(tc_id) and self._placement.in_bundle(
                self.partition(tc_id), ref, bundles
            ):
                self._stop(tc_id)

    def _in_background(self, tc_id: int) -> None:
        if self._loaded(tc_id) or tc_id in self._loading:
            return
        task = asyncio.get_running_loop().create_task(self._load_quietly(tc_id))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _load_quietly(self, tc_id: int) -> None:
        try:
            await self.ensure(tc_id)
        except ServiceNotReadyError:
            pass  # moved away meanwhile: its new owner loads it
        except Exception as exc:  # the adoption round tries again
            log.warning("transaction coordinator %d could not be recovered: %s", tc_id, exc)

    async def _adopt_every(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            for tc_id in range(self._count):
                try:
                    await self._adopt(tc_id)
                except ServiceNotReadyError:
                    pass  # no owner can be chosen now (the store does not answer): next round
                except Exception as exc:  # the next round tries again
                    log.warning("adopting transaction coordinator %d failed: %s", tc_id, exc)

    async def _adopt(self, tc_id: int) -> None:
        """Take partition ``tc_id``'s bundle if no live broker owns it; recover its
        coordinator if it is owned here and not running. The lookup is first the usual one
        (an unowned bundle goes to the broker the leader chooses, which takes it at its own
        round); a round after an answer naming another broker it is authoritative (an
        unowned bundle is taken here), so that adoption takes at most two rounds."""
        if self._loaded(tc_id) or tc_id in self._loading:
            return
        partition = self.partition(tc_id)
        if not self._placement.serves(partition):
            authoritative = tc_id in self._elsewhere
            if await self._placement.owner(partition, authoritative) is not None:
                if authoritative:
                    self._elsewhere.discard(tc_id)  # a live broker owns it
                else:
                    self._elsewhere.add(tc_id)  # owned there, or the leader chose it
                return
            self._elsewhere.discard(tc_id)
            log.info(
                "transaction coordinator %d had no live broker: its partition is taken here",
                tc_id,
            )
        self._in_background(tc_id)
