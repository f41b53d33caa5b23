"""The transaction coordinators of this broker and the topics' transaction buffers.

Started with the broker when ``transactionCoordinatorEnabled`` is on. As Pulsar's standalone
does, the start creates tenant ``pulsar``, namespace ``pulsar/system`` and the partitioned topic
``persistent://pulsar/system/transaction_coordinator_assign`` with one partition; coordinator
``N`` serves the transactions whose most significant bits are ``N`` and is found by a LOOKUP of
partition ``N``. Each coordinator's log is the managed ledger of
``persistent://pulsar/system/__transaction_log_<N>``, replayed before the broker takes clients.

Every persistent topic gets a transaction buffer when it loads (from its snapshot and
entries): its dispatch holds back what open and aborted transactions hide.

Standalone, ending a transaction on its partitions is an in-process call to the topic. In
cluster mode (``metadataStoreUrl``) the system namespace and assign topic are created once in
the shared metadata (one partition, as standalone); coordinator ``N`` runs on the broker that
owns the bundle of partition ``N`` of the assign topic (:mod:`.cluster_coordinators`: it is
recovered when that broker takes the bundle, or adopts it from a dead owner, or at a client's
TC_CLIENT_CONNECT, and stopped when the bundle closes here). A coordinator's log and a
pending-ack log are not placed by their own bundles: they go with their coordinator and
their subscription's topic. Ends go to each topic's owner (:mod:`.remote_end`); a topic
trusts the transaction id of a coordinator that is not on its broker, as Pulsar's topics do.
Buffer snapshots are in the metadata store then.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from typing import Protocol

from starquake.broker.broker_client import broker_client_config
from starquake.broker.config import BrokerConfig
from starquake.broker.errors import NotAllowedError, TopicNotFoundError
from starquake.broker.ledger_storage import LedgerStorage
from starquake.broker.resources import ConflictError, PulsarResources
from starquake.broker.security.authorization import AuthorizationService
from starquake.broker.subscription import Subscription
from starquake.broker.system_topics import is_system_topic
from starquake.broker.topic import PersistentTopic
from starquake.broker.topic_api import TopicApi
from starquake.broker.topic_placement import TopicPlacement
from starquake.broker.transactions.access import TxnAccess
from starquake.broker.transactions.buffer import TopicTransactionBuffer
from starquake.broker.transactions.cluster_coordinators import ASSIGN_TOPIC, ClusterCoordinators
from starquake.broker.transactions.coordinator import TransactionCoordinator
from starquake.broker.transactions.durable import Kicker
from starquake.broker.transactions.errors import (
    CoordinatorNotFoundError,
    EndRefusedError,
    TxnId,
    txn_text,
)
from starquake.broker.transactions.log_topics import (
    LOG_CURSOR,
    PENDING_ACK_CURSOR,
    hold_log,
    subscriptions_of_logs,
)
from starquake.broker.transactions.pending_ack import (
    PendingAckHandle,
    pending_ack_topic,
)
from starquake.broker.transactions.remote_end import RemoteEnds
from starquake.common.topic_name import TopicName

log = logging.getLogger(__name__)

SYSTEM_TENANT = "pulsar"
SYSTEM_NAMESPACE = "pulsar/system"
LOG_TOPIC_PREFIX = "persistent://pulsar/system/__transaction_log_"
STANDALONE_COORDINATORS = 1
"""Partitions of the assign topic Pulsar's standalone creates."""


class TransactionsContext(Protocol):
    """What the transactions use of the broker."""

    @property
    def config(self) -> BrokerConfig:
        """The broker's configuration."""

    @property
    def resources(self) -> PulsarResources:
        """The stored tenants, namespaces and partitioned topics."""

    @property
    def authorization(self) -> AuthorizationService:
        """Who is a super user."""

    @property
    def placement(self) -> TopicPlacement:
        """Which broker serves a topic."""

    @property
    def storage(self) -> LedgerStorage:
        """Where the managed ledgers live."""

    @property
    def committer(self) -> Kicker:
        """The group commit."""

    async def get_topic(
        self, topic: TopicName, *, create: bool = True, explicit: bool = False
    ) -> TopicApi:
        """The loaded topic, loading or (if allowed) creating it."""

    async def persist_cursors(self) -> None:
        """Store every durable cursor change made so far."""

    def loaded_topic(self, topic: TopicName) -> TopicApi | None:
        """The topic if it is loaded."""

    def unload_topic(self, topic: PersistentTopic) -> None:
        """Close a loaded topic and its ledger and forget it."""


class TransactionService:
    """The coordinators and buffers (see the module docstring)."""

    def __init__(self, context: TransactionsContext, enabled: bool) -> None:
        self._context = context
        self.enabled = enabled
        """``transactionCoordinatorEnabled``: off, nothing here runs."""
        config = context.config
        checks_on = bool(config.authenticationEnabled and config.authorizationEnabled)
        self.access = TxnAccess(checks_on, context.authorization.is_super_user)
        """Who may act on a transaction."""
        self.coordinators: dict[int, TransactionCoordinator] = {}
        self._buffers: dict[str, TopicTransactionBuffer] = {}
        self._pending_acks: dict[tuple[str, str], PendingAckHandle] = {}
        self._opening: dict[tuple[str, str], asyncio.Task[PendingAckHandle]] = {}
        self._cluster = False
        """Cluster mode: coordinators follow their partitions, ends go to the owners."""
        self._remote: RemoteEnds | None = None
        self._placed: ClusterCoordinators | None = None
        self._coordinator_count = 0  # partitions of the assign topic, read at the start
        self._closing: set[asyncio.Task[None]] = set()

    async def start(self, cluster: str) -> None:
        """Create the system namespace and assign topic when missing, then (standalone)
        recover every coordinator from its log. In cluster mode a coordinator starts on the
        broker that owns its partition of the assign topic (see :mod:`.cluster_coordinators`)."""
        if not self.enabled:
            return
        self._cluster = bool(self._context.config.metadata_store_servers)
        count = await asyncio.to_thread(self._ensure_metadata, cluster)
        self._coordinator_count = count
        if self._cluster:
            self._remote = RemoteEnds(self._owner_url, broker_client_config(self._context.config))
            self._placed = ClusterCoordinators(
                self._context.placement,
                count,
                self._load_coordinator,
                self._stop_coordinator,
                self.coordinators.__contains__,
            )
            self._placed.start(self._context.config.starquakeOwnershipLeaseSeconds)
            log.info("transactions on: %d coordinators placed with their partitions", count)
            return
        for tc_id in range(count):
            await self._load_coordinator(tc_id)

    async def connect_coordinator(self, tc_id: int) -> None:
        """TC_CLIENT_CONNECT: make coordinator ``tc_id`` ready here. In cluster mode it runs
        on the owner of partition ``tc_id`` of the assign topic (ServiceNotReady elsewhere,
        so that the client looks it up again); it is recovered from its log on first use,
        which fences a previous owner's log."""
        if tc_id in self.coordinators:
            return
        placed = self._placed
        if placed is None:
            self.coordinator(tc_id)
            return
        placed.check_id(tc_id)
        self._context.placement.check_served(placed.partition(tc_id))
        await placed.ensure(tc_id)

    async def ready_coordinator(self, tc_id: int) -> TransactionCoordinator:
        """Coordinator ``tc_id``, recovered here first in cluster mode when this broker owns
        its partition (a request may come before TC_CLIENT_CONNECT on a connection that
        connected to it before it moved away and back)."""
        await self.connect_coordinator(tc_id)
        return self.coordinator(tc_id)

    async def _load_coordinator(self, tc_id: int) -> None:
        name = f"{LOG_TOPIC_PREFIX}{tc_id}"
        await self._context.storage.open_ledger(name)  # stored: loads as an existing topic
        topic = await self._persistent_topic(name, create=True)
        assert topic.txn is not None
        cursor = hold_log(topic, LOG_CURSOR)
        coordinator = TransactionCoordinator(
            tc_id,
            topic.ledger,
            topic.txn.appends,
            self._end_on_partitions,
            cursor,
            self._context.persist_cursors,
        )
        replayed = await coordinator.recover()
        self.coordinators[tc_id] = coordinator
        log.info(
            "transaction coordinator %d ready (%d log records replayed, %d open)",
            tc_id,
            replayed,
            len(coordinator.state.txns),
        )

    def _stop_coordinator(self, tc_id: int) -> None:
        coordinator = self.coordinators.pop(tc_id, None)
        if coordinator is None:
            return
        task = asyncio.get_running_loop().create_task(coordinator.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        loaded = self._context.loaded_topic(TopicName.parse(f"{LOG_TOPIC_PREFIX}{tc_id}"))
        if isinstance(loaded, PersistentTopic):
            self._context.unload_topic(loaded)
        log.info("transaction coordinator %d stopped here: its bundle or its log was closed", tc_id)

    def topic_unloaded(self, topic: PersistentTopic) -> None:
        """``topic`` was unloaded: its pending-ack logs go with it (in a cluster another
        broker may open them next; a reload here opens them again); a coordinator's log
        unloaded stops the coordinator (its next TC_CLIENT_CONNECT recovers it)."""
        if not self._cluster:
            return
        name = topic.full_name
        if name.startswith(LOG_TOPIC_PREFIX):  # e.g. its namespace unloaded
            if name[len(LOG_TOPIC_PREFIX) :].isdigit():
                self._stop_coordinator(int(name[len(LOG_TOPIC_PREFIX) :]))
            return
        if is_system_topic(topic.name):
            return
        for key in [k for k in self._pending_acks if k[0] == topic.full_name]:
            self._pending_acks.pop(key, None)
            name = pending_ack_topic(*key)
            self._buffers.pop(name, None)
            loaded = self._context.loaded_topic(TopicName.parse(name))
            if isinstance(loaded, PersistentTopic):
                self._context.unload_topic(loaded)
        self._buffers.pop(topic.full_name, None)

    async def _owner_url(self, topic: TopicName) -> str | None:
        owner = await self._context.placement.owner(topic, True)
        if owner is None:
            return None
        if not self._context.config.brokerClientTlsEnabled:
            return owner.broker_url
        if not owner.broker_url_tls:  # never a plaintext connection instead
            raise EndRefusedError(f"The broker serving {topic} has no TLS URL")
        return owner.broker_url_tls

    def _ensure_metadata(self, cluster: str) -> int:
        """Blocking: tenant, namespace and assign topic; returns the coordinator count."""
        resources = self._context.resources
        with contextlib.suppress(ConflictError):
            if not resources.tenant_exists(SYSTEM_TENANT):
                resources.create_tenant(
                    SYSTEM_TENANT, {"adminRoles": [], "allowedClusters": [cluster]}
                )
        with contextlib.suppress(ConflictError):
            if not resources.namespace_exists(SYSTEM_NAMESPACE):
                resources.create_namespace(SYSTEM_NAMESPACE)
        assign = TopicName.parse(ASSIGN_TOPIC)
        if resources.partitions(assign) == 0:
            with contextlib.suppress(ConflictError):
                resources.create_partitioned_topic(assign, STANDALONE_COORDINATORS)
        return resources.partitions(assign)

    async def stop(self) -> None:
        """Stop the coordinators' timers and recovery work."""
        if self._placed is not None:
            await self._placed.stop()
        for coordinator in self.coordinators.values():
            await coordinator.close()
        await asyncio.gather(*self._closing, return_exceptions=True)
        if self._remote is not None:
            await self._remote.close()

    @property
    def buffers(self) -> dict[str, TopicTransactionBuffer]:
        """The transaction buffers of the loaded topics, by topic name (read only)."""
        return self._buffers

    @property
    def pending_acks(self) -> dict[tuple[str, str], PendingAckHandle]:
        """The opened pending-ack stores, by (topic, subscription) (read only)."""
        return self._pending_acks

    def coordinator(self, tc_id: int) -> TransactionCoordinator:
        """Coordinator ``tc_id``, or TransactionCoordinatorNotFound."""
        coordinator = self.coordinators.get(tc_id)
        if coordinator is None:
            raise CoordinatorNotFoundError(f"Transaction coordinator {tc_id} not found")
        return coordinator

    # --- topics -------------------------------------------------------------------------------

    async def _persistent_topic(self, name: str, *, create: bool) -> PersistentTopic:
        topic = await self._context.get_topic(TopicName.parse(name), create=create, explicit=True)
        if not isinstance(topic, PersistentTopic):
            raise NotAllowedError(f"{name} is not a persistent topic: no transactions there")
        return topic

    async def topic_loaded(self, topic: PersistentTopic) -> None:
        """Give a topic that is loading its transaction buffer, rebuilt from its entries."""
        if not self.enabled:
            return
        config = self._context.config
        every = (
            config.transactionBufferSnapshotMaxTransactionCount,
            config.transactionBufferSnapshotMinTimeInMillis / 1000,
        )
        buffer = TopicTransactionBuffer(topic, self._context.committer, self._check_open, every)
        read = await buffer.recover()
        topic.txn = buffer
        self._buffers[topic.full_name] = buffer
        if buffer.open or buffer.ended:
            log.info(
                "transaction buffer of %s recovered (%d entries read, %d transactions open, "
                "from the snapshot at %s)",
                topic.full_name,
                read,
                len(buffer.open),
                buffer.snapshot_position,
            )
        if is_system_topic(topic.name):
            return
        storage = self._context.storage
        for subscription in list(topic.subscriptions.values()):
            if storage.exists(pending_ack_topic(topic.full_name, subscription.name)):
                await self.pending_ack_of(subscription)

    def _known(self, txn: TxnId) -> bool:
        """Whether ``txn``'s coordinator still knows it (True when it is not this broker's)."""
        coordinator = self.coordinators.get(txn[0])
        return coordinator is None or txn[1] in coordinator.state.txns

    def _check_open(self, txn: TxnId) -> None:
        """Raise unless ``txn`` is open on its coordinator, when that is one of this broker's
        (a coordinator of another broker of the cluster is trusted); TransactionCoordinatorNotFound
        for a coordinator the cluster does not have (in standalone: this broker does not
        have): a message or ack of a transaction none has could never end and would hold its
        topic or subscription back for ever."""
        coordinator = self.coordinators.get(txn[0])
        if coordinator is not None:
            coordinator.state.check_open(txn)
        elif not (self._cluster and 0 <= txn[0] < self._coordinator_count):
            raise CoordinatorNotFoundError(f"Transaction coordinator {txn[0]} not found")

    async def _end_on_partitions(
        self, txn: TxnId, partitions: list[str], subscriptions: list[tuple[str, str]], commit: bool
    ) -> None:
        """End ``txn`` on its partitions and subscriptions, and on any topic or subscription
        here that holds messages or acks of it without having been added to it."""
        names = dict.fromkeys(partitions)
        for name, buffer in list(self._buffers.items()):
            if txn in buffer.open:
                names[name] = None
        subs = dict.fromkeys(subscriptions)
        for key, handle in list(self._pending_acks.items()):
            if txn in handle.state.transactions():
                subs[key] = None
        remote = self._remote
        if remote is None:
            await asyncio.gather(
                *(self.end_on_partition(name, txn, commit) for name in names),
                *(self.end_on_subscription(topic, sub, txn, commit) for topic, sub in subs),
            )
            return
        await asyncio.gather(
            *(
                remote.end_on_partition(
                    name, txn, commit, functools.partial(self.end_on_partition, name, txn, commit)
                )
                for name in names
            ),
            *(
                remote.end_on_subscription(
                    topic,
                    sub,
                    txn,
                    commit,
                    functools.partial(self.end_on_subscription, topic, sub, txn, commit),
                )
                for topic, sub in subs
            ),
        )

    async def end_on_partition(self, name: str, txn: TxnId, commit: bool) -> None:
        """End ``txn`` on the topic ``name`` (a topic never produced to has nothing to end)."""
        try:
            topic = await self._persistent_topic(name, create=False)
        except TopicNotFoundError:
            return  # never produced to: nothing to end
        if topic.txn is None:
            raise CoordinatorNotFoundError(f"{name} has no transaction buffer")
        await topic.txn.end(txn, commit)
        log.debug("transaction %s ended on %s", txn_text(txn), name)

    # --- pending acks -------------------------------------------------------------------------

    async def end_on_subscription(self, topic: str, name: str, txn: TxnId, commit: bool) -> None:
        """End ``txn`` on the subscription ``name`` of ``topic`` (END_TXN_ON_SUBSCRIPTION):
        its pending acks there are applied (commit) or released (abort)."""
        try:
            loaded = await self._persistent_topic(topic, create=False)
        except TopicNotFoundError:
            return  # never there: nothing acknowledged
        subscription = loaded.subscriptions.get(name)
        if subscription is None:
            return  # deleted since: its acks went with it
        if subscription.pending_ack is None and not self._context.storage.exists(
            pending_ack_topic(loaded.full_name, name)  # the client may have named it short
        ):
            return  # no ack in a transaction ever reached it
        handle = await self.pending_ack_of(subscription)
        await handle.end(txn, commit)
        log.debug("transaction %s ended on %s/%s", txn_text(txn), topic, name)

    async def subscription_deleted(self, topic: str, name: str) -> None:
        """The subscription ``name`` of ``topic`` was deleted (unsubscribed, or with its
        topic): its pending-ack log goes too (with transactions on; off, none is made)."""
        self._pending_acks.pop((topic, name), None)
        if not self.enabled:
            return
        log_name = pending_ack_topic(topic, name)
        storage = self._context.storage
        if not storage.exists(log_name):
            return
        loaded = self._context.loaded_topic(TopicName.parse(log_name))
        if isinstance(loaded, PersistentTopic):
            self._context.unload_topic(loaded)
        self._buffers.pop(log_name, None)
        await storage.delete(log_name)
        log.info("pending-ack log of %s/%s deleted", topic, name)

    async def topic_deleted(self, topic: str, subscriptions: list[str] | None) -> None:
        """Delete the pending-ack logs of the deleted ``topic``'s ``subscriptions``; None (the
        topic was not loaded): every stored log named ``<topic>-<sub>__transaction_pending_ack``
        that is not that of a longer topic name still stored (``<topic>-<x>``)."""
        if not self.enabled:
            return
        if subscriptions is None:
            names = await asyncio.to_thread(self._context.storage.list_names)
            subscriptions = subscriptions_of_logs(topic, names)
        for name in subscriptions:
            await self.subscription_deleted(topic, name)

    async def pending_ack_of(self, subscription: Subscription) -> PendingAckHandle:
        """The subscription's pending-ack handle, its log opened and replayed on first use."""
        if not self.enabled:
            raise NotAllowedError("Server don't support transaction ack!")
        if isinstance(subscription.pending_ack, PendingAckHandle):
            return subscription.pending_ack
        key = (subscription.topic.full_name, subscription.name)
        opening = self._opening.get(key)
        if opening is None:
            opening = asyncio.get_running_loop().create_task(self._open_pending_ack(subscription))
            self._opening[key] = opening
            opening.add_done_callback(lambda _: self._opening.pop(key, None))
        return await asyncio.shield(opening)

    async def _open_pending_ack(self, subscription: Subscription) -> PendingAckHandle:
        topic_name = subscription.topic.full_name
        name = pending_ack_topic(topic_name, subscription.name)
        await self._context.storage.open_ledger(name)  # stored: loads as an existing topic
        store = await self._persistent_topic(name, create=True)
        assert store.txn is not None
        handle = PendingAckHandle(
            subscription,
            store.ledger,
            store.txn.appends,
            self._check_open,
            self._context.persist_cursors,
            hold_log(store, PENDING_ACK_CURSOR),
        )
        read = await handle.recover()
        released = handle.release_forgotten(self._known)
        subscription.pending_ack = handle
        self._pending_acks[(topic_name, subscription.name)] = handle
        if read:
            log.info(
                "pending acks of %s/%s recovered (%d records read, %d transactions open, "
                "%d forgotten by their coordinator released)",
                topic_name,
                subscription.name,
                read,
                len(handle.state.transactions()),
                released,
            )
        return handle
