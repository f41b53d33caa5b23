"""A persistent topic: its managed ledger, producers, subscriptions and pending send receipts.

Publishing appends the entry to the managed ledger at once (a memory operation) and queues the
receipt. The receipt is sent only when the group commit that contains the entry has been
fsynced; then the subscriptions are told that new entries are readable.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, NamedTuple

from starquake.broker.errors import BrokerServiceError, PersistenceError, SubscriptionNotFoundError
from starquake.broker.subscription import Subscription
from starquake.common.topic_name import TopicName
from starquake.protocol import commands
from starquake.protocol.errors import ServerError
from starquake.protocol.framing import entry_metadata
from starquake.storage import EARLIEST, ManagedLedger, Position, StorageError

if TYPE_CHECKING:
    from starquake.broker.producer import Producer
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

LATEST_ID = (1 << 63) - 1


class PendingReceipt(NamedTuple):
    position: Position
    producer: Producer
    sequence_id: int
    highest_sequence_id: int


class PersistentTopic:
    """A topic whose messages are stored in a managed ledger."""

    def __init__(self, service: BrokerService, name: TopicName, ledger: ManagedLedger) -> None:
        self.service = service
        self.name = name
        self.full_name = str(name)
        self.partition_index = name.partition_index
        self.ledger = ledger
        self.producers: dict[int, Producer] = {}
        self.subscriptions: dict[str, Subscription] = {}
        self._pending: deque[PendingReceipt] = deque()
        self._producer_seq = 0
        self.closed = False
        self.msg_in_counter = 0
        self.bytes_in_counter = 0
        for cursor_name, cursor in ledger.cursors.items():
            self.subscriptions[cursor_name] = Subscription(self, cursor_name, cursor, durable=True)

    # --- producers ----------------------------------------------------------------------------

    def add_producer(self, producer: Producer) -> None:
        self.producers[id(producer)] = producer

    def remove_producer(self, producer: Producer) -> None:
        self.producers.pop(id(producer), None)

    def generate_producer_name(self) -> str:
        self._producer_seq += 1
        return f"{self.service.config.clusterName}-{self.service.instance_id}-{self._producer_seq}"

    def publish(
        self,
        producer: Producer,
        sequence_id: int,
        highest_sequence_id: int,
        num_messages: int,
        entry: bytes,
    ) -> None:
        """Append ``entry``; the receipt follows once it is durable."""
        if self.closed:
            raise BrokerServiceError("Topic is being closed", ServerError.ServiceNotReady)
        try:
            position = self.ledger.append(entry)
        except StorageError as exc:
            raise PersistenceError(f"Cannot store the message: {exc}") from exc
        self._pending.append(PendingReceipt(position, producer, sequence_id, highest_sequence_id))
        self.msg_in_counter += num_messages
        self.bytes_in_counter += len(entry)
        self.service.committer.kick()

    def on_committed(self, last: Position) -> None:
        """Entries up to ``last`` are durable: send their receipts and wake the dispatchers."""
        pending = self._pending
        partition = self.partition_index
        while pending and pending[0].position <= last:
            position, producer, sequence_id, highest = pending.popleft()
            producer.on_receipt(
                commands.send_receipt(
                    producer.producer_id,
                    sequence_id,
                    position.ledger_id,
                    position.entry_id,
                    highest,
                    partition,
                )
            )
        for subscription in self.subscriptions.values():
            subscription.on_new_entries()

    def on_commit_failed(self, exc: BaseException) -> None:
        """The storage lost its ability to persist: fail every pending send and unload."""
        message = f"Failed to persist the message: {exc}"
        while self._pending:
            receipt = self._pending.popleft()
            receipt.producer.on_send_error(
                receipt.sequence_id, ServerError.PersistenceError, message
            )
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
        if durable:
            subscription = self.subscriptions.get(name)
            if subscription is not None:
                return subscription
            if not self.service.config.allowAutoSubscriptionCreation:
                raise SubscriptionNotFoundError(
                    f"Subscription {name} does not exist and automatic creation is disabled"
                )
            cursor = self.ledger.open_cursor(name, "earliest" if initial_earliest else "latest")
            subscription = Subscription(self, name, cursor, durable=True)
            self.subscriptions[name] = subscription
            self.service.cursor_changed()
            return subscription
        if start is None:
            start = EARLIEST if initial_earliest else Position(LATEST_ID, LATEST_ID)
        if start.ledger_id >= LATEST_ID:
            cursor = self.ledger.new_non_durable_cursor(
                self.ledger.last_confirmed, name, inclusive=False
            )
        else:
            cursor = self.ledger.new_non_durable_cursor(start, name, inclusive=start_inclusive)
        subscription = Subscription(self, name, cursor, durable=False)
        self.subscriptions[name] = subscription
        return subscription

    def remove_subscription(self, name: str) -> None:
        subscription = self.subscriptions.pop(name, None)
        if subscription is not None:
            subscription.close()

    def unsubscribe(self, name: str) -> None:
        subscription = self.subscriptions.get(name)
        if subscription is None:
            raise SubscriptionNotFoundError(f"Subscription {name} not found")
        if subscription.consumers:
            raise BrokerServiceError(
                f"Subscription {name} has connected consumers", ServerError.ConsumerBusy
            )
        self.subscriptions.pop(name, None)
        subscription.close()
        if subscription.durable:
            self.ledger.delete_cursor(name)
            self.service.cursor_changed()

    # --- queries ------------------------------------------------------------------------------

    def last_message_position(self) -> tuple[Position, int]:
        """Last durable entry and its last batch index (-1 when not batched or no entry)."""
        last = self.ledger.last_confirmed
        if last.entry_id < 0:
            return last, -1
        entry = self.ledger.read_entry(last)
        if entry is None:
            return last, -1
        metadata = entry_metadata(entry.data)
        if metadata.HasField("num_messages_in_batch"):
            return last, metadata.num_messages_in_batch - 1
        return last, -1

    def find_position_by_publish_time(self, timestamp_ms: int) -> Position:
        """First entry published at or after ``timestamp_ms`` (after the last one if none)."""
        found = self.ledger.find_first(
            lambda e: entry_metadata(e.data).publish_time >= timestamp_ms
        )
        if found is None:
            return self.ledger.next_position(self.ledger.last_confirmed)
        return found

    # --- lifecycle ----------------------------------------------------------------------------

    def close(self) -> None:
        """Disconnect producers and consumers; the ledger stays open in the factory."""
        self.closed = True
        for producer in list(self.producers.values()):
            producer.disconnect()
        for subscription in list(self.subscriptions.values()):
            for consumer in subscription.consumers:
                consumer.cnx.disconnect_consumer(consumer)
            subscription.close()
