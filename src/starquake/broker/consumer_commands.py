"""Consumer commands of a connection: SUBSCRIBE, FLOW, ACK, redelivery, SEEK and friends."""

from __future__ import annotations

import logging
import time

from starquake.broker.cnx_base import CnxBase
from starquake.broker.compaction.reading import last_compacted_message
from starquake.broker.consumer import Consumer, SubType
from starquake.broker.errors import BrokerServiceError, NotAllowedError
from starquake.broker.schemas.topic_schemas import check_consumer_schema
from starquake.broker.subscription import Subscription, to_signed
from starquake.broker.topic import PersistentTopic
from starquake.broker.topic_api import SubscriptionApi, TopicApi
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.errors import ServerError
from starquake.protocol.schema import schema_info_of
from starquake.storage import EARLIEST, Position

log = logging.getLogger(__name__)

T = pb.BaseCommand


class ConsumerCommands(CnxBase):
    """Handlers for consumer commands (mixed into ServerCnx)."""

    auth_role: str | None

    def _on_subscribe(self, command: T, _: bytes | None) -> None:
        request = command.subscribe
        request_id = request.request_id
        consumer_id = request.consumer_id
        if consumer_id in self.consumers:
            existing = self.consumers[consumer_id]
            if existing.subscription.topic.full_name == request.topic:
                self.write(commands.success(request_id))
            else:
                self._error(request_id, BrokerServiceError("Consumer id already in use"))
            return
        try:
            topic_name = self.service.parse_topic(request.topic)
            self.service.authorization.check_subscribe(
                self.auth_role, topic_name, request.subscription
            )
            loaded = self.service.loaded_topic(topic_name)
        except BrokerServiceError as exc:
            self._error(request_id, exc)
            return
        if loaded is None:
            self._load_then(
                topic_name,
                request.force_topic_creation,
                request_id,
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

        self._await_then(
            request.request_id,
            check_consumer_schema(
                self.service, topic, self.service.parse_topic(topic.full_name), info
            ),
            lambda _: self._add_consumer(request, topic),
            f"schema check of a consumer on {topic.full_name}",
        )

    def _add_consumer(self, request: pb.CommandSubscribe, topic: TopicApi) -> None:
        request_id = request.request_id
        consumer_id = request.consumer_id
        if consumer_id in self.consumers:  # the same id arrived again while the topic loaded
            self._error(request_id, BrokerServiceError("Consumer id already in use"))
            return
        if request.read_compacted and request.subType not in (
            pb.CommandSubscribe.Exclusive,
            pb.CommandSubscribe.Failover,
        ):
            self._error(
                request_id,
                NotAllowedError(
                    "readCompacted only allowed on failover or exclusive subscriptions"
                ),
            )
            return
        try:
            start: Position | None = None
            inclusive = False
            if request.HasField("start_message_id"):
                mid = request.start_message_id
                start = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
                # As Pulsar does: start at the given entry itself; the client drops the messages
                # before its start id (or up to it, for an exclusive start).
                inclusive = start.ledger_id >= 0 and start.entry_id >= 0
                if start.ledger_id < 0:
                    start = EARLIEST
            created = request.durable and request.subscription not in topic.subscriptions
            subscription = topic.get_or_create_subscription(
                request.subscription,
                durable=request.durable,
                initial_earliest=request.initialPosition == pb.CommandSubscribe.Earliest,
                start=start,
                start_inclusive=inclusive,
            )
        except BrokerServiceError as exc:
            self._error(request_id, exc)
            return
        if created and topic.is_persistent:
            self._persist_then(
                request_id, lambda: self._attach_consumer(request, topic, subscription)
            )
        else:
            self._attach_consumer(request, topic, subscription)

    def _attach_consumer(
        self, request: pb.CommandSubscribe, topic: TopicApi, subscription: SubscriptionApi
    ) -> None:
        request_id = request.request_id
        consumer_id = request.consumer_id
        if consumer_id in self.consumers:  # the same id arrived again meanwhile
            self._error(request_id, BrokerServiceError("Consumer id already in use"))
            return
        try:
            consumer = Consumer(
                subscription,
                self,
                consumer_id,
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
                if meta.keySharedMode == pb.STICKY:
                    consumer.key_hash_ranges = [(r.start, r.end) for r in meta.hashRanges]
            subscription.add_consumer(consumer)
        except BrokerServiceError as exc:
            if not subscription.durable and not subscription.consumers:
                topic.remove_subscription(subscription.name)  # a reader that never started
            self._error(request_id, exc)
            return
        self.consumers[consumer_id] = consumer
        log.info(
            "consumer %r subscribed to %s/%s (%s) from %s",
            consumer.name,
            topic.full_name,
            subscription.name,
            consumer.sub_type.name,
            self.remote_address,
        )
        self.write(commands.success(request_id))
        if subscription.dispatcher is not None:
            subscription.dispatcher.schedule()

    def _on_flow(self, command: T, _: bytes | None) -> None:
        flow = command.flow
        consumer = self.consumers.get(flow.consumer_id)
        if consumer is None:
            return
        dispatcher = consumer.subscription.dispatcher
        if dispatcher is not None:
            dispatcher.consumer_flow(consumer, flow.messagePermits)

    def _on_ack(self, command: T, _: bytes | None) -> None:
        ack = command.ack
        consumer = self.consumers.get(ack.consumer_id)
        wants_response = ack.HasField("request_id")
        if consumer is None:
            if wants_response:
                self.write(
                    commands.ack_response(
                        ack.consumer_id,
                        ack.request_id,
                        ServerError.ConsumerNotFound,
                        "Consumer not found",
                    )
                )
            return
        subscription = consumer.subscription
        try:
            if ack.ack_type == pb.CommandAck.Cumulative:
                if len(ack.message_id) == 1:
                    mid = ack.message_id[0]
                    position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
                    batch_index_ack = self.service.config.acknowledgmentAtBatchIndexLevelEnabled
                    if batch_index_ack and len(mid.ack_set):
                        # up to a message inside a batch: the entries before it, and of this
                        # one the indexes the ack set no longer lists (as Pulsar's cursor does)
                        size = mid.batch_size if mid.HasField("batch_size") else 0
                        if size <= 0:
                            size = subscription.topic.batch_size_of(position)
                        subscription.acknowledge_cumulative(
                            consumer, Position(position.ledger_id, position.entry_id - 1)
                        )
                        subscription.acknowledge_batch_index(consumer, position, mid.ack_set, size)
                    else:
                        subscription.acknowledge_cumulative(consumer, position)
            else:
                positions = []
                batch_index_ack = self.service.config.acknowledgmentAtBatchIndexLevelEnabled
                for mid in ack.message_id:
                    position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
                    if len(mid.ack_set) and any(mid.ack_set):  # some messages still unacked
                        if not batch_index_ack:
                            # without batch-index acks the entry goes once the client acks
                            # all of it; a partial ack must not delete the rest of the batch
                            continue
                        size = mid.batch_size if mid.HasField("batch_size") else 0
                        if size <= 0:
                            size = subscription.topic.batch_size_of(position)
                        subscription.acknowledge_batch_index(consumer, position, mid.ack_set, size)
                    else:
                        positions.append(position)
                if positions:
                    subscription.acknowledge_individual(consumer, positions)
        except BrokerServiceError as exc:
            if wants_response:
                self.write(
                    commands.ack_response(ack.consumer_id, ack.request_id, exc.code, exc.message)
                )
            else:
                log.info("ignored ack from %s: %s", self.remote_address, exc)
            return
        if wants_response:
            self.write(commands.ack_response(ack.consumer_id, ack.request_id))

    def _on_redeliver(self, command: T, _: bytes | None) -> None:
        request = command.redeliver_unacknowledged_messages
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            return
        positions: list[Position] | None = None
        if len(request.message_ids):
            positions = [
                Position(to_signed(m.ledgerId), to_signed(m.entryId)) for m in request.message_ids
            ]
        consumer.subscription.redeliver(consumer, positions)

    def _on_unsubscribe(self, command: T, _: bytes | None) -> None:
        request = command.unsubscribe
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self._error(
                request.request_id,
                BrokerServiceError("Consumer not found", ServerError.ConsumerNotFound),
            )
            return
        subscription = consumer.subscription
        others = [c for c in subscription.consumers if c is not consumer]
        if others and not request.force:
            self._error(
                request.request_id,
                BrokerServiceError(
                    f"Subscription {subscription.name} has other connected consumers",
                    ServerError.ConsumerBusy,
                ),
            )
            return
        for other in others:
            other.cnx.disconnect_consumer(other)
        self._remove_consumer(consumer)
        try:
            subscription.topic.unsubscribe(subscription.name)
        except BrokerServiceError as exc:
            if subscription.durable:
                self._error(request.request_id, exc)
                return
        log.info("unsubscribed %s/%s", subscription.topic.full_name, subscription.name)
        self._persist_then(
            request.request_id, lambda: self.write(commands.success(request.request_id))
        )

    def _on_close_consumer(self, command: T, _: bytes | None) -> None:
        request = command.close_consumer
        consumer = self.consumers.get(request.consumer_id)
        if consumer is not None:
            self._remove_consumer(consumer)
        self.write(commands.success(request.request_id))

    def _remove_consumer(self, consumer: Consumer) -> None:
        self.consumers.pop(consumer.consumer_id, None)
        consumer.subscription.remove_consumer(consumer)

    def disconnect_consumer(self, consumer: Consumer) -> None:
        """Close a consumer from the broker side; the client subscribes again."""
        self._remove_consumer(consumer)
        self.write(commands.close_consumer(consumer.consumer_id, 0))

    def _on_seek(self, command: T, _: bytes | None) -> None:
        request = command.seek
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self._error(
                request.request_id,
                BrokerServiceError("Consumer not found", ServerError.ConsumerNotFound),
            )
            return
        subscription = consumer.subscription
        topic = subscription.topic
        if not isinstance(subscription, Subscription) or not isinstance(topic, PersistentTopic):
            self._error(
                request.request_id,
                BrokerServiceError(
                    "Seek is not supported on non-persistent topics", ServerError.NotAllowedError
                ),
            )
            return
        if request.HasField("message_id"):
            mid = request.message_id
            position = Position(to_signed(mid.ledgerId), to_signed(mid.entryId))
            if position.ledger_id < 0:
                position = topic.earliest_position()
            elif position.ledger_id >= (1 << 63) - 1:
                position = topic.end_position()
        elif request.HasField("message_publish_time"):
            position = topic.find_position_by_publish_time(request.message_publish_time)
        else:
            self._error(
                request.request_id,
                BrokerServiceError("SEEK needs a message id or a publish time"),
            )
            return
        # As Pulsar does: disconnect the subscription's consumers (they re-subscribe and
        # re-send their permits), move the cursor and store it, then confirm. Until the new
        # position is stored the subscription is fenced: consumers coming back are told to retry.
        subscription.begin_reset(position)
        log.info("seek %s/%s to %s", topic.full_name, subscription.name, position)

        def unfence() -> None:
            subscription.fenced = False

        self._persist_then(
            request.request_id,
            lambda: self.write(commands.success(request.request_id)),
            always=unfence,
        )

    def _on_get_last_message_id(self, command: T, _: bytes | None) -> None:
        request = command.get_last_message_id
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self._error(
                request.request_id,
                BrokerServiceError("Consumer not found", ServerError.ConsumerNotFound),
            )
            return
        topic = consumer.subscription.topic
        if consumer.read_compacted and isinstance(topic, PersistentTopic):
            last, batch_index = last_compacted_message(topic)
        else:
            last, batch_index = topic.last_message_position()
        partition = topic.partition_index
        subscription = consumer.subscription
        mark = (
            subscription.cursor.mark_delete_position
            if isinstance(subscription, Subscription)
            else Position(-1, -1)
        )
        self.write(
            commands.get_last_message_id_response(
                request.request_id,
                commands.message_id_data(last.ledger_id, last.entry_id, partition, batch_index),
                commands.message_id_data(mark.ledger_id, mark.entry_id, partition),
            )
        )

    def _on_consumer_stats(self, command: T, _: bytes | None) -> None:
        request = command.consumer_stats
        consumer = self.consumers.get(request.consumer_id)
        if consumer is None:
            self.write(
                commands.consumer_stats_error(
                    request.request_id, ServerError.ConsumerNotFound, "Consumer not found"
                )
            )
            return
        subscription = consumer.subscription
        self.write(
            commands.consumer_stats_response(
                request.request_id,
                consumerName=consumer.name,
                availablePermits=max(consumer.permits, 0),
                unackedMessages=consumer.unacked_messages,
                address=self.remote_address,
                connectedSince=time.strftime(
                    "%Y-%m-%dT%H:%M:%SZ", time.gmtime(consumer.connected_since)
                ),
                type=consumer.sub_type.name,
                msgBacklog=subscription.backlog(),
                msgRateOut=0.0,
                msgThroughputOut=0.0,
                msgRateRedeliver=0.0,
                blockedConsumerOnUnackedMsgs=False,
                msgRateExpired=0.0,
                messageAckRate=0.0,
            )
        )
