"""A subscription: a named cursor over a topic, its consumers and its dispatcher."""

from __future__ import annotations

import logging
import time
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from starquake.broker import applied_policies
from starquake.broker.compaction.reading import CompactedReads, CompactedTopic
from starquake.broker.consumer import Consumer
from starquake.broker.delayed_delivery import InMemoryDelayedDeliveryTracker
from starquake.broker.dispatch.base import DispatchedTopic, Dispatcher
from starquake.broker.dispatch.key_shared import KeySharedDispatcher
from starquake.broker.dispatch.shared import SharedDispatcher
from starquake.broker.dispatch.single_active import SingleActiveConsumerDispatcher
from starquake.broker.errors import (
    ConsumerBusyError,
    NotAllowedError,
    ServiceNotReadyError,
)
from starquake.broker.limits import check_consumer_limit
from starquake.broker.rates import RateWindow
from starquake.broker.topic_api import TopicApi
from starquake.broker.transactions.buffer import TopicTransactionBuffer, read_unheld, read_visible
from starquake.protocol import commands
from starquake.protocol.enums import SubType
from starquake.storage import Entry, InvalidPositionError, ManagedCursor, Position

if TYPE_CHECKING:
    from starquake.broker.transactions.pending_state import HeldAcks

log = logging.getLogger(__name__)

_SIGNED = 1 << 63
_U64 = 1 << 64


def to_signed(value: int) -> int:
    """Wire ids are uint64; -1 travels as 2**64-1."""
    return value - _U64 if value >= _SIGNED else value


def _invalid_ack(positions: Sequence[Position]) -> NotAllowedError:
    shown = ", ".join(str(p) for p in positions[:5])
    more = f" and {len(positions) - 5} more" if len(positions) > 5 else ""
    return NotAllowedError(f"Cannot acknowledge {shown}{more}: no such message in the topic")


def _understands_end_of_topic(consumer: Consumer) -> bool:
    """The C++ client (and the Python client built on it, which announces itself as
    ``Pulsar-CPP-...``) has no handler for REACHED_END_OF_TOPIC: it treats the command as
    invalid and closes the connection, then reconnects. Such clients are not sent it; a
    consumer of theirs simply gets no more messages."""
    version = consumer.cnx.client_version
    return not version.startswith("Pulsar-CPP")


class SubscriptionTopic(TopicApi, DispatchedTopic, CompactedTopic, Protocol):
    """What a persistent subscription, its dispatcher and its compacted reads use of their
    topic: what connections see of any topic, plus its ledger, compacted view, activity and
    termination."""

    last_active: float
    """When the topic was last seen active (monotonic seconds)."""

    closed: bool
    """Whether the topic is closing or closed (unloaded or deleted)."""

    txn: TopicTransactionBuffer | None
    """The topic's transaction buffer (None: transactions are off)."""

    async def find_position_by_publish_time(self, timestamp_ms: int) -> Position:
        """First entry published at or after ``timestamp_ms`` (after the last one if none)."""


class Subscription:
    """A durable or non-durable subscription of a persistent topic."""

    def __init__(
        self, topic: SubscriptionTopic, name: str, cursor: ManagedCursor, *, durable: bool
    ) -> None:
        self.topic = topic
        self.name = name
        self.cursor = cursor
        self.durable = durable
        self.sub_type: SubType | None = None
        self.dispatcher: Dispatcher | None = None
        self.redelivery_counts: dict[Position, int] = {}
        self.delayed_tracker: InMemoryDelayedDeliveryTracker | None = None
        self.departed_out = (0, 0)
        """Messages and bytes dispatched to consumers that have left."""
        self.rates = RateWindow()
        self.expired_counter = 0
        self.expiry_rates = RateWindow()
        self._told_end: set[Consumer] = set()
        self.last_expire_timestamp = 0
        self.last_consumed_flow_timestamp = 0
        """When a consumer last asked for messages (epoch milliseconds; 0: never)."""
        self.last_mark_delete_advanced_timestamp = 0
        """When an acknowledgment last moved the mark-delete position (epoch ms; 0: never)."""
        self.fenced = False
        """True while a cursor reset is being stored: consumers cannot attach (they retry)."""
        self.start_position: Position | None = None
        """Where a reader asked to start (a compacted view is read from there at first)."""
        self._compacted_reads: CompactedReads | None = None
        self.pending_ack: HeldAcks | None = None
        """The acks of open transactions held here (None: none was ever made)."""

    @property
    def consumers(self) -> list[Consumer]:
        """The connected consumers, in the dispatcher's order."""
        return list(self.dispatcher.consumers) if self.dispatcher else []

    # --- consumers ----------------------------------------------------------------------------

    def add_consumer(self, consumer: Consumer) -> None:
        """Attach a consumer; the first one fixes the subscription type (and Key_Shared mode)."""
        if self.fenced:
            raise ServiceNotReadyError(f"Subscription {self.name} is being reset; retry")
        check_consumer_limit(self.topic)
        dispatcher = self.dispatcher
        sticky = consumer.key_hash_ranges is not None
        if dispatcher is not None and dispatcher.consumers:
            if consumer.sub_type != self.sub_type:
                current = self.sub_type.name if self.sub_type is not None else "?"
                raise ConsumerBusyError(
                    f"Subscription {self.name} is of type {current}; "
                    f"a {consumer.sub_type.name} consumer cannot join it"
                )
            if consumer.sub_type == SubType.Exclusive:
                raise ConsumerBusyError("Exclusive consumer is already connected")
            if isinstance(dispatcher, KeySharedDispatcher) and dispatcher.sticky != sticky:
                raise ConsumerBusyError(
                    f"Subscription {self.name} uses Key_Shared mode "
                    f"{'STICKY' if dispatcher.sticky else 'AUTO_SPLIT'}; the consumer asked for "
                    f"{'STICKY' if sticky else 'AUTO_SPLIT'}"
                )
        same_kind = (
            dispatcher is not None
            and self.sub_type == consumer.sub_type
            and (not isinstance(dispatcher, KeySharedDispatcher) or dispatcher.sticky == sticky)
        )
        if not same_kind:
            if dispatcher is not None:
                # Entries the old dispatcher still meant to redeliver lie behind the read
                # position: start again from the first unacknowledged entry.
                dispatcher.close()
                self.rewind()
            self.sub_type = consumer.sub_type
            self.dispatcher = self._new_dispatcher(consumer.sub_type, sticky)
        assert self.dispatcher is not None
        self.dispatcher.add_consumer(consumer)
        self.cursor.set_active()

    def _new_dispatcher(self, sub_type: SubType, sticky: bool) -> Dispatcher:
        service = self.topic.service
        config = service.config
        batch = config.dispatcherMaxReadBatchSize
        shared = sub_type in (SubType.Shared, SubType.Key_Shared)
        # the applied delayed-delivery policy (topic, namespace, broker); a later change is
        # applied to live dispatchers by policy_events
        delayed, tick_ms = applied_policies.delayed_delivery(service, self.topic.name)
        if shared and delayed:
            if self.delayed_tracker is None:
                self.delayed_tracker = InMemoryDelayedDeliveryTracker(
                    tick_ms, config.isDelayedDeliveryDeliverAtTimeStrict
                )
        else:
            self.delayed_tracker = None
        if sub_type == SubType.Key_Shared:
            return KeySharedDispatcher(self, batch, sticky=sticky)
        if sub_type == SubType.Shared:
            return SharedDispatcher(self, batch)
        return SingleActiveConsumerDispatcher(self, batch, failover=sub_type == SubType.Failover)

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach a consumer; its unacknowledged messages go to the others."""
        self.topic.last_active = time.monotonic()  # active until now
        if self.dispatcher is not None:
            self.dispatcher.remove_consumer(consumer)
        if not self.consumers:
            self.cursor.set_inactive()
        messages, size = self.departed_out
        self.departed_out = (messages + consumer.msg_out_counter, size + consumer.bytes_out_counter)
        self._told_end.discard(consumer)
        if not self.durable and not self.consumers and not self.fenced:
            # a reader's subscription goes with its consumer, except while a seek moves it:
            # the reader comes back to the moved cursor
            self.topic.remove_subscription(self.name)

    # --- acknowledgments ----------------------------------------------------------------------

    def acknowledge_individual(self, consumer: Consumer, positions: Sequence[Position]) -> None:
        """Acknowledge these messages one by one and move the cursor."""
        counts = self.redelivery_counts
        tracker = self.delayed_tracker
        dispatcher = self.dispatcher
        for position in positions:
            if consumer.acked(position) and dispatcher is not None:
                dispatcher.entry_done(position)
            if counts:
                counts.pop(position, None)
        if tracker is not None and len(tracker):
            tracker.remove(positions)
        before = self.cursor.mark_delete_position
        refused = self.cursor.delete(positions)
        pending = self.pending_ack
        if pending is not None and pending.state:
            for position in positions:  # as Pulsar: the ordinary ack wins over a pending one
                pending.state.clear_position(position)
        self._after_ack(consumer, before)
        if refused:
            raise _invalid_ack(refused)

    def acknowledge_batch_index(
        self, consumer: Consumer, position: Position, ack_set: Sequence[int], batch_size: int
    ) -> None:
        """Partial ack of a batch entry; ``ack_set`` bits set = still unacknowledged."""
        before = self.cursor.mark_delete_position
        try:
            done = self.cursor.ack_batch_indexes(position, ack_set, batch_size)
        except InvalidPositionError:
            raise _invalid_ack([position]) from None
        if done:
            if consumer.acked(position) and self.dispatcher is not None:
                self.dispatcher.entry_done(position)
            self.redelivery_counts.pop(position, None)
        else:
            remaining = self.cursor.get_batch_ack_set(position)
            if remaining is not None:
                left = sum(bin(word & 0xFFFFFFFFFFFFFFFF).count("1") for word in remaining)
                consumer.partially_acked(position, left)
        self._after_ack(consumer, before)

    def acknowledge_cumulative(self, consumer: Consumer, position: Position) -> None:
        """Acknowledge everything up to ``position`` (not on Shared types)."""
        if self.sub_type in (SubType.Shared, SubType.Key_Shared):
            raise NotAllowedError(
                "Cumulative acknowledgment is not allowed on Shared or Key_Shared subscriptions"
            )
        if position.entry_id < -1 or position <= self.cursor.mark_delete_position:
            return
        last = self.topic.ledger.last_confirmed
        if position > last:
            position = last
        before = self.cursor.mark_delete_position
        self.cursor.mark_delete(position)
        for pending in [p for p in consumer.pending_acks if p <= position]:
            consumer.acked(pending)
        if self.redelivery_counts:
            for counted in [p for p in self.redelivery_counts if p <= position]:
                del self.redelivery_counts[counted]
        self._after_ack(consumer, before)

    def _after_ack(self, consumer: Consumer, mark_delete_before: Position) -> None:
        moved = self.cursor.mark_delete_position != mark_delete_before
        if moved:
            self.last_mark_delete_advanced_timestamp = int(time.time() * 1000)
        dispatcher = self.dispatcher
        if dispatcher is None:
            return
        dispatcher.on_acked(consumer)
        if moved and isinstance(dispatcher, KeySharedDispatcher):
            dispatcher.on_mark_delete_moved()

    def after_txn_ack(self, mark_delete_before: Position) -> None:
        """A committed transaction's acks were applied to the cursor."""
        moved = self.cursor.mark_delete_position != mark_delete_before
        if moved:
            self.last_mark_delete_advanced_timestamp = int(time.time() * 1000)
        dispatcher = self.dispatcher
        if dispatcher is not None:
            dispatcher.acks += 1
            if moved and isinstance(dispatcher, KeySharedDispatcher):
                dispatcher.on_mark_delete_moved()
            dispatcher.schedule()

    def held_in_txn(self, position: Position) -> bool:
        """Whether an open transaction acknowledged ``position``: not dispatched meanwhile."""
        pending = self.pending_ack
        return pending is not None and pending.state.holds(position)

    def redeliver(self, consumer: Consumer, positions: list[Position] | None) -> None:
        """Send a consumer's unacknowledged messages again (all of them if None)."""
        if self.dispatcher is not None:
            self.dispatcher.redeliver(consumer, positions)

    # --- reading ------------------------------------------------------------------------------

    def read_entries(
        self, max_entries: int, *, compacted: bool = False, max_bytes: int | None = None
    ) -> Coroutine[Any, Any, list[Entry]]:
        """Up to ``max_entries`` entries to dispatch: through the topic's compacted view for a
        ``read_compacted`` consumer, from the cursor otherwise (the read itself is returned,
        to be awaited: no coroutine of its own on the hot path); see :meth:`read_live`.
        ``max_bytes`` bounds the cursor's reads (at least one entry each; the compacted
        entries themselves are not bounded)."""
        if not compacted:
            return self.read_live(max_entries, max_bytes)
        if self._compacted_reads is None:
            self._compacted_reads = CompactedReads(self, self.start_position)
        return self._compacted_reads.read(max_entries, max_bytes)

    def read_live(
        self, max_entries: int, max_bytes: int | None = None
    ) -> Coroutine[Any, Any, list[Entry]]:
        """The next entries at the cursor; with transactions on, what the topic's transaction
        buffer hides is left out, and reads stop at its max read position; messages that open
        transactions acknowledged here (pending acks) are passed over."""
        buffer = self.topic.txn
        pending = self.pending_ack
        if pending is not None and pending.state:
            return read_unheld(self.cursor, buffer, pending.state, max_entries, max_bytes)
        if buffer is not None and (buffer.open or buffer.hidden):
            return read_visible(self.cursor, buffer, max_entries, max_bytes)
        return self.cursor.read_entries(max_entries, max_bytes)

    def held(self) -> bool:
        """Whether reading waits at the max read position of the topic's transactions."""
        buffer = self.topic.txn
        if buffer is None:
            return False
        limit = buffer.max_read
        return limit is not None and self.cursor.read_position >= limit

    def read_back(self, entry: Entry) -> None:
        """``entry`` was read but not dispatched: read it again next."""
        if self._compacted_reads is not None:
            self._compacted_reads.read_back(entry)
        else:
            self.cursor.seek(entry.position)

    def rewind(self) -> None:
        """Read again from the first unacknowledged entry (compacted view included)."""
        self.cursor.rewind()
        if self._compacted_reads is not None:
            self._compacted_reads.restart()

    # --- cursor moves -------------------------------------------------------------------------

    def begin_reset(self, position: Position) -> None:
        """Move the subscription to ``position`` as Pulsar does for a seek or an admin reset:
        fence it and disconnect its consumers (they re-subscribe, and are told to retry until
        the caller has stored the new position and cleared ``fenced``), then move the cursor."""
        self.fenced = True
        for consumer in self.consumers:
            consumer.cnx.disconnect_consumer(consumer)
        self.reset_cursor(position)

    def reset_cursor(self, position: Position) -> None:
        """Move the subscription to ``position``: it and everything after it become unacked."""
        self.cursor.reset(position)
        self.start_position = None
        if self._compacted_reads is not None:
            self._compacted_reads.restart()
        self.redelivery_counts.clear()
        if self.dispatcher is not None:
            self.dispatcher.reset()

    def on_new_entries(self) -> None:
        """Wake the dispatcher: the topic has new entries."""
        if self.dispatcher is not None and self.dispatcher.consumers:
            self.dispatcher.schedule()

    def backlog(self) -> int:
        """How many messages wait to be acknowledged."""
        return self.cursor.backlog()

    def check_end_of_topic(self) -> None:
        """On a terminated topic, tell each consumer once that nothing is left to read."""
        if self.topic.terminated is None or self.cursor.has_more_entries():
            return
        for consumer in self.consumers:
            if consumer not in self._told_end:
                self._told_end.add(consumer)
                if _understands_end_of_topic(consumer):
                    consumer.cnx.write(commands.reached_end_of_topic(consumer.consumer_id))

    def close(self) -> None:
        """Stop dispatching."""
        self.cursor.set_inactive()
        if self.dispatcher is not None:
            self.dispatcher.close()
