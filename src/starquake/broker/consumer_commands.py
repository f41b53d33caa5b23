"""Consumer commands of a connection: SUBSCRIBE, FLOW, ACK, redelivery, SEEK and friends."""

from __future__ import annotations

import logging
import time

from google.protobuf.message import Message

from starquake.broker.cnx_base import CommandContext
from starquake.broker.compaction.reading import last_compacted_message
from starquake.broker.consumer import Consumer, SubscriptionApi
from starquake.broker.entry_info import LastMessage
from starquake.broker.errors import (
    BrokerServiceError,
    ConsumerBusyError,
    ConsumerNotFoundError,
    NotAllowedError,
    ServiceNotReadyError,
)
from starquake.broker.schemas.topic_schemas import check_consumer_schema
from starquake.broker.subscription import Subscription, to_signed
from starquake.broker.topic import PersistentTopic
from starquake.broker.topic_api import TopicApi
from starquake.broker.transactions.txn_acks import carries_txn, on_txn_ack
from starquake.protocol import commands
from starquake.protocol.enums import AckType, InitialPosition, KeySharedMode, SubType
from starquake.protocol.schema import schema_info_of
from starquake.protocol.wire import pb
from starquake.storage import EARLIEST, Position

log = logging.getLogger(__name__)

T = pb.BaseCommand


class ConsumerCommands:
    """Handles the consumer commands of one connection."""

    def __init__(self, cnx: CommandContext) -> None:
        self._cnx = cnx
        self._service = cnx.service

    def _consumer(self, request: Message) -> Consumer:
        """The consumer a request names; raises ConsumerNotFoundError if there is none."""
        consumer = self._cnx.consumers.get(int(getattr(request, "consumer_id")))  # noqa: B009
        if consumer is None:
            raise ConsumerNotFoundError("Consumer not found")
        return consumer

    # --- SUBSCRIBE ----------------------------------------------------------------------------

    def on_subscribe(self, command: T, _: bytes | None) -> None:
        """SUBSCRIBE: authorize, load the topic if needed, check the schema, add the consumer."""
        request = command.subscribe
        request_id = request.request_id
        consumer_id = request.consumer_id
        if consumer_id in self._cnx.consumers:
            existing = self._cnx.consumers[consumer_id]
            if existing.subscription.topic.full_name == request.topic:
                self._cnx.write(commands.success(request_id))
            else:
                self._cnx.fail(request, BrokerServiceError("Consumer id already in use"))
            return
        if not self._cnx.creating.consumers.begin(consumer_id, request_id):
            self._cnx.fail(
                request, ServiceNotReadyError("Consumer is already present on the connection")
            )
            return
        try:
            topic_name = self._service.parse_topic(request.topic)
            self._service.authorization.check_subscribe(
                self._cnx.auth_role, topic_name, request.subscription
            )
            loaded = self._service.loaded_topic(topic_name)
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return
        if loaded is None:
            self._cnx.load_then(
                request,
                topic_name,
                request.force_topic_creation,
                lambda t: self._consumer_schema(request, t),
            )
            return
        self._consumer_schema(request, loaded)

    def _consumer_schema(self, request: pb.CommandSubscribe, topic: TopicApi) -> None:
        """Check (off the loop) a consumer's schema against the topic's, then add it."""
        info = schema_info_of(request.schema) if request.HasField("schema") else None
        if info is None:
            self._add_consumer(request, topic)
            return

        self._cnx.await_then(
            request,
            check_consumer_schema(
                self._service, topic, self._service.parse_topic(topic.full_name), info
            ),
            lambda _: self._add_consumer(request, topic),
            f"schema check of a consumer on {topic.full_name}",
        )

    def _add_consumer(self, request: pb.CommandSubscribe, topic: TopicApi) -> None:
        """Find or create the subscription; store it first when it is new and durable."""
        if not self._cnx.creating.consumers.wanted(request.consumer_id, request.request_id):
            return  # closed by the client while the topic loaded (it no longer waits)
        if topic.closed:  # unloaded during the schema check
            self._cnx.fail(request, ServiceNotReadyError("Topic is being closed"))
            return
        if request.read_compacted and int(request.subType) not in (
            SubType.Exclusive,
            SubType.Failover,
        ):
            self._cnx.fail(
                request,
                NotAllowedError(
                    "readCompacted only allowed on failover or exclusive subscriptions"
                ),
            )
            return
        try:
            start, inclusive = _start_of(request)
            created = request.durable and request.subscription not in topic.subscriptions
            subscription = topic.get_or_create_subscription(
                request.subscription,
                durable=request.durable,
                initial_earliest=int(request.initialPosition) == InitialPosition.Earliest,
                start=start,
                start_inclusive=inclusive,
            )
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return
        if created and topic.is_persistent:
            self._cnx.persist_then(
                request,
                lambda: self._attach_consumer(request, topic, subscription),
                undo=lambda: topic.forget_new_subscription(request.subscription),
            )
        else:
            self._attach_consumer(request, topic, subscription)

    def _attach_consumer(
        self, request: pb.CommandSubscribe, topic: TopicApi, subscription: SubscriptionApi
    ) -> None:
        """Add the consumer to its subscription and confirm the SUBSCRIBE."""
        if not self._cnx.creating.consumers.wanted(request.consumer_id, request.request_id):
            # closed by the client while the subscription was being stored
            if not subscription.durable and not subscription.consumers:
                topic.remove_subscription(subscription.name)
            return
        if topic.closed:  # unloaded while the subscription was being stored
            self._cnx.fail(request, ServiceNotReadyError("Topic is being closed"))
            return
        try:
            consumer = self._new_consumer(request, topic, subscription)
            subscription.add_consumer(consumer)
        except BrokerServiceError as exc:
            if not subscription.durable and not subscription.consumers:
                topic.remove_subscription(subscription.name)  # a reader that never started
            self._cnx.fail(request, exc)
            return
        self._cnx.consumers[request.consumer_id] = consumer
        self._cnx.creating.consumers.end(request.consumer_id, request.request_id)
        log.info(
            "consumer %r subscribed to %s/%s (%s) from %s",
            consumer.name,
            topic.full_name,
            subscription.name,
            consumer.sub_type.name,
            self._cnx.remote_address,
        )
        self._cnx.write(commands.success(request.request_id))
        if subscription.dispatcher is not None:
            subscription.dispatcher.schedule()

    def _new_consumer(
        self, request: pb.CommandSubscribe, topic: TopicApi, subscription: SubscriptionApi
    ) -> Consumer:
        """The consumer a SUBSCRIBE describes (not yet added to its subscription)."""
        consumer = Consumer(
            subscription,
            self._cnx,
            request.consumer_id,
            request.consumer_name,
            SubType(request.subType),
            request.priority_level,
            topic.partition_index,
        )
        consumer.read_compacted = request.read_compacted
        consumer.metadata = {kv.key: kv.value for kv in request.metadata}
        if request.HasField("keySharedMeta"):
            meta = request.keySharedMeta
            consumer.allow_out_of_order = meta.allowOutOfOrderDelivery
            if int(meta.keySharedMode) == KeySharedMode.STICKY:
                consumer.key_hash_ranges = [(r.start, r.end) for r in meta.hashRanges]
        return consumer

    # --- FLOW, ACK, redelivery ----------------------------------------------------------------

    def on_flow(self, command: T, _: bytes | None) -> None:
        """FLOW: hand the consumer's new permits to its dispatcher."""
        flow = command.flow
        consumer = self._cnx.consumers.get(flow.consumer_id)
        if consumer is None:
            return
        now = int(time.time() * 1000)
        consumer.last_consumed_flow_timestamp = now
        subscription = consumer.subscription
        subscription.last_consumed_flow_timestamp = now
        dispatcher = subscription.dispatcher
        if dispatcher is not None:
            dispatcher.consumer_flow(consumer, flow.messagePermits)

    def on_ack(self, command: T, _: bytes | None) -> None:
        """ACK: individual or cumulative; answered only when it carries a request id."""
        ack = command.ack
        wants_response = ack.HasField("request_id")
        try:
            consumer = self._consumer(ack)
            consumer.last_acked_timestamp = int(time.time() * 1000)
            if carries_txn(ack):  # held until the transaction ends; answered when durable
                on_txn_ack(self._cnx, self._service.transactions, consumer, ack)
                return
            before = consumer.unacked
            if int(ack.ack_type) == AckType.Cumulative:
                self._ack_cumulative(consumer, ack)
            else:
                self._ack_individual(consumer, ack)
            consumer.msg_ack_counter += max(before - consumer.unacked, 0)
        except BrokerServiceError as exc:
            if wants_response:
                self._cnx.fail(ack, exc)
            elif not isinstance(exc, ConsumerNotFoundError):
                log.info("ignored ack from %s: %s", self._cnx.remote_address, exc)
            return
        if wants_response:
            self._cnx.write(commands.ack_response(ack.consumer_id, ack.request_id))

    def _ack_cumulative(self, consumer: Consumer, ack: pb.CommandAck) -> None:
        """Acknowledge everything up to the one message id of a cumulative ACK."""
        if len(ack.message_id) != 1:
            return
        subscription = consumer.subscription
        mid = ack.message_id[0]
        position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
        if self._service.config.acknowledgmentAtBatchIndexLevelEnabled and len(mid.ack_set):
            # up to a message inside a batch: the entries before it, and of this one the
            # indexes the ack set no longer lists (as Pulsar's cursor does)
            size = self._batch_size(consumer, mid, position)
            subscription.acknowledge_cumulative(
                consumer, Position(position.ledger_id, position.entry_id - 1)
            )
            subscription.acknowledge_batch_index(consumer, position, mid.ack_set, size)
        else:
            subscription.acknowledge_cumulative(consumer, position)

    def _ack_individual(self, consumer: Consumer, ack: pb.CommandAck) -> None:
        """Acknowledge the entries (or the batch indexes) of an individual ACK."""
        subscription = consumer.subscription
        batch_index_ack = self._service.config.acknowledgmentAtBatchIndexLevelEnabled
        positions = []
        for mid in ack.message_id:
            position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
            if not (len(mid.ack_set) and any(mid.ack_set)):  # all of the entry acknowledged
                positions.append(position)
            elif batch_index_ack:
                size = self._batch_size(consumer, mid, position)
                subscription.acknowledge_batch_index(consumer, position, mid.ack_set, size)
            # without batch-index acks the entry goes once the client acks all of it; a
            # partial ack must not delete the rest of the batch
        if positions:
            subscription.acknowledge_individual(consumer, positions)

    @staticmethod
    def _batch_size(consumer: Consumer, mid: pb.MessageIdData, position: Position) -> int:
        """Messages in the batch at ``position``: as the client says, else as stored if that
        is known at once; 0 if neither (the client's ack set is then taken as it is, as
        Pulsar's cursor takes it)."""
        size = mid.batch_size if mid.HasField("batch_size") else 0
        if size <= 0:
            size = consumer.subscription.topic.batch_size_of(position) or 0
        return size

    def on_redeliver(self, command: T, _: bytes | None) -> None:
        """REDELIVER_UNACKNOWLEDGED_MESSAGES: of the ids given, or of all unacked ones."""
        request = command.redeliver_unacknowledged_messages
        consumer = self._cnx.consumers.get(request.consumer_id)
        if consumer is None:
            return
        positions: list[Position] | None = None
        if len(request.message_ids):
            positions = [
                Position(to_signed(m.ledgerId), to_signed(m.entryId)) for m in request.message_ids
            ]
        consumer.count_redelivery(positions)
        consumer.subscription.redeliver(consumer, positions)

    # --- UNSUBSCRIBE, CLOSE_CONSUMER ----------------------------------------------------------

    def on_unsubscribe(self, command: T, _: bytes | None) -> None:
        """UNSUBSCRIBE: delete the subscription (``force``: even with other consumers)."""
        request = command.unsubscribe
        try:
            consumer = self._consumer(request)
            subscription = consumer.subscription
            others = [c for c in subscription.consumers if c is not consumer]
            if others and not request.force:
                raise ConsumerBusyError(
                    f"Subscription {subscription.name} has other connected consumers"
                )
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return
        for other in others:
            other.cnx.disconnect_consumer(other)
        self.remove_consumer(consumer)
        try:
            subscription.topic.unsubscribe(subscription.name)
        except BrokerServiceError as exc:
            if subscription.durable:
                self._cnx.fail(request, exc)
                return
        log.info("unsubscribed %s/%s", subscription.topic.full_name, subscription.name)
        if subscription.durable:
            transactions = self._service.transactions
            self._cnx.spawn(
                transactions.subscription_deleted(subscription.topic.full_name, subscription.name)
            )
        self._cnx.persist_then(
            request, lambda: self._cnx.write(commands.success(request.request_id))
        )

    def on_close_consumer(self, command: T, _: bytes | None) -> None:
        """CLOSE_CONSUMER: remove the consumer (if any) and confirm."""
        request = command.close_consumer
        consumer = self._cnx.consumers.get(request.consumer_id)
        if consumer is not None:
            self.remove_consumer(consumer)
        elif self._cnx.creating.consumers.give_up(request.consumer_id):
            log.info(
                "consumer %d closed by %s before its subscription completed",
                request.consumer_id,
                self._cnx.remote_address,
            )
        self._cnx.write(commands.success(request.request_id))

    def remove_consumer(self, consumer: Consumer) -> None:
        """Detach ``consumer`` from this connection and its subscription."""
        self._cnx.consumers.pop(consumer.consumer_id, None)
        consumer.subscription.remove_consumer(consumer)

    def disconnect_consumer(self, consumer: Consumer) -> None:
        """Close a consumer from the broker side; the client subscribes again."""
        self.remove_consumer(consumer)
        self._cnx.write(commands.close_consumer(consumer.consumer_id, 0))

    # --- SEEK, GET_LAST_MESSAGE_ID, CONSUMER_STATS --------------------------------------------

    def on_seek(self, command: T, _: bytes | None) -> None:
        """SEEK: move the subscription's cursor, store it, then confirm."""
        request = command.seek
        try:
            consumer = self._consumer(request)
            subscription = consumer.subscription
            topic = subscription.topic
            if not isinstance(subscription, Subscription) or not isinstance(topic, PersistentTopic):
                raise NotAllowedError("Seek is not supported on non-persistent topics")
            if request.HasField("message_publish_time") and not request.HasField("message_id"):
                # a search of the stored entries: it may wait for their reads
                found = topic.find_position_by_publish_time(request.message_publish_time)
                self._cnx.await_then(
                    request, found, lambda at: self._seek_to(request, subscription, at), "SEEK"
                )
                return
            position = _seek_position(request, topic)
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return
        self._seek_to(request, subscription, position)

    def _seek_to(
        self, request: pb.CommandSeek, subscription: Subscription, position: Position
    ) -> None:
        topic = subscription.topic
        # As Pulsar does: disconnect the subscription's consumers (they re-subscribe and
        # re-send their permits), move the cursor and store it, then confirm. Until the new
        # position is stored the subscription is fenced: consumers coming back are told to retry.
        subscription.begin_reset(position)
        log.info("seek %s/%s to %s", topic.full_name, subscription.name, position)

        def unfence() -> None:
            subscription.fenced = False

        self._cnx.persist_then(
            request, lambda: self._cnx.write(commands.success(request.request_id)), always=unfence
        )

    def on_get_last_message_id(self, command: T, _: bytes | None) -> None:
        """GET_LAST_MESSAGE_ID: the topic's last message and the subscription's mark-delete."""
        request = command.get_last_message_id
        try:
            consumer = self._consumer(request)
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return
        topic = consumer.subscription.topic
        if consumer.read_compacted and isinstance(topic, PersistentTopic):
            work = last_compacted_message(topic)
        else:
            work = topic.last_message_position()
        self._cnx.await_then(
            request,
            work,
            lambda found: self._answer_last_message_id(request, consumer, found),
            "GET_LAST_MESSAGE_ID",
        )

    def _answer_last_message_id(
        self, request: pb.CommandGetLastMessageId, consumer: Consumer, found: LastMessage
    ) -> None:
        last, batch_index = found
        topic = consumer.subscription.topic
        partition = topic.partition_index
        subscription = consumer.subscription
        mark = (
            subscription.cursor.mark_delete_position
            if isinstance(subscription, Subscription)
            else Position(-1, -1)
        )
        self._cnx.write(
            commands.get_last_message_id_response(
                request.request_id,
                commands.message_id_data(last.ledger_id, last.entry_id, partition, batch_index),
                commands.message_id_data(mark.ledger_id, mark.entry_id, partition),
            )
        )

    def on_consumer_stats(self, command: T, _: bytes | None) -> None:
        """CONSUMER_STATS: the consumer's counters, as Pulsar reports them."""
        request = command.consumer_stats
        try:
            consumer = self._consumer(request)
        except BrokerServiceError as exc:
            self._cnx.fail(request, exc)
            return
        now = time.monotonic()
        subscription = consumer.subscription
        self._cnx.write(
            commands.consumer_stats_response(
                request.request_id,
                consumerName=consumer.name,
                availablePermits=max(consumer.permits, 0),
                unackedMessages=consumer.unacked_messages,
                address=self._cnx.remote_address,
                connectedSince=time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime(consumer.connected_since)
                ),
                type=consumer.sub_type.name,
                msgBacklog=subscription.backlog(),
                blockedConsumerOnUnackedMsgs=consumer.blocked,
                msgRateExpired=subscription.expiry_rates.rates(
                    now, subscription.expired_counter, 0
                )[0],
                **consumer.rate_figures(now),
            )
        )


def _start_of(request: pb.CommandSubscribe) -> tuple[Position | None, bool]:
    """Where a new subscription starts (None: at its initial position) and whether the start
    entry itself is included."""
    if not request.HasField("start_message_id"):
        return None, False
    mid = request.start_message_id
    start = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
    # As Pulsar does: start at the given entry itself; the client drops the messages before
    # its start id (or up to it, for an exclusive start).
    inclusive = start.ledger_id >= 0 and start.entry_id >= 0
    return (EARLIEST if start.ledger_id < 0 else start), inclusive


def _seek_position(request: pb.CommandSeek, topic: PersistentTopic) -> Position:
    """The position a SEEK asks for (by message id or publish time)."""
    if request.HasField("message_id"):
        mid = request.message_id
        position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
        if position.ledger_id < 0:
            return topic.earliest_position()
        if position.ledger_id >= (1 << 63) - 1:
            return topic.end_position()
        return position
    raise BrokerServiceError("SEEK needs a message id or a publish time")
