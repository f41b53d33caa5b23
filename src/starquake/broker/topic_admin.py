"""Administrative operations on topics and subscriptions, in plain Python over the service.

The admin API's HTTP endpoints call these. Every operation that moves a durable cursor stores
the new cursor state before it returns, so an answered request survives a crash; topic
termination is stored the same way.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Protocol

from starquake.broker import policy_events
from starquake.broker.contexts import StorageContext, UnloadableTopic
from starquake.broker.errors import (
    BrokerServiceError,
    NotAllowedError,
    SubscriptionNotFoundError,
    TopicNotFoundError,
    TopicNotServedError,
)
from starquake.broker.message_expiry import cursor_moved, expire_older_than
from starquake.broker.resource_keys import TERMINATED
from starquake.broker.resources import ConflictError
from starquake.broker.schemas.registry import SchemaRegistry, schema_id
from starquake.broker.subscription import Subscription
from starquake.broker.topic import PersistentTopic
from starquake.common.topic_name import TopicDomain, TopicName
from starquake.protocol.framing import entry_metadata
from starquake.storage import Entry, Position

if TYPE_CHECKING:
    from starquake.broker.compaction.service import CompactionService
    from starquake.broker.nonpersistent import NonPersistentTopic
    from starquake.broker.topic_api import TopicApi

log = logging.getLogger(__name__)

TERMINATED_PREFIX = TERMINATED + "/"


class PreconditionFailed(BrokerServiceError):
    """The operation cannot be done in the topic's present state (HTTP 412)."""


def terminated_key(name: str) -> str:
    """The metadata key that marks a topic terminated."""
    return TERMINATED_PREFIX + name


class PendingAckLogs(Protocol):
    """The transactions' pending-ack logs, deleted with their subscription."""

    async def subscription_deleted(self, topic: str, name: str) -> None:
        """Delete the pending-ack log of the deleted subscription ``name`` of ``topic``."""

    async def topic_deleted(self, topic: str, subscriptions: list[str] | None) -> None:
        """Delete the pending-ack logs of a deleted topic's ``subscriptions`` (None: not
        known, the topic was not loaded: found by their names)."""


class TopicAdminContext(StorageContext, Protocol):
    """What the administrative operations read and change of the broker: its topic registry,
    storage, compactions and schemas."""

    @property
    def topics(self) -> Mapping[str, PersistentTopic]:
        """The loaded persistent topics by full name."""

    @property
    def nonpersistent_topics(self) -> MutableMapping[str, NonPersistentTopic]:
        """The known non-persistent topics by full name."""

    @property
    def compaction(self) -> CompactionService:
        """The broker's compactions."""

    @property
    def schemas(self) -> SchemaRegistry:
        """The schema registry."""

    @property
    def transactions(self) -> PendingAckLogs:
        """The transactions (their pending-ack logs)."""

    def check_namespace(self, topic: TopicName) -> None:
        """Raise unless the namespace of ``topic`` exists."""

    def topic_exists(self, topic: TopicName) -> bool:
        """Whether ``topic`` is loaded, stored, or a (partition of a) partitioned topic."""

    def loaded_topic(self, topic: TopicName) -> TopicApi | None:
        """The topic if it is loaded (or non-persistent and known); None otherwise."""

    async def get_topic(
        self, topic: TopicName, *, create: bool = True, explicit: bool = False
    ) -> TopicApi:
        """The loaded topic, loading or (if allowed) creating it."""

    def unload_topic(self, topic: UnloadableTopic) -> None:
        """Close a loaded topic and its ledger and forget it."""

    async def check_serving(self, topic: TopicName) -> None:
        """Raise TopicNotServedError when another broker of the cluster serves ``topic`` (a
        bundle nobody serves is taken by this broker)."""


# --- topics ---------------------------------------------------------------------------------


async def existing_topic(
    service: TopicAdminContext, topic: TopicName, *, create: bool = False
) -> TopicApi:
    """The topic, loaded if it is stored; TopicNotFoundError if it does not exist (unless
    ``create`` and automatic topic creation allow creating it) or is the base name of a
    partitioned topic (which names no topic of its own: loading it would create one)."""
    service.check_namespace(topic)
    if service.resources.partitions(topic) > 0:
        raise TopicNotFoundError(f"{topic} is a partitioned topic: name one of its partitions")
    if topic.domain is TopicDomain.PERSISTENT:
        return await service.get_topic(topic, create=create)
    loaded = service.loaded_topic(topic)
    if loaded is None:
        raise TopicNotFoundError(f"Topic {topic} not found")
    return loaded


async def persistent_topic(
    service: TopicAdminContext, topic: TopicName, *, create: bool = False
) -> PersistentTopic:
    """The loaded persistent topic (NotAllowedError for a non-persistent one)."""
    loaded = await existing_topic(service, topic, create=create)
    if not isinstance(loaded, PersistentTopic):
        raise NotAllowedError(f"{topic} is not a persistent topic: it has no stored messages")
    return loaded


async def create_topic(service: TopicAdminContext, topic: TopicName) -> None:
    """Create a non-partitioned topic (ConflictError if it, or a partitioned one, exists)."""
    service.check_namespace(topic)
    if service.resources.partitions(topic) > 0:
        raise ConflictError(f"{topic} already exists as a partitioned topic")
    if topic.is_partition:
        count = service.resources.partitions(topic.partitioned_topic_name)
        if 0 < count <= topic.partition_index:
            raise PreconditionFailed(
                f"Can't create topic {topic}: the partitioned topic "
                f"{topic.partitioned_topic_name} has {count} partitions"
            )
    if service.topic_exists(topic) or service.loaded_topic(topic) is not None:
        raise ConflictError(f"Topic {topic} already exists")
    await service.get_topic(topic, create=True, explicit=True)
    log.info("topic %s created", topic)


def _in_use(topic: TopicApi) -> bool:
    return bool(topic.producers) or any(s.consumers for s in topic.subscriptions.values())


async def delete_topic(service: TopicAdminContext, topic: TopicName, *, force: bool) -> None:
    """Delete a non-partitioned topic and its data; with clients attached only when forced.

    The base name of a partitioned topic is refused (ConflictError) and nothing is deleted:
    that topic goes with :func:`delete_partitioned_topic`, as in Pulsar.
    """
    service.check_namespace(topic)
    name = str(topic)
    if service.resources.partitions(topic) > 0:
        raise ConflictError(
            f"{name} is a partitioned topic, instead of calling delete topic, please call "
            "delete-partitioned-topic."
        )
    if topic.domain is not TopicDomain.PERSISTENT:
        np_topic = service.nonpersistent_topics.get(name)
        if np_topic is None:
            raise TopicNotFoundError(f"Topic {name} not found")
        if _in_use(np_topic) and not force:
            raise PreconditionFailed("Topic has active producers/subscriptions")
        np_topic.close()
        service.nonpersistent_topics.pop(name, None)
        await _delete_schemas(service, topic)
        await policy_events.forget_topic(service, topic)
        log.info("topic %s deleted", name)
        return
    loaded = service.topics.get(name)
    if loaded is None and not service.topic_exists(topic):
        raise TopicNotFoundError(f"Topic {name} not found")
    if loaded is None:
        # its owner deletes it (a redirect), or a topic loaded there would go on writing
        await service.check_serving(topic)
    subscriptions: list[str] | None = None
    if loaded is not None:
        if _in_use(loaded) and not force:
            raise PreconditionFailed("Topic has active producers/subscriptions")
        subscriptions = list(loaded.subscriptions)
        service.unload_topic(loaded)
    await service.compaction.forget(name)  # its compacted ledgers go with the managed ledger
    await service.storage.delete(name)
    await service.transactions.topic_deleted(name, subscriptions)
    await asyncio.to_thread(service.metadata.put_many, [(terminated_key(name), None)])
    await _delete_schemas(service, topic)
    await policy_events.forget_topic(service, topic)
    log.info("topic %s deleted", name)


async def _delete_schemas(service: TopicAdminContext, topic: TopicName) -> None:
    """Delete a deleted topic's schemas (all versions), unless ``schemaDeletionPolicy`` keeps
    them. A partition's schemas are its partitioned topic's, deleted with that."""
    if topic.is_partition or service.config.schemaDeletionPolicy == "keep":
        return
    await asyncio.to_thread(service.schemas.delete, schema_id(topic), force=True)


async def delete_partitioned_topic(
    service: TopicAdminContext, topic: TopicName, *, force: bool
) -> None:
    """Delete a partitioned topic: every partition, then its metadata.

    In a cluster each partition is deleted by the broker serving it: this broker deletes the
    ones it serves, then (TopicNotServedError) the request goes on to the owner of one that
    is left, which does the same; the last one deletes the metadata. Partitions already
    deleted (or never stored) are passed over.
    """
    count = service.resources.partitions(topic)
    if count == 0:
        raise TopicNotFoundError(f"Partitioned topic {topic} not found")
    partitions = [topic.partition(i) for i in range(count)]
    if not force:
        for partition in partitions:
            loaded = service.loaded_topic(partition)
            if loaded is not None and _in_use(loaded):
                raise PreconditionFailed("Topic has active producers/subscriptions")
    elsewhere: TopicName | None = None
    for partition in partitions:
        loaded = service.loaded_topic(partition)
        if loaded is None and not (
            partition.is_persistent and service.storage.exists(str(partition))
        ):
            continue  # not stored: a non-persistent one only exists while a client uses it
        try:
            await delete_topic(service, partition, force=True)
        except TopicNotServedError:
            elsewhere = elsewhere or partition
    if elsewhere is not None:
        raise TopicNotServedError(elsewhere)
    await asyncio.to_thread(service.resources.delete_partitioned_topic, topic)
    await _delete_schemas(service, topic)
    await policy_events.forget_topic(service, topic)
    log.info("partitioned topic %s deleted", topic)


async def terminate(service: TopicAdminContext, topic: TopicName) -> Position:
    """Seal the topic: no more messages are accepted; consumers that have read everything are
    told they reached its end. Returns the last message's position."""
    if topic.domain is not TopicDomain.PERSISTENT:
        raise NotAllowedError("Termination of a non-persistent topic is not allowed")
    loaded = await persistent_topic(service, topic)
    if loaded.terminated is not None:
        return loaded.terminated
    loaded.terminated = Position(-1, -1)  # refuse new messages from now on
    try:
        await asyncio.wait_for(loaded.receipts_sent(), 30.0)
        last = loaded.ledger.last_confirmed
        await asyncio.to_thread(
            service.metadata.put_many,
            [(terminated_key(loaded.full_name), f"{last.ledger_id}:{last.entry_id}".encode())],
        )
    except BaseException:
        loaded.terminated = None  # the request failed: the topic takes messages again
        raise
    loaded.terminated = last
    for producer in list(loaded.producers.values()):
        producer.disconnect()
    loaded.notify_terminated()
    log.info("topic %s terminated at %s", loaded.full_name, last)
    return last


# --- subscriptions --------------------------------------------------------------------------


def subscription_of(topic: PersistentTopic, name: str) -> Subscription:
    """A topic's subscription by name (SubscriptionNotFoundError if none)."""
    subscription = topic.subscriptions.get(name)
    if subscription is None:
        raise SubscriptionNotFoundError(f"Subscription {name} not found")
    return subscription


async def create_subscription(
    service: TopicAdminContext, topic: PersistentTopic, name: str, start: Position | str
) -> None:
    """A durable subscription at ``start`` ("earliest", "latest" or a message's position)."""
    if name in topic.subscriptions:
        raise ConflictError(f"Subscription {name} already exists")
    initial = start if isinstance(start, str) else "latest"
    cursor = topic.ledger.open_cursor(name, "earliest" if initial == "earliest" else "latest")
    subscription = Subscription(topic, name, cursor, durable=True)
    topic.subscriptions[name] = subscription
    if isinstance(start, Position):
        subscription.reset_cursor(start)
    try:
        await service.persist_cursors()
    except BaseException:
        topic.forget_new_subscription(name)  # an error answer means it was not created
        raise
    log.info("subscription %s created on %s at %s", name, topic.full_name, start)


async def delete_subscription(
    service: TopicAdminContext, topic: PersistentTopic, name: str, *, force: bool
) -> None:
    """Delete a subscription; ``force`` disconnects its consumers first."""
    subscription = subscription_of(topic, name)
    if subscription.consumers:
        if not force:
            raise PreconditionFailed(f"Subscription {name} has active consumers")
        subscription.fenced = True
        for consumer in subscription.consumers:
            consumer.cnx.disconnect_consumer(consumer)
    topic.unsubscribe(name)
    await service.persist_cursors()
    await service.transactions.subscription_deleted(topic.full_name, name)
    log.info("subscription %s deleted from %s", name, topic.full_name)


async def skip(service: TopicAdminContext, subscription: Subscription, count: int) -> int:
    """Acknowledge the next ``count`` unacknowledged entries; returns how many were skipped."""
    chosen = list(itertools.islice(_unacked_positions(subscription), count))
    if chosen:
        subscription.cursor.delete(chosen)
        cursor_moved(subscription)
        await service.persist_cursors()
    return len(chosen)


async def clear_backlog(service: TopicAdminContext, subscription: Subscription) -> None:
    """Acknowledge everything the subscription has not acknowledged yet."""
    last = subscription.topic.ledger.last_confirmed
    if last > subscription.cursor.mark_delete_position:
        subscription.cursor.mark_delete(last)
        cursor_moved(subscription)
    await service.persist_cursors()


async def expire_messages(
    service: TopicAdminContext, subscription: Subscription, seconds: int
) -> None:
    """Acknowledge the messages published more than ``seconds`` ago, and store the cursor."""
    await expire_older_than(subscription, seconds)
    await service.persist_cursors()


async def reset_cursor(
    service: TopicAdminContext, subscription: Subscription, position: Position
) -> None:
    """Move the subscription to ``position`` (which becomes the next message delivered).

    As for a consumer's seek: the subscription's consumers are disconnected (they come back
    and read from the new position), and none can attach until the new state is stored.
    """
    try:
        subscription.begin_reset(position)
        await service.persist_cursors()
    finally:
        subscription.fenced = False
    log.info(
        "subscription %s of %s reset to %s",
        subscription.name,
        subscription.topic.full_name,
        position,
    )


def _unacked_positions(subscription: Subscription) -> Iterator[Position]:
    """The stored entries after the mark-delete position not acknowledged yet, in order."""
    cursor = subscription.cursor
    ledger = subscription.topic.ledger
    last = ledger.last_confirmed
    position = ledger.next_position(cursor.mark_delete_position)
    while position <= last:
        if not cursor.is_acked(position) and ledger.entry_exists(position):
            yield position
        position = ledger.next_position(position)


async def nth_unacked_entry(subscription: Subscription, n: int) -> Entry:
    """The ``n``-th (from 1) unacknowledged entry after the mark-delete position."""
    if n < 1:
        raise BrokerServiceError("the message position must be 1 or more")
    position = next(itertools.islice(_unacked_positions(subscription), n - 1, None), None)
    ledger = subscription.topic.ledger
    entry = await ledger.read_entry(position) if position is not None else None
    if entry is not None:
        return entry
    raise TopicNotFoundError(f"No message at position {n} of subscription {subscription.name}")


async def expire_all_subscriptions(
    service: TopicAdminContext, topic: PersistentTopic, seconds: int
) -> None:
    """Acknowledge, on every subscription, the messages published more than ``seconds`` ago."""
    for subscription in list(topic.subscriptions.values()):
        if isinstance(subscription, Subscription):
            await expire_older_than(subscription, seconds)
    await service.persist_cursors()


async def truncate(service: TopicAdminContext, topic: PersistentTopic) -> int:
    """Move every subscription to the end of the topic and delete the ledgers nothing reads any
    more, retention notwithstanding (as Pulsar's truncate); returns how many were deleted.

    The current ledger is sealed first so that its data can go too; what deduplication still
    needs, and messages published meanwhile, stay.
    """
    for subscription in list(topic.subscriptions.values()):
        if isinstance(subscription, Subscription) and subscription.durable:
            await clear_backlog(service, subscription)
    await asyncio.wait_for(topic.receipts_sent(), 30.0)
    if topic.ledger.roll_over():
        await service.committer.drain()  # stores the old ledger's seal
    await service.persist_cursors()  # the trim goes by the cursors as stored
    deleted = topic.ledger.trim(None, hold=topic.trim_hold())
    topic.forget_consumed_entry_infos()
    if deleted:
        service.committer.kick()  # the commit thread deletes the files
    log.info("topic %s truncated: %d ledger(s) deleted", topic.full_name, deleted)
    return deleted


async def examined_entry(topic: PersistentTopic, initial: str, n: int) -> Entry:
    """The ``n``-th (from 1) stored entry counted from the earliest, or back from the latest
    (``initial``: "earliest" or "latest")."""
    if n < 1:
        raise BrokerServiceError("messagePosition must be 1 or more")
    ledgers = [(info.ledger_id, info.entries) for info in topic.ledger.ledgers() if info.entries]
    total = sum(entries for _, entries in ledgers)
    index = n - 1 if initial == "earliest" else total - n
    if not 0 <= index < total:
        raise TopicNotFoundError(
            f"No message at position {n} from the {initial} of {topic.full_name} ({total} stored)"
        )
    for ledger_id, entries in ledgers:
        if index < entries:
            return await entry_at(topic, Position(ledger_id, index))
        index -= entries
    raise TopicNotFoundError(f"No message at position {n} of {topic.full_name}")


async def earliest_publish_time_in_backlog(subscription: Subscription) -> int:
    """The publish time (ms) of the subscription's first unacknowledged message (0: none)."""
    first = next(_unacked_positions(subscription), None)
    entry = await subscription.topic.ledger.read_entry(first) if first is not None else None
    return entry_metadata(entry.data).publish_time if entry is not None else 0


async def entry_at(topic: PersistentTopic, position: Position) -> Entry:
    """The stored entry at ``position`` (TopicNotFoundError if none)."""
    ledger = topic.ledger
    entry = await ledger.read_entry(position) if ledger.entry_exists(position) else None
    if entry is None:
        raise TopicNotFoundError(f"Message {position.ledger_id}:{position.entry_id} not found")
    return entry


__all__ = [
    "PreconditionFailed",
    "clear_backlog",
    "create_subscription",
    "create_topic",
    "delete_partitioned_topic",
    "delete_subscription",
    "delete_topic",
    "earliest_publish_time_in_backlog",
    "entry_at",
    "examined_entry",
    "existing_topic",
    "expire_all_subscriptions",
    "expire_messages",
    "nth_unacked_entry",
    "persistent_topic",
    "reset_cursor",
    "skip",
    "terminate",
    "truncate",
]
