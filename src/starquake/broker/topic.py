"""A persistent topic: its managed ledger, producers, subscriptions and pending send receipts.

Publishing appends the entry to the managed ledger at once (a memory operation) and queues the
receipt. The receipt is sent only when the group commit that contains the entry has been
fsynced; then the subscriptions are told that new entries are readable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from starquake.broker import applied_policies, topic_stats
from starquake.broker.compaction.state import TopicCompaction
from starquake.broker.dedup import DedupStatus, MessageDeduplication
from starquake.broker.entry_info import EntryInfo, EntryInfoCache, LastMessage, last_message_at
from starquake.broker.entry_scan import stored_entry_info
from starquake.broker.errors import (
    ConsumerBusyError,
    NotAllowedError,
    PersistenceError,
    ServiceNotReadyError,
    SubscriptionNotFoundError,
    TopicTerminatedError,
)
from starquake.broker.limits import check_producer_limit
from starquake.broker.observations import ENTRY_SIZE_BOUNDS, WRITE_LATENCY_BOUNDS_MS, Buckets
from starquake.broker.producer_access import ProducerRegistry, generated_producer_name
from starquake.broker.rates import RateWindow
from starquake.broker.receipts import PendingReceipt, send_receipts
from starquake.broker.subscription import Subscription
from starquake.common.topic_name import TopicName
from starquake.protocol import commands
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import entry_metadata
from starquake.storage import EARLIEST, Entry, ManagedLedger, Position, StorageError, read_at_hand

if TYPE_CHECKING:
    from starquake.broker.contexts import TopicContext
    from starquake.broker.producer import Producer, RunEntry
    from starquake.broker.transactions.buffer import TopicTransactionBuffer

log = logging.getLogger(__name__)

LATEST_ID = (1 << 63) - 1


_new_receipt = tuple.__new__
"""Makes a PendingReceipt from a tuple of its fields at the cost of a tuple (the NamedTuple's
own constructor is a Python function: several times slower, on the publish path)."""


class PersistentTopic:
    """A topic whose messages are stored in a managed ledger."""

    is_persistent = True

    def __init__(self, service: TopicContext, name: TopicName, ledger: ManagedLedger) -> None:
        self.service = service
        self.name = name
        self.full_name = str(name)
        self.partition_index = name.partition_index
        self.ledger = ledger
        self.producer_registry = ProducerRegistry()
        self.subscriptions: dict[str, Subscription] = {}
        self._pending: deque[PendingReceipt] = deque()
        self.closed = False
        self.msg_in_counter = 0
        self.entry_infos = EntryInfoCache(scanner=stored_entry_info)
        self.dedup = MessageDeduplication(
            self.full_name,
            enabled=False,
            snapshot_interval_entries=service.config.brokerDeduplicationEntriesInterval,
        )
        self.bytes_in_counter = 0
        self.entries_added = 0
        self.msg_chunk_published = False
        """A chunk of a chunked message was published since the topic was loaded."""
        self._drained: list[asyncio.Future[None]] = []
        self.terminated: Position | None = None
        """Where the topic was terminated: it takes no more messages (None: open)."""
        self.rates = RateWindow()
        self.write_latency = Buckets(WRITE_LATENCY_BOUNDS_MS)
        """Milliseconds from reading each SEND to its entry being durable."""
        self.entry_sizes = Buckets(ENTRY_SIZE_BOUNDS)
        """Bytes of each entry stored."""
        self.max_delivery_delay_ms = applied_policies.max_delivery_delay_ms(service, name)
        """Longest delivery delay a message may ask for (0: any); policy_events refreshes it."""
        self.last_active = time.monotonic()
        """When the topic was last seen active (for the deletion of inactive topics)."""
        self.compaction = TopicCompaction()
        """The compacted view and the state of the topic's compactions."""
        self.txn: TopicTransactionBuffer | None = None
        """The transaction buffer (None: transactions are off)."""
        for cursor_name, cursor in ledger.cursors.items():
            self.subscriptions[cursor_name] = Subscription(self, cursor_name, cursor, durable=True)

    # --- producers ----------------------------------------------------------------------------

    @property
    def producers(self) -> dict[int, Producer]:
        """The connected producers by producer id."""
        return self.producer_registry.producers

    def add_producer(self, producer: Producer) -> bool:
        """Admit ``producer`` by its access mode; False: it waits for exclusive access."""
        if self.terminated is not None:
            raise TopicTerminatedError("Topic was already terminated")
        check_producer_limit(self)
        admitted = self.producer_registry.admit(producer)
        self.dedup.producer_connected(producer.name)
        return admitted

    def remove_producer(self, producer: Producer) -> None:
        """Forget a producer that closed or disconnected (the topic was active until now)."""
        self.producer_registry.remove(producer)
        self.dedup.producer_disconnected(producer.name)
        self.last_active = time.monotonic()

    def last_sequence_id(self, producer_name: str) -> int:
        """Last sequence id the broker has for ``producer_name`` (-1 without deduplication)."""
        if not self.dedup.enabled:
            return -1
        return self.dedup.last_sequence_id(producer_name)

    def generate_producer_name(self) -> str:
        """A producer name unique in the cluster, for producers that bring none."""
        service = self.service
        return generated_producer_name(f"{service.config.clusterName}-{service.instance_id}")

    def publish(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        info: EntryInfo,
        entry: bytes,
        *,
        last_chunk: bool = True,
    ) -> Position | None:
        """Append ``entry`` (returns its position; None: a duplicate, not stored); the receipt
        follows once it is durable.

        With deduplication on, a duplicate is not stored and gets a receipt with id -1:-1 at
        once; a message whose status is unknown (an earlier copy is still being persisted) is
        refused so that the producer retries.
        """
        if self.closed or self.terminated is not None:
            self._refuse_publish()
        max_delay = self.max_delivery_delay_ms
        if max_delay and info.deliver_at - info.publish_time > max_delay:
            raise NotAllowedError(f"Exceeds max allowed delivery delay of {max_delay} milliseconds")
        dedup = self.dedup
        if dedup.enabled and self._is_duplicate(
            producer, sequence_id, highest_sequence_id, last_chunk
        ):
            return None
        ledger = self.ledger
        try:
            position = ledger.append(entry)
        except StorageError as exc:
            if dedup.enabled:
                dedup.on_failed(producer.name, sequence_id, highest_sequence_id)
            raise PersistenceError(f"Cannot store the message: {exc}") from exc
        if ledger.has_active_cursors():
            # kept for the consumers reading at the tail; a later read parses it again
            self.entry_infos.put(position, info)
        read_at = self.service.received_at
        receipt = (position, producer, sequence_id, highest_sequence_id, last_chunk, False, read_at)
        self._pending.append(_new_receipt(PendingReceipt, receipt))  # without its Python __new__
        size = len(entry)
        self.entry_sizes.counts[bisect_left(ENTRY_SIZE_BOUNDS, size)] += 1
        self._count_in(producer, 1, info.num_messages, size, 1 if info.chunk_uuid else 0)
        return position

    @property
    def takes_runs(self) -> bool:
        """Entries may be published several at once: no deduplication or delivery delay
        limit checks each one."""
        return not self.max_delivery_delay_ms and not self.dedup.enabled

    def publish_run(self, producer: Producer, run: Sequence[RunEntry]) -> None:
        """:meth:`publish` each entry of ``run``, in order, in one call (while
        :attr:`takes_runs`); all are stored or none (the error is raised)."""
        if self.closed or self.terminated is not None:
            self._refuse_publish()
        ledger = self.ledger
        try:
            positions = ledger.append_many([item[3] for item in run])
        except StorageError as exc:
            raise PersistenceError(f"Cannot store the message: {exc}") from exc
        infos = self.entry_infos if ledger.has_active_cursors() else None
        read_at = self.service.received_at
        add = self._pending.append
        counts = self.entry_sizes.counts
        size_sum = messages = chunks = 0
        for position, item in zip(positions, run, strict=True):
            sequence_id, highest, info, entry, last_chunk = item
            if infos is not None:
                infos.put(position, info)
            receipt = (position, producer, sequence_id, highest, last_chunk, False, read_at)
            add(_new_receipt(PendingReceipt, receipt))
            size = len(entry)
            counts[bisect_left(ENTRY_SIZE_BOUNDS, size)] += 1
            size_sum += size
            messages += info.num_messages
            if info.chunk_uuid:
                chunks += 1
        self._count_in(producer, len(run), messages, size_sum, chunks)

    def _count_in(
        self, producer: Producer, entries: int, messages: int, size: int, chunks: int
    ) -> None:
        """Count ``entries`` published (``messages`` messages, ``size`` bytes, ``chunks`` of
        them chunks of chunked messages; each entry's size already counted in its bucket) and
        have them committed."""
        if chunks:
            producer.chunk_counter += chunks
            self.msg_chunk_published = True
        self.entry_sizes.sum += size
        self.msg_in_counter += messages
        self.bytes_in_counter += size
        self.entries_added += entries
        producer.msg_in_counter += messages
        producer.bytes_in_counter += size
        self.service.committer.kick()

    def _refuse_publish(self) -> NoReturn:
        """Refuse a message for a topic that is closing or terminated."""
        if self.closed:
            raise ServiceNotReadyError("Topic is being closed")
        raise TopicTerminatedError("Topic was already terminated")

    def _is_duplicate(
        self, producer: Producer, sequence_id: int, highest_sequence_id: int, last_chunk: bool
    ) -> bool:
        """With deduplication on: whether the message is a duplicate (then its receipt, with id
        -1:-1, is sent or queued after the pending ones); PersistenceError when its status is
        unknown."""
        status = self.dedup.check(
            producer.name, sequence_id, highest_sequence_id, is_last_chunk=last_chunk
        )
        if status is DedupStatus.DUPLICATE:
            if self._pending:  # answer in order, after the receipts still pending
                last_position = self._pending[-1].position
                self._pending.append(
                    PendingReceipt(
                        last_position,
                        producer,
                        sequence_id,
                        highest_sequence_id,
                        last_chunk,
                        True,
                        0.0,
                    )
                )
            else:
                producer.on_receipt(
                    commands.send_receipt(
                        producer.producer_id, sequence_id, -1, -1, highest_sequence_id
                    )
                )
            return True
        if status is DedupStatus.UNKNOWN:
            raise PersistenceError(
                "Deduplication status of the message is unknown (an earlier copy is still "
                "being persisted); retry"
            )
        return False

    def on_committed(self, last: Position) -> None:
        """Entries up to ``last`` are durable: send their receipts and wake the dispatchers."""
        pending = self._pending
        dedup = self.dedup if self.dedup.enabled else None
        send_receipts(pending, last, self.partition_index, dedup, self._count_latency)
        if self.txn is not None:
            self.txn.appends.on_committed(last)
        for subscription in self.subscriptions.values():
            subscription.on_new_entries()
        if not pending and self._drained:
            self._release_drained()
        if dedup is not None and dedup.snapshot_due():
            taken_at, generation = dedup.snapshot_position, dedup.generation
            key, value = dedup.take_snapshot()

            def stored() -> None:
                if dedup.generation == generation:
                    dedup.snapshot_stored(taken_at)

            self.service.store_metadata_later(key, value, on_stored=stored)

    def _count_latency(self, received: float, entries: int) -> None:
        """``entries`` whose SEND was read at ``received`` are durable now."""
        millis = (time.monotonic() - received) * 1000.0
        latency = self.write_latency
        latency.counts[bisect_left(WRITE_LATENCY_BOUNDS_MS, millis)] += entries
        latency.sum += millis * entries
        broker = self.service.publish_latency
        broker.counts[bisect_left(broker.bounds, millis)] += entries
        broker.sum += millis * entries

    async def receipts_sent(self) -> None:
        """Return once every entry appended so far is durable and its receipt sent."""
        if not self._pending:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drained.append(waiter)
        await waiter

    def _release_drained(self) -> None:
        for waiter in self._drained:
            if not waiter.done():
                waiter.set_result(None)
        self._drained.clear()

    def notify_terminated(self) -> None:
        """The topic was terminated: let each subscription tell its consumers, once they have
        read everything, that they reached the end."""
        for subscription in self.subscriptions.values():
            if subscription.dispatcher is not None:
                subscription.dispatcher.schedule()

    def forget_consumed_entry_infos(self) -> None:
        """Drop cached entry metadata that every subscription (and reader) is past."""
        marks = [s.cursor.mark_delete_position for s in self.subscriptions.values()]
        self.entry_infos.discard_up_to(min(marks) if marks else self.ledger.last_confirmed)

    def trim_hold(self) -> Position | None:
        """How far the managed ledger may be trimmed beyond what subscriptions allow."""
        return self.dedup.trim_hold()

    def on_commit_failed(self, exc: BaseException) -> None:
        """The storage lost its ability to persist: fail every pending send and unload."""
        message = f"Failed to persist the message: {exc}"
        while self._pending:
            _, producer, sequence_id, highest, _, duplicate, _ = self._pending.popleft()
            if self.dedup.enabled and not duplicate:
                self.dedup.on_failed(producer.name, sequence_id, highest)
            producer.on_send_error(sequence_id, ServerError.PersistenceError, message)
        if self.txn is not None:
            self.txn.appends.on_commit_failed(exc)
        self._release_drained()
        self.service.unload_topic(self)

    # --- subscriptions ------------------------------------------------------------------------

    def get_or_create_subscription(
        self,
        name: str,
        *,
        durable: bool,
        initial_earliest: bool,
        start: Position | None,
        start_inclusive: bool,
    ) -> Subscription:
        """The named subscription, created at the given start if new."""
        if durable:
            subscription = self.subscriptions.get(name)
            if subscription is not None:
                return subscription
            if not self.service.auto_subscription_creation(self.name.namespace_name):
                raise SubscriptionNotFoundError(
                    f"Subscription {name} does not exist and automatic creation is disabled"
                )
            cursor = self.ledger.open_cursor(name, "earliest" if initial_earliest else "latest")
            subscription = Subscription(self, name, cursor, durable=True)
            self.subscriptions[name] = subscription
            return subscription
        existing = self.subscriptions.get(name)
        if existing is not None and not existing.durable:
            return existing  # kept across a seek: the reader resumes where the seek put it
        if start is None:
            start = EARLIEST if initial_earliest else Position(LATEST_ID, LATEST_ID)
        if start.ledger_id >= LATEST_ID:
            cursor = self.ledger.new_non_durable_cursor(
                self.ledger.last_confirmed, name, inclusive=False
            )
        else:
            cursor = self.ledger.new_non_durable_cursor(start, name, inclusive=start_inclusive)
        subscription = Subscription(self, name, cursor, durable=False)
        subscription.start_position = (
            start if start_inclusive else Position(start.ledger_id, start.entry_id + 1)
        )
        self.subscriptions[name] = subscription
        return subscription

    def remove_subscription(self, name: str) -> None:
        """Close and forget a subscription (no-op if unknown)."""
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            subscription.close()
            self.last_active = time.monotonic()

    def forget_new_subscription(self, name: str) -> None:
        """Undo the creation of a durable subscription whose storing failed: its creator is
        told it failed, so it must not exist, now or after a restart."""
        subscription = self.subscriptions.get(name)
        if subscription is None or not subscription.durable or subscription.consumers:
            return
        self.remove_subscription(name)
        self.ledger.delete_cursor(name)  # a retried write of its state becomes a deletion

    def unsubscribe(self, name: str) -> None:
        """Delete a subscription that has no connected consumers, and its cursor."""
        subscription = self.subscriptions.get(name)
        if subscription is None:
            raise SubscriptionNotFoundError(f"Subscription {name} not found")
        if subscription.consumers:
            raise ConsumerBusyError(f"Subscription {name} has connected consumers")
        self.remove_subscription(name)
        if subscription.durable:
            self.ledger.delete_cursor(name)

    # --- queries ------------------------------------------------------------------------------

    def batch_size_of(self, position: Position) -> int | None:
        """Messages in the entry at ``position`` (1 if it is not stored), if known at once:
        from the entries' infos, or a read the ledger has at hand. Otherwise None, and the
        read goes on so that the infos know it the next time (the acknowledgment being handled
        must not wait: acks keep their order)."""
        info = self.entry_infos.known(position)
        if info is not None:
            return info.num_messages
        infos = self.entry_infos
        size: list[int] = []

        def found(entry: Entry | None) -> None:
            size.append(1 if entry is None else infos.get(position, entry.data).num_messages)

        read_at_hand(self.ledger.read_entry(position), found)
        return size[0] if size else None

    def stats(self) -> dict[str, Any]:
        """Topic stats with Pulsar's field names (the admin API serves them as JSON)."""
        return topic_stats.persistent_stats(self)

    async def last_message_position(self) -> LastMessage:
        """Last durable entry a consumer may get (transactions: before the max read position,
        not a marker nor aborted) and its last batch index (-1: not batched, or no entry)."""
        last = self.ledger.last_confirmed
        if self.txn is not None:
            last = self.txn.last_visible(last)
        if last.entry_id < 0:
            return LastMessage(last, -1)
        entry = await self.ledger.read_entry(last)
        return last_message_at(last, None if entry is None else entry.data)

    async def find_position_by_publish_time(self, timestamp_ms: int) -> Position:
        """First entry published at or after ``timestamp_ms`` (after the last one if none)."""
        found = await self.ledger.find_first(
            lambda e: entry_metadata(e.data).publish_time >= timestamp_ms
        )
        return self.end_position() if found is None else found

    def end_position(self) -> Position:
        """The position after the last entry: where the next message will be."""
        return self.ledger.next_position(self.ledger.last_confirmed)

    def earliest_position(self) -> Position:
        """The first stored entry (the end when there is none)."""
        first = self.ledger.first_position()
        return self.end_position() if first is None else first

    # --- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect producers and consumers; the ledger stays open in the factory."""
        self.closed = True
        self.compaction.close()
        if self.txn is not None:  # its commits are no longer reported here: ended elsewhere
            self.txn.appends.on_commit_failed(ServiceNotReadyError("Topic is being closed"))
        for producer in list(self.producers.values()):
            producer.disconnect()
        for subscription in list(self.subscriptions.values()):
            for consumer in subscription.consumers:
                consumer.cnx.disconnect_consumer(consumer)
            subscription.close()
