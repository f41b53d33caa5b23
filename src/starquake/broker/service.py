"""BrokerService: the topic registry, lookups and the background work shared by all topics."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

from starquake.broker import (
    applied_policies,
    backlog_quota,
    config_sync,
    maintenance,
    policy_events,
    system_topics,
    topic_admin,
    topic_listing,
)
from starquake.broker.committer import GroupCommitter
from starquake.broker.compaction.service import CompactionService
from starquake.broker.config import BrokerConfig
from starquake.broker.contexts import UnloadableTopic
from starquake.broker.errors import (
    BrokerServiceError,
    InvalidTopicNameError,
    NotAllowedError,
    PersistenceError,
    ServiceNotReadyError,
    TopicNotFoundError,
    TopicNotServedError,
)
from starquake.broker.ledger_storage import LedgerStorage
from starquake.broker.log_throttle import LogThrottle
from starquake.broker.metadata_writer import MetadataWriter
from starquake.broker.nonpersistent import NonPersistentTopic
from starquake.broker.observations import ConnectionCounts, PublishLatency
from starquake.broker.schemas.registry import SchemaRegistry
from starquake.broker.security.authentication import AuthenticationService
from starquake.broker.security.authorization import AuthorizationService, default_namespace_allowed
from starquake.broker.storage_setup import open_storage
from starquake.broker.topic import PersistentTopic
from starquake.broker.topic_api import TopicApi
from starquake.broker.topic_placement import TopicPlacement
from starquake.broker.transactions.service import TransactionService
from starquake.broker.urls import BrokerUrls, LookupUrls, listener_urls
from starquake.common.topic_name import InvalidTopicNameError as BadName
from starquake.common.topic_name import TopicDomain, TopicName
from starquake.storage import (
    LedgerBusyError,
    ManagedLedger,
    MetadataStore,
    Position,
    StorageError,
    StorageFaults,
)

log = logging.getLogger(__name__)


class BrokerService:
    """Everything a connection needs to serve requests: topics, metadata, storage."""

    def __init__(
        self,
        config: BrokerConfig,
        faults: StorageFaults | None = None,
        configuration_store: MetadataStore | None = None,
        ledger_storage: LedgerStorage | None = None,
    ) -> None:
        """``faults`` injects storage faults (tests only); ``configuration_store``: the store
        of the configuration metadata shared by brokers (``configurationMetadataStoreUrl``),
        whose changes reach this broker's copies from then on (construct on the event loop);
        ``ledger_storage``: where the managed ledgers live (None: files in ``dataDir``)."""
        self.config = config
        self.instance_id = uuid.uuid4().hex[:6]
        # None when authenticationEnabled is off; reads key files (ConfigError if wrong)
        self.authentication = AuthenticationService.from_config(config)
        opened = open_storage(config, faults, configuration_store, ledger_storage)
        self.data_lock, self.metadata, self.resources, self.storage = opened
        self.authorization = AuthorizationService(config, self.resources)
        self.schemas = SchemaRegistry(self.metadata)
        if configuration_store is not None:
            config_sync.attach(self, configuration_store)
        self.compaction = CompactionService(self)
        self.committer = GroupCommitter(self.storage, self._on_committed, self._on_commit_failed)
        self.storage.listen(self._on_committed, self._on_commit_failed)
        self.topics: dict[str, PersistentTopic] = {}
        self.nonpersistent_topics: dict[str, NonPersistentTopic] = {}
        self._loading: dict[str, asyncio.Task[PersistentTopic]] = {}
        # clients retry while the store does not answer: one line per 10 s
        self._load_refusals, self._cursor_failures = LogThrottle(log), LogThrottle(log)
        self._by_ledger: dict[str, PersistentTopic] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.connections: set[Any] = set()
        self.connection_counts = ConnectionCounts()
        self.publish_latency = PublishLatency()
        self.received_at = time.monotonic()
        """When a connection last handed bytes to its handlers (the publish latency's start)."""
        self.background: set[asyncio.Task[Any]] = set()
        self.metadata_writer = MetadataWriter(self.metadata, self.background)
        self.placement = TopicPlacement(
            config.defaultNumberOfNamespaceBundles, self.resources.namespace_policies
        )
        """Which broker serves a topic (this one for every topic when standalone)."""
        self.urls = BrokerUrls()
        """Every URL of this broker ("" for a port that is off)."""
        self.service_url = ""
        """The plaintext binary URL, or the TLS one when the plaintext port is off."""
        self.web_service_url = ""
        """The plaintext web URL, or the HTTPS one when the plaintext web port is off."""
        self.transactions = TransactionService(self, config.transactionCoordinatorEnabled)

    # --- lifecycle ----------------------------------------------------------------------------

    def start_resources(self, urls: BrokerUrls) -> None:
        """Create the default cluster, tenant and namespace (blocking: run off the loop)."""
        allowed = default_namespace_allowed(self.config)
        admins = sorted(self.authorization.super_users)
        self.resources.ensure_defaults(urls, admins, default_namespace=allowed)
        if not allowed and not self.resources.namespace_exists("public/default"):
            log.warning(
                "namespace public/default not created: with authorization on, the broker's own "
                "admin client (anonymous role %r) may not create it; create it as a super user",
                self.config.anonymousUserRole,
            )

    def start(self, urls: BrokerUrls) -> None:
        """Start the background work (commits, cursors, stats, expiry, trims) for ``urls``."""
        self.urls = urls
        self.service_url = urls.any_service_url
        self.web_service_url = urls.any_web_service_url
        loop = asyncio.get_running_loop()
        self._tasks.append(loop.create_task(self._persist_cursors_loop()))
        self._tasks.append(loop.create_task(maintenance.trim_loop(self)))
        self._tasks.append(loop.create_task(maintenance.cache_eviction_loop(self)))
        self._tasks.append(loop.create_task(maintenance.stats_loop(self)))
        self._tasks.append(loop.create_task(maintenance.expiry_loop(self)))
        self._tasks.append(loop.create_task(self.compaction.monitor()))
        self._tasks.append(loop.create_task(backlog_quota.monitor(self)))
        self._tasks.append(loop.create_task(maintenance.inactive_topics_loop(self)))
        if self.authentication is not None:
            self._tasks.append(
                loop.create_task(self.authentication.refresh_loop(lambda: self.connections))
            )

    async def stop(self) -> None:
        """Stop the background work, close the topics and release the storage."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.authentication is not None:
            self.authentication.close()
        await self.compaction.stop()
        for topic in list(self.topics.values()):
            topic.close()
        for np_topic in list(self.nonpersistent_topics.values()):
            np_topic.close()
        await self.committer.drain()
        await self.persist_cursors()
        # the periodic deduplication snapshots still being written go first, so the final
        # ones below are never overwritten by older ones
        await self.metadata_writer.stop()
        snapshots = [t.dedup.take_snapshot() for t in self.topics.values() if t.dedup.enabled]
        if snapshots:
            await asyncio.to_thread(self.metadata.put_many, snapshots)
        for task in list(self.background):
            with contextlib.suppress(Exception):
                await task
        await self.storage.close()
        self.committer.close()
        await asyncio.to_thread(self.metadata.close)  # a shared store closes its connection
        self.data_lock.release()

    def abort(self) -> None:
        """Release the data directory of a service that never started."""
        if self.authentication is not None:
            self.authentication.close()
        self.committer.close()
        self.metadata.close()
        self.data_lock.release()

    # --- group commit callbacks ---------------------------------------------------------------

    def _on_committed(self, results: Sequence[tuple[ManagedLedger, Position]]) -> None:
        for ledger, last in results:
            topic = self._by_ledger.get(ledger.name)
            if topic is not None:
                topic.on_committed(last)

    def _on_commit_failed(self, ledgers: Sequence[ManagedLedger], exc: BaseException) -> None:
        for ledger in ledgers:
            topic = self._by_ledger.get(ledger.name)
            if topic is not None:
                topic.on_commit_failed(exc)

    # --- cursors and trimming -----------------------------------------------------------------

    async def persist_cursors(self) -> None:
        """Store every durable cursor change made so far; raises if the store fails (a failed
        write is retried by the next call)."""
        await self.storage.persist_cursors()

    async def _persist_cursors_loop(self) -> None:
        interval = self.config.managedLedgerCursorPositionFlushSeconds
        while True:
            await asyncio.sleep(interval)
            # storage changes cursors too (e.g. skipping a damaged entry): always look
            try:
                await self.persist_cursors()
            except StorageError as exc:  # the store is away: one line now and then
                self._cursor_failures.log(
                    logging.WARNING, "persisting cursor positions failed; retrying: %s", exc
                )
            except Exception:
                log.exception("persisting cursor positions failed; retrying")

    @property
    def owner_broker(self) -> str:
        """This broker as topic stats name their owner: ``host:webport``."""
        return urlsplit(self.web_service_url).netloc

    def all_topics(self) -> list[PersistentTopic | NonPersistentTopic]:
        """Every loaded topic, persistent and non-persistent."""
        return [*self.topics.values(), *self.nonpersistent_topics.values()]

    def roll_over_ledgers(self) -> int:
        """Apply the age rule to idle ledgers (appends apply it themselves)."""
        return maintenance.roll_over_ledgers(self)

    def trim_ledgers(self) -> int:
        """Delete the ledgers no durable subscription and no retention needs; how many."""
        return maintenance.trim_ledgers(self)

    # --- names and lookups --------------------------------------------------------------------

    def parse_topic(self, name: str) -> TopicName:
        """Parse a topic name; raises InvalidTopicNameError for one that cannot be parsed."""
        try:
            return TopicName.parse(name)
        except BadName as exc:
            raise InvalidTopicNameError(str(exc)) from None

    def check_namespace(self, topic: TopicName) -> None:
        """Raise TopicNotFoundError unless ``topic``'s namespace exists."""
        if not self.resources.namespace_exists(topic.namespace_name):
            raise TopicNotFoundError(f"Namespace {topic.namespace_name} does not exist")

    def partitioned_metadata(self, topic: TopicName) -> int:
        """Partitions of ``topic`` (0: not partitioned), creating it when auto-creation says so."""
        self.check_namespace(topic)
        if topic.is_partition:
            return 0
        partitions = self.resources.partitions(topic)
        return partitions

    def wants_auto_partitioned(self, topic: TopicName) -> bool:
        """Whether a lookup of the unknown ``topic`` should create it as a partitioned topic."""
        creation = self.auto_topic_creation(topic)
        return (
            creation.allowed
            and creation.topic_type == "partitioned"
            and not topic.is_partition
            and not system_topics.is_system_topic(topic)
            and not self.topic_exists(topic)
        )

    async def create_auto_partitioned(self, topic: TopicName) -> int:
        """Create ``topic`` as a partitioned topic (auto-creation); returns its partition count."""
        # at most the partition limit, as Pulsar clamps defaultNumPartitions to its maximum
        partitions = min(
            max(1, self.auto_topic_creation(topic).partitions), self.config.partition_limit
        )
        try:
            await asyncio.to_thread(self.resources.create_partitioned_topic, topic, partitions)
        except BrokerServiceError:
            if self.resources.partitions(topic) == 0:
                raise
        return self.resources.partitions(topic)

    def auto_topic_creation(self, topic: TopicName) -> applied_policies.AutoTopicCreation:
        """Whether and how ``topic`` is created on first use: the namespace's override, else
        the broker's settings."""
        return applied_policies.auto_topic_creation(self, topic.namespace_name)

    def auto_subscription_creation(self, namespace: str) -> bool:
        """Whether a consumer may create a subscription by subscribing (namespace override
        first, then ``allowAutoSubscriptionCreation``)."""
        override = self.resources.namespace_view(namespace).auto_subscription_creation_override
        if override is None:
            return self.config.allowAutoSubscriptionCreation
        return override.allow_auto_subscription_creation

    def policies_changed(self, scope: str | TopicName) -> None:
        """The policies of a namespace (``tenant/ns``) or of a topic changed: the loaded topics
        under it apply them now (see :mod:`starquake.broker.policy_events`)."""
        policy_events.refresh(self, scope)

    def topic_exists(self, topic: TopicName) -> bool:
        """Whether ``topic`` is loaded, stored, or a (partition of a) partitioned topic."""
        name = str(topic)
        if name in self.topics or self.storage.exists(name):
            return True
        if topic.is_partition:
            base = topic.partitioned_topic_name
            return topic.partition_index < self.resources.partitions(base)
        return self.resources.partitions(topic) > 0

    def check_lookup_urls(self, topic: TopicName, listener_name: str = "") -> LookupUrls:
        """The plaintext and TLS broker URLs that serve ``topic`` for a client of
        ``listener_name`` ("" for one not offered), or raise.

        As Pulsar does, a lookup naming a listener the broker does not advertise fails.
        """
        urls = listener_urls(self.urls, self.config.advertisedListeners, listener_name)
        self.check_namespace(topic)
        if not self.auto_topic_creation(topic).allowed and not self.topic_exists(topic):
            raise TopicNotFoundError(f"Topic {topic} does not exist")
        return urls

    def loaded_topic(self, topic: TopicName) -> TopicApi | None:
        """The topic if it is loaded (or non-persistent and known); None otherwise."""
        name = str(topic)
        return self.topics.get(name) or self.nonpersistent_topics.get(name)

    async def get_topic(
        self, topic: TopicName, *, create: bool = True, explicit: bool = False
    ) -> TopicApi:
        """The loaded topic, loading or (if allowed) creating it.

        Loading opens the topic's managed ledger (:meth:`LedgerStorage.open_ledger`, which
        never stalls the event loop); concurrent requests for the same topic share one load.
        """
        name = str(topic)
        loaded = self.topics.get(name)
        if loaded is not None:
            return loaded
        self.check_namespace(topic)
        self.placement.check_served(topic)
        if topic.domain is not TopicDomain.PERSISTENT:
            return self._get_non_persistent(topic, create, explicit)
        if not self.topic_exists(topic):
            if not create or not (explicit or self.auto_topic_creation(topic).allowed):
                raise TopicNotFoundError(f"Topic {name} does not exist")
            if self.resources.partitions(topic) > 0:
                raise NotAllowedError(f"{name} is a partitioned topic; use its partitions")
            system_topics.check_creatable(topic)
        loading = self._loading.get(name)
        if loading is None:
            loading = asyncio.get_running_loop().create_task(self._load(topic))
            self._loading[name] = loading
            loading.add_done_callback(lambda _: self._loading.pop(name, None))
        return await asyncio.shield(loading)

    async def _load(self, topic: TopicName) -> PersistentTopic:
        name = str(topic)
        try:
            ledger = await self.storage.open_ledger(name)
        except LedgerBusyError as exc:
            self._load_refusals.log(logging.WARNING, "topic %s not loaded now: %s", name, exc)
            raise ServiceNotReadyError(f"Topic {name} cannot be loaded now; retry") from None
        except StorageError as exc:
            log.error("cannot load topic %s: %s", name, exc)
            raise PersistenceError(f"Cannot load topic {name}: {exc}") from exc
        except Exception as exc:
            log.exception("loading topic %s failed", name)
            raise PersistenceError(f"Cannot load topic {name}: {exc!r}") from exc
        try:
            loaded = PersistentTopic(self, topic, ledger)
            if self.dedup_enabled_for(topic):
                dedup = loaded.dedup
                dedup.enabled = True
                replayed = await dedup.recover(self.metadata.get(dedup.metadata_key(name)), ledger)
                log.info(
                    "deduplication state of %s recovered (%d entries replayed)", name, replayed
                )
            await self.compaction.restore(loaded)
            await self.transactions.topic_loaded(loaded)
            terminated = self.metadata.get(topic_admin.terminated_key(name))
            if terminated is not None:
                ledger_id, _, entry_id = terminated.decode().partition(":")
                loaded.terminated = Position(int(ledger_id), int(entry_id))
        except StorageError as exc:
            # e.g. a damaged deduplication snapshot: never acted on, the topic stays unloaded
            log.error("cannot load topic %s: %s", name, exc)
            ledger.close()
            raise PersistenceError(f"Cannot load topic {name}: {exc}") from exc
        except Exception as exc:
            log.exception("loading topic %s failed", name)
            ledger.close()
            raise PersistenceError(f"Cannot load topic {name}: {exc!r}") from exc
        self.topics[name] = loaded
        self._by_ledger[ledger.name] = loaded
        log.info("loaded topic %s", name)
        return loaded

    def dedup_enabled_for(self, topic: TopicName) -> bool:
        """Whether message deduplication applies to ``topic`` (policies, then configuration)."""
        return applied_policies.deduplication(self, topic)

    async def deduplication_changed(self, scope: str | TopicName) -> None:
        """The deduplication policy of a namespace (``tenant/ns``) or a topic changed: switch
        it on the loaded topics under it (see :meth:`apply_deduplication`)."""
        topics = policy_events.affected_topics(self, scope)
        await asyncio.gather(*(self.apply_deduplication(topic) for topic in topics))

    async def apply_deduplication(self, topic: PersistentTopic) -> None:
        """Switch a loaded topic's deduplication on or off in place, as its policies now say.

        Producers and consumers stay connected, as in Pulsar. Switching on refuses publishes
        (retriably, as for any message whose status is unknown) until the state is ready: the
        sends still in flight are persisted, then the whole stored log is replayed. Switching
        off drops the state and its stored snapshot.
        """
        dedup = topic.dedup
        wanted = self.dedup_enabled_for(topic.name)
        if wanted == dedup.enabled:
            return
        dedup.enabled = wanted
        name = topic.full_name
        if not wanted:
            self.store_metadata_later(dedup.metadata_key(name), None)
            log.info("deduplication of %s turned off", name)
            return
        await topic.receipts_sent()
        if topic.closed or not dedup.enabled or dedup.ready:
            return  # unloaded, switched off again, or recovered by a concurrent call
        replayed = await dedup.recover(None, topic.ledger)
        log.info("deduplication of %s turned on (%d entries replayed)", name, replayed)

    def store_metadata_later(
        self, key: str, value: bytes | None, on_stored: Callable[[], None] | None = None
    ) -> None:
        """Write (None: delete) a metadata key from a worker thread (the store fsyncs), then
        call ``on_stored``; see :class:`MetadataWriter`."""
        self.metadata_writer.store_later(key, value, on_stored)

    def _get_non_persistent(
        self, topic: TopicName, create: bool, explicit: bool = False
    ) -> NonPersistentTopic:
        name = str(topic)
        existing = self.nonpersistent_topics.get(name)
        if existing is None:
            if not create or not (explicit or self.auto_topic_creation(topic).allowed):
                raise TopicNotFoundError(f"Topic {name} does not exist")
            if self.resources.partitions(topic) > 0:
                raise NotAllowedError(f"{name} is a partitioned topic; use its partitions")
            system_topics.check_creatable(topic)
            existing = NonPersistentTopic(self, topic)
            self.nonpersistent_topics[name] = existing
            log.info("created non-persistent topic %s", name)
        return existing

    async def check_serving(self, topic: TopicName) -> None:
        """Raise TopicNotServedError when another broker of the cluster serves ``topic`` (a
        bundle nobody serves is taken by this broker)."""
        if await self.placement.owner(topic, True) is not None:
            raise TopicNotServedError(topic)

    def unload_topic(self, topic: UnloadableTopic) -> None:
        """Close a loaded topic and its ledger and forget it (it loads again on next use)."""
        if self.topics.get(topic.full_name) is topic:
            del self.topics[topic.full_name]
            self._by_ledger.pop(topic.ledger.name, None)
        topic.close()
        if isinstance(topic, PersistentTopic):
            self.transactions.topic_unloaded(topic)
        try:
            topic.ledger.close()
        except Exception:
            log.exception("closing ledger of %s failed", topic.full_name)
        log.info("unloaded topic %s", topic.full_name)

    async def list_topics(self, namespace: str, persistent: bool = True) -> list[str]:
        """Topics of a namespace, with partitions listed as ``<name>-partition-<i>``.

        The names of the partitions (up to the partition limit for each partitioned topic) and
        the stored ledgers are gathered off the event loop, from a snapshot taken on it.
        """
        if not persistent:
            return topic_listing.non_persistent_topics(self.nonpersistent_topics, namespace)
        loaded = list(self.topics)
        partitioned = topic_listing.partitioned_counts(self.resources, namespace)

        def gather() -> list[str]:
            stored = itertools.chain(loaded, self.storage.list_names())
            return topic_listing.persistent_topics(stored, partitioned, namespace)

        return await asyncio.to_thread(gather)


__all__ = ["BrokerService", "BrokerServiceError"]
