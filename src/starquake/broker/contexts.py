"""The narrow views of the broker that topics, subscriptions, dispatchers and policies receive.

:class:`~starquake.broker.service.BrokerService` satisfies every protocol here and hands itself
over; each part names only the view it reads. So nothing below the service imports
``service.py``, and a change to, say, how a topic writes its metadata touches the view and the
service, not every module that happens to hold the service.

The views that name a topic or subscription class live next to their user instead (this leaf
module would otherwise import them): the broker as ``CompactionContext``
(``compaction/service.py``), ``BacklogContext`` (``backlog_quota.py``), ``PolicyEventsContext``
(``policy_events.py``), ``TopicAdminContext`` (``topic_admin.py``), ``InactiveTopicsContext``
(``inactive_topics.py``), ``StatsContext`` (``topic_stats.py``) and ``ConnectionsContext``
(``security/authorization.py``). Likewise a lower object sees the one that holds it through a
Protocol: a subscription its topic as ``SubscriptionTopic``, a dispatcher its subscription as
``DispatchedSubscription``, a compacted read as ``CompactedSubscription``, the limits, quotas
and stats a topic as ``LimitedTopic``, ``QuotaTopic`` and ``PersistentStatsTopic``, a consumer
its subscription as ``SubscriptionApi`` and a producer its topic as ``ProducerTopic``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from starquake.broker.committer import GroupCommitter
from starquake.broker.config import BrokerConfig
from starquake.broker.ledger_storage import LedgerStorage
from starquake.broker.observations import PublishLatency
from starquake.broker.resources import PulsarResources
from starquake.storage import ManagedLedger, MetadataStore

__all__ = ["PolicyContext", "StorageContext", "TopicContext", "UnloadableTopic"]


class PolicyContext(Protocol):
    """Where the applied policies come from: the broker's configuration (the defaults) and the
    stored namespace and topic policies (the overrides)."""

    @property
    def config(self) -> BrokerConfig:
        """The broker's configuration."""

    @property
    def resources(self) -> PulsarResources:
        """The stored tenants, namespaces, policies and partitioned topics."""


class StorageContext(PolicyContext, Protocol):
    """The storage that compactions and administrative operations read and write."""

    @property
    def metadata(self) -> MetadataStore:
        """The metadata store (cursor positions, snapshots, compaction horizons)."""

    @property
    def storage(self) -> LedgerStorage:
        """Where the managed ledgers live (opens, deletes, allocates ledger ids)."""

    @property
    def committer(self) -> GroupCommitter:
        """The group committer that makes appended entries durable."""

    async def persist_cursors(self) -> None:
        """Store every durable cursor change made so far; raises if the store fails."""


class UnloadableTopic(Protocol):
    """A loaded topic as the broker unloads it."""

    @property
    def full_name(self) -> str:
        """The topic's full name."""

    @property
    def ledger(self) -> ManagedLedger:
        """The topic's managed ledger (closed by the unload)."""

    def close(self) -> None:
        """Close the topic's producers and subscriptions."""


class TopicContext(PolicyContext, Protocol):
    """What a topic, persistent or not, asks of the broker that owns it."""

    @property
    def committer(self) -> GroupCommitter:
        """The group committer that makes appended entries durable."""

    def store_metadata_later(
        self, key: str, value: bytes | None, on_stored: Callable[[], None] | None = None
    ) -> None:
        """Write (None: delete) a metadata key off the event loop, then call ``on_stored``."""

    @property
    def instance_id(self) -> str:
        """A short id of this broker process (part of generated producer names)."""

    @property
    def publish_latency(self) -> PublishLatency:
        """The broker-wide publish latency histogram."""

    @property
    def received_at(self) -> float:
        """When a connection last handed bytes to its handlers (the publish latency's start)."""

    @property
    def owner_broker(self) -> str:
        """This broker as topic stats name their owner: ``host:webport``."""

    def auto_subscription_creation(self, namespace: str) -> bool:
        """Whether a consumer may create a subscription by subscribing."""

    def unload_topic(self, topic: UnloadableTopic) -> None:
        """Close a loaded topic and its ledger and forget it (it loads again on next use)."""
