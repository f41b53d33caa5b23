"""Topic stats and internal stats as Pulsar's admin API answers them, field by field.

``stats`` is Pulsar's TopicStats (rates, counters, publishers, subscriptions and their
consumers); ``internal_stats`` is PersistentTopicInternalStats (the managed ledger's ledgers
and cursors). Rates come from each object's :class:`~starquake.broker.rates.RateWindow`,
which :func:`tick` advances once per ``statsUpdateFrequencyInSecs``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from starquake.broker import backlog_quota
from starquake.broker.backlog_quota import QuotaTopic
from starquake.broker.contexts import PolicyContext
from starquake.broker.cursor_sizes import serialized_ranges_size
from starquake.broker.dispatch.key_shared import KeySharedDispatcher
from starquake.broker.dispatch.single_active import SingleActiveConsumerDispatcher
from starquake.storage import Position

if TYPE_CHECKING:
    from starquake.broker.compaction.state import TopicCompaction
    from starquake.broker.consumer import Consumer
    from starquake.broker.dedup import MessageDeduplication
    from starquake.broker.producer import Producer
    from starquake.broker.producer_access import ProducerRegistry
    from starquake.broker.rates import RateWindow
    from starquake.broker.subscription import Subscription
    from starquake.protocol.enums import SubType


class TickedSubscription(Protocol):
    """A subscription, persistent or not, as its rates are kept."""

    @property
    def rates(self) -> RateWindow:
        """The subscription's dispatch rates."""

    @property
    def consumers(self) -> Sequence[Consumer]:
        """The connected consumers."""

    @property
    def departed_out(self) -> tuple[int, int]:
        """Messages and bytes dispatched to consumers that have left."""

    @property
    def expiry_rates(self) -> RateWindow:
        """The rate of messages expired by the message TTL."""

    @property
    def expired_counter(self) -> int:
        """Messages expired by the message TTL."""


class TickedTopic(Protocol):
    """A topic, persistent or not, as its rates are kept."""

    @property
    def rates(self) -> RateWindow:
        """The topic's publish rates."""

    @property
    def msg_in_counter(self) -> int:
        """Messages published since the topic was loaded."""

    @property
    def bytes_in_counter(self) -> int:
        """Bytes published since the topic was loaded."""

    @property
    def producers(self) -> Mapping[int, Producer]:
        """The connected producers by producer id."""

    @property
    def subscriptions(self) -> Mapping[str, TickedSubscription]:
        """The subscriptions by name."""


class StatsContext(PolicyContext, Protocol):
    """What the stats read of the broker: the applied policies and its own address."""

    @property
    def owner_broker(self) -> str:
        """This broker as topic stats name their owner: ``host:webport``."""


class PersistentStatsTopic(QuotaTopic, TickedTopic, Protocol):
    """What the stats of a persistent topic read."""

    @property
    def service(self) -> StatsContext:
        """The broker that owns the topic."""

    @property
    def subscriptions(self) -> Mapping[str, Subscription]:
        """The subscriptions by name."""

    @property
    def producer_registry(self) -> ProducerRegistry:
        """Who may produce (the producers waiting for exclusive access)."""

    @property
    def dedup(self) -> MessageDeduplication:
        """The topic's deduplication state."""

    @property
    def compaction(self) -> TopicCompaction:
        """The compacted view and the state of the topic's compactions."""

    @property
    def msg_chunk_published(self) -> bool:
        """A chunk of a chunked message was published since the topic was loaded."""

    @property
    def entries_added(self) -> int:
        """Entries stored since the topic was loaded."""


class _NonPersistentDispatcher(Protocol):
    @property
    def sub_type(self) -> SubType:
        """The subscription type the dispatcher serves."""


class NonPersistentStatsSubscription(TickedSubscription, Protocol):
    """What the stats of a non-persistent subscription read."""

    @property
    def dispatcher(self) -> _NonPersistentDispatcher | None:
        """The subscription's dispatcher (None before any consumer)."""

    @property
    def msg_drop_counter(self) -> int:
        """Messages dropped because no consumer had room."""

    @property
    def last_consumed_flow_timestamp(self) -> int:
        """When a consumer last asked for messages (epoch milliseconds; 0: never)."""


class NonPersistentStatsTopic(TickedTopic, Protocol):
    """What the stats of a non-persistent topic read."""

    @property
    def service(self) -> StatsContext:
        """The broker that owns the topic."""

    @property
    def subscriptions(self) -> Mapping[str, NonPersistentStatsSubscription]:
        """The subscriptions by name."""


def _iso(epoch_seconds: float) -> str:
    """A time as Pulsar's stats show it (ISO 8601, UTC, milliseconds)."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_seconds))
    return f"{whole}.{int(epoch_seconds * 1000) % 1000:03d}Z"


def _position(position: Position) -> str:
    return f"{position.ledger_id}:{position.entry_id}"


def subscription_out(subscription: TickedSubscription) -> tuple[int, int]:
    """Messages and bytes a subscription has dispatched, over its past and present consumers."""
    messages, size = subscription.departed_out
    for consumer in subscription.consumers:
        messages += consumer.msg_out_counter
        size += consumer.bytes_out_counter
    return messages, size


def tick(topic: TickedTopic, now: float) -> None:
    """Advance the rate windows of ``topic`` and everything attached to it."""
    topic.rates.tick(now, topic.msg_in_counter, topic.bytes_in_counter)
    for producer in topic.producers.values():
        producer.rates.tick(now, producer.msg_in_counter, producer.bytes_in_counter)
        producer.chunk_rates.tick(now, producer.chunk_counter, 0)
    subscriptions = list(topic.subscriptions.values())
    for subscription in subscriptions:
        subscription.rates.tick(now, *subscription_out(subscription))
        subscription.expiry_rates.tick(now, subscription.expired_counter, 0)
        for consumer in subscription.consumers:
            consumer.rates.tick(now, consumer.msg_out_counter, consumer.bytes_out_counter)
            consumer.redeliver_rates.tick(now, consumer.msg_redeliver_counter, 0)
            consumer.ack_rates.tick(now, consumer.msg_ack_counter, 0)
            consumer.chunk_rates.tick(now, consumer.chunk_counter, 0)


def _publisher(producer: Producer, now: float) -> dict[str, Any]:
    rate, throughput = producer.rates.rates(now, producer.msg_in_counter, producer.bytes_in_counter)
    cnx = producer.cnx
    return {
        "accessMode": _ACCESS_MODES.get(producer.access_mode, "Shared"),
        "msgRateIn": rate,
        "msgThroughputIn": throughput,
        "averageMsgSize": throughput / rate if rate else 0.0,
        "chunkedMessageRate": producer.chunk_rates.rates(now, producer.chunk_counter, 0)[0],
        "producerId": producer.producer_id,
        "supportsPartialProducer": False,
        "producerName": producer.name,
        "address": cnx.remote_address,
        "connectedSince": _iso(producer.connected_since),
        "clientVersion": cnx.client_version,
        "metadata": {},
    }


_ACCESS_MODES = {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}


def _consumer(consumer: Consumer, now: float, ranges: list[tuple[int, int]] | None) -> Any:
    cnx = consumer.cnx
    entry: dict[str, Any] = {
        **consumer.rate_figures(now),
        "bytesOutCounter": consumer.bytes_out_counter,
        "msgOutCounter": consumer.msg_out_counter,
        "chunkedMessageRate": consumer.chunk_rates.rates(now, consumer.chunk_counter, 0)[0],
        "consumerName": consumer.name,
        "availablePermits": max(consumer.permits, 0),
        "unackedMessages": consumer.unacked,
        "avgMessagesPerEntry": round(consumer.avg_messages_per_entry),
        "blockedConsumerOnUnackedMsgs": consumer.blocked,
        "address": cnx.remote_address,
        "connectedSince": _iso(consumer.connected_since),
        "clientVersion": cnx.client_version,
        "lastAckedTimestamp": consumer.last_acked_timestamp,
        "lastConsumedTimestamp": consumer.last_consumed_timestamp,
        "lastConsumedFlowTimestamp": consumer.last_consumed_flow_timestamp,
        "metadata": dict(consumer.metadata),
    }
    if ranges is not None:
        entry["keyHashRanges"] = [f"[{start}, {end}]" for start, end in ranges]
    return entry


def _consumers(subscription: Subscription, now: float) -> list[dict[str, Any]]:
    dispatcher = subscription.dispatcher
    key_shared = isinstance(dispatcher, KeySharedDispatcher)
    ranges = dispatcher.key_hash_ranges() if isinstance(dispatcher, KeySharedDispatcher) else {}
    consumers = []
    for consumer in subscription.consumers:
        entry = _consumer(consumer, now, ranges.get(consumer, []) if key_shared else None)
        if isinstance(dispatcher, KeySharedDispatcher):
            joined = dispatcher.recently_joined.get(consumer)
            if joined is not None:
                entry["readPositionWhenJoining"] = _position(joined)
        consumers.append(entry)
    return consumers


def _subscription(subscription: Subscription, now: float, entry_size: float) -> dict[str, Any]:
    dispatcher = subscription.dispatcher
    consumers = _consumers(subscription, now)
    messages_out, bytes_out = subscription_out(subscription)
    rate, throughput = subscription.rates.rates(now, messages_out, bytes_out)
    backlog = subscription.backlog()
    tracker = subscription.delayed_tracker
    delayed = len(tracker) if tracker else 0
    cursor = subscription.cursor
    holes = cursor.individually_deleted_ranges()
    active = dispatcher.active if isinstance(dispatcher, SingleActiveConsumerDispatcher) else None
    stats: dict[str, Any] = {
        "msgRateOut": rate,
        "msgThroughputOut": throughput,
        "bytesOutCounter": bytes_out,
        "msgOutCounter": messages_out,
        "msgRateRedeliver": sum(c["msgRateRedeliver"] for c in consumers),
        "messageAckRate": sum(c["messageAckRate"] for c in consumers),
        "chunkedMessageRate": sum(c["chunkedMessageRate"] for c in consumers),
        "msgBacklog": backlog,
        "backlogSize": int(backlog * entry_size),
        "earliestMsgPublishTimeInBacklog": 0,
        "msgBacklogNoDelayed": backlog - delayed,
        "blockedSubscriptionOnUnackedMsgs": bool(dispatcher and dispatcher.subscription_blocked),
        "msgDelayed": delayed,
        "delayedMessageIndexSizeInBytes": tracker.memory_bytes() if tracker else 0,
        "unackedMessages": sum(c.unacked for c in subscription.consumers),
        "type": subscription.sub_type.name if subscription.sub_type is not None else "None",
        "msgRateExpired": subscription.expiry_rates.rates(now, subscription.expired_counter, 0)[0],
        "totalMsgExpired": subscription.expired_counter,
        "lastExpireTimestamp": subscription.last_expire_timestamp,
        # as Pulsar: the latest of the connected consumers' times
        "lastConsumedFlowTimestamp": subscription.last_consumed_flow_timestamp,
        "lastConsumedTimestamp": max((c["lastConsumedTimestamp"] for c in consumers), default=0),
        "lastAckedTimestamp": max((c["lastAckedTimestamp"] for c in consumers), default=0),
        "lastMarkDeleteAdvancedTimestamp": subscription.last_mark_delete_advanced_timestamp,
        "consumers": consumers,
        "isDurable": subscription.durable,
        "isReplicated": False,
        "allowOutOfOrderDelivery": False,  # Key_Shared: see _key_shared
        "consumersAfterMarkDeletePosition": {},
        "nonContiguousDeletedMessagesRanges": len(holes),
        "nonContiguousDeletedMessagesRangesSerializedSize": serialized_ranges_size(holes),
        "subscriptionProperties": {},
        "filterProcessedMsgCount": 0,
        "filterAcceptedMsgCount": 0,
        "filterRejectedMsgCount": 0,
        "filterRescheduledMsgCount": 0,
    }
    if active is not None:
        stats["activeConsumerName"] = active.name
    if isinstance(dispatcher, KeySharedDispatcher):
        stats.update(_key_shared(dispatcher))
    return stats


def _key_shared(dispatcher: KeySharedDispatcher) -> dict[str, Any]:
    """As Pulsar: the mode, the dispatcher's out-of-order setting (here the first consumer's),
    and the consumers that wait for the messages before their read position when they
    joined."""
    return {
        "keySharedMode": "STICKY" if dispatcher.sticky else "AUTO_SPLIT",
        "allowOutOfOrderDelivery": bool(
            dispatcher.consumers and dispatcher.consumers[0].allow_out_of_order
        ),
        "consumersAfterMarkDeletePosition": {
            c.name: _position(p) for c, p in dispatcher.recently_joined.items()
        },
    }


def _traffic(topic: TickedTopic, subscriptions: dict[str, Any], now: float) -> dict[str, Any]:
    """Rates and counters of a topic: in from its own, out summed over its subscriptions."""
    rate_in, throughput_in = topic.rates.rates(now, topic.msg_in_counter, topic.bytes_in_counter)
    subs = subscriptions.values()
    return {
        "msgRateIn": rate_in,
        "msgThroughputIn": throughput_in,
        "msgRateOut": sum(s["msgRateOut"] for s in subs),
        "msgThroughputOut": sum(s["msgThroughputOut"] for s in subs),
        "bytesInCounter": topic.bytes_in_counter,
        "msgInCounter": topic.msg_in_counter,
        "bytesOutCounter": sum(s["bytesOutCounter"] for s in subs),
        "msgOutCounter": sum(s["msgOutCounter"] for s in subs),
        "averageMsgSize": throughput_in / rate_in if rate_in else 0.0,
    }


_SUMMED = (
    "nonContiguousDeletedMessagesRanges",
    "nonContiguousDeletedMessagesRangesSerializedSize",
    "delayedMessageIndexSizeInBytes",
)
"""A topic's figures that are its subscriptions' summed."""


def persistent_stats(topic: PersistentStatsTopic, now: float | None = None) -> dict[str, Any]:
    """TopicStats of a persistent topic."""
    now = time.monotonic() if now is None else now
    ledger = topic.ledger
    entries = ledger.number_of_entries
    entry_size = ledger.total_size / entries if entries else 0.0
    subscriptions = {
        name: _subscription(sub, now, entry_size) for name, sub in topic.subscriptions.items()
    }
    return {
        **_traffic(topic, subscriptions, now),
        "msgChunkPublished": topic.msg_chunk_published,
        "storageSize": ledger.total_size,
        "backlogSize": backlog_quota.size_backlog(topic),  # what the size quota compares
        **backlog_quota.stats_fields(topic.service, topic),
        "publishRateLimitedTimes": 0,
        "earliestMsgPublishTimeInBacklogs": 0,
        "offloadedStorageSize": 0,
        "lastOffloadLedgerId": 0,
        "lastOffloadSuccessTimeStamp": 0,
        "lastOffloadFailureTimeStamp": 0,
        "waitingPublishers": len(topic.producer_registry.waiting),
        "publishers": [_publisher(p, now) for p in topic.producers.values()],
        "subscriptions": subscriptions,
        "replication": {},
        "deduplicationStatus": "Enabled" if topic.dedup.enabled else "Disabled",
        **{key: sum(s[key] for s in subscriptions.values()) for key in _SUMMED},
        "compaction": topic.compaction.stats_json(),
        "ownerBroker": topic.service.owner_broker,
    }


def nonpersistent_stats(topic: NonPersistentStatsTopic, now: float | None = None) -> dict[str, Any]:
    """NonPersistentTopicStats: no storage, with counts of the messages dropped."""
    now = time.monotonic() if now is None else now
    subscriptions: dict[str, Any] = {}
    for name, sub in topic.subscriptions.items():
        messages_out, bytes_out = subscription_out(sub)
        rate, throughput = sub.rates.rates(now, messages_out, bytes_out)
        dispatcher = sub.dispatcher
        consumers = [_consumer(c, now, None) for c in sub.consumers]
        subscriptions[name] = {
            "msgRateOut": rate,
            "msgThroughputOut": throughput,
            "bytesOutCounter": bytes_out,
            "msgOutCounter": messages_out,
            "msgBacklog": 0,
            "msgDropRate": 0.0,
            "msgDropCounter": sub.msg_drop_counter,
            "unackedMessages": 0,
            "type": dispatcher.sub_type.name if dispatcher is not None else "None",
            "isDurable": False,
            "consumers": consumers,
            "lastConsumedFlowTimestamp": sub.last_consumed_flow_timestamp,
            "lastConsumedTimestamp": max(
                (c["lastConsumedTimestamp"] for c in consumers), default=0
            ),
            "lastAckedTimestamp": max((c["lastAckedTimestamp"] for c in consumers), default=0),
        }
    return {
        **_traffic(topic, subscriptions, now),
        "storageSize": 0,
        "backlogSize": 0,
        "msgDropRate": 0.0,
        "publishers": [_publisher(p, now) for p in topic.producers.values()],
        "subscriptions": subscriptions,
        "replication": {},
        "ownerBroker": topic.service.owner_broker,
    }


def _messages_consumed(topic: PersistentStatsTopic, cursor: Any) -> int:
    """The cursor's messagesConsumedCounter as Pulsar's managed cursor keeps it: the entries
    added since the topic was loaded less those not read yet (negative while a cursor that
    was behind at load time catches up)."""
    read = cursor.read_position
    unread = topic.ledger.count_entries(
        (read.ledger_id, read.entry_id - 1), topic.ledger.last_confirmed
    )
    return int(topic.entries_added - unread)


def internal_stats(topic: PersistentStatsTopic) -> dict[str, Any]:
    """PersistentTopicInternalStats: the managed ledger's ledgers and cursors."""
    ledger = topic.ledger
    ledgers = ledger.ledgers()
    current = ledgers[-1] if ledgers else None
    cursors: dict[str, Any] = {}
    for name, sub in topic.subscriptions.items():
        cursor = sub.cursor
        holes = cursor.individually_deleted_ranges()
        cursors[name] = {
            "markDeletePosition": _position(cursor.mark_delete_position),
            "readPosition": _position(cursor.read_position),
            "waitingReadOp": False,
            "pendingReadOps": 0,
            "messagesConsumedCounter": _messages_consumed(topic, cursor),
            "cursorLedger": -1,
            "cursorLedgerLastEntry": -1,
            "individuallyDeletedMessages": "["
            + ", ".join(f"({_position(a)}..{_position(b)}]" for a, b in holes)
            + "]",
            "lastLedgerSwitchTimestamp": "",
            "state": "Open",
            "active": bool(sub.consumers),
            "numberOfEntriesSinceFirstNotAckedMessage": sub.backlog() + 1,
            "totalNonContiguousDeletedMessagesRange": len(holes),
            "subscriptionHavePendingRead": False,
            "subscriptionHavePendingReplayRead": False,
            "properties": {},
        }
    last = ledger.last_confirmed
    return {
        "entriesAddedCounter": topic.entries_added,
        "numberOfEntries": ledger.number_of_entries,
        "totalSize": ledger.total_size,
        "currentLedgerEntries": current.entries if current else 0,
        "currentLedgerSize": current.size_bytes if current else 0,
        "lastLedgerCreatedTimestamp": _iso(current.created_at) if current else "",
        "waitingCursorsCount": 0,
        "pendingAddEntriesCount": 0,
        "lastConfirmedEntry": _position(last),
        "state": "LedgerOpened",
        "ledgers": [
            {
                "ledgerId": info.ledger_id,
                "entries": info.entries,
                "size": info.size_bytes,
                "offloaded": False,
                "underReplicated": False,
            }
            for info in ledgers
        ],
        "cursors": cursors,
        "schemaLedgers": [],
        "compactedLedger": topic.compaction.compacted_ledger_json(),
    }
