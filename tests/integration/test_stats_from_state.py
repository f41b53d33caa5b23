"""Stats fields computed from the broker's state, as Pulsar computes them, not constants:
``messageAckRate`` (consumers and subscriptions), ``msgRateExpired``,
``blockedSubscriptionOnUnackedMsgs``, Key_Shared's ``allowOutOfOrderDelivery`` and
``consumersAfterMarkDeletePosition``, and the CONSUMER_STATS answer of the binary protocol.

Rates are read at chosen times: the test ticks a topic's rate windows itself, so a rate is an
exact count over an exact interval."""

from __future__ import annotations

import time
from contextlib import closing
from datetime import timedelta
from pathlib import Path
from typing import Any

import pulsar
from official_client import official_client
from polling import wait_for
from raw_connection import T
from txn_raw import connected

from starquake.broker import message_expiry, topic_stats
from starquake.broker.cursor_sizes import serialized_ranges_size
from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.topic import PersistentTopic
from starquake.protocol import client_commands
from starquake.protocol.enums import SubType


def _loaded(broker: EmbeddedBroker, topic: str) -> PersistentTopic:
    loaded = broker.service.topics[topic]
    assert isinstance(loaded, PersistentTopic)
    return loaded


def _tick_twice(broker: EmbeddedBroker, topic: str) -> float:
    """Tick the topic's windows twice now (the counters as they are); returns the time."""
    loaded = _loaded(broker, topic)
    now = time.monotonic()

    async def tick() -> None:
        topic_stats.tick(loaded, now)
        topic_stats.tick(loaded, now + 0.001)

    broker.call(tick())
    return now


def _stats_at(broker: EmbeddedBroker, topic: str, now: float) -> dict[str, Any]:
    loaded = _loaded(broker, topic)

    async def stats() -> dict[str, Any]:
        return topic_stats.persistent_stats(loaded, now)

    return broker.call(stats())


def _produce(client: pulsar.Client, topic: str, count: int, **keys: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(count):
        producer.send(f"m{i}".encode(), **keys)
    producer.close()


def test_message_ack_rate_counts_what_each_consumer_acknowledged(
    broker: EmbeddedBroker, topic: str
) -> None:
    with closing(official_client(broker)) as client:
        consumer = client.subscribe(topic, "acks", initial_position=pulsar.InitialPosition.Earliest)
        _produce(client, topic, 10)
        messages = [consumer.receive(5000) for _ in range(10)]
        start = _tick_twice(broker, topic)  # nothing acknowledged yet
        for msg in messages:
            consumer.acknowledge(msg)
        (broker_consumer,) = _loaded(broker, topic).subscriptions["acks"].consumers
        wait_for(lambda: broker_consumer.msg_ack_counter == 10, "the acks to arrive")
        stats = _stats_at(broker, topic, start + 2.0)
        sub = stats["subscriptions"]["acks"]
        assert sub["consumers"][0]["messageAckRate"] == 5.0  # 10 acks over 2 s
        assert sub["messageAckRate"] == 5.0
        consumer.close()


def test_expired_messages_have_a_rate(broker: EmbeddedBroker, topic: str) -> None:
    with closing(official_client(broker)) as client:
        client.subscribe(topic, "ttl", initial_position=pulsar.InitialPosition.Earliest).close()
        _produce(client, topic, 6)
        # expiring "older than 0 s" keeps a message published in the same millisecond
        time.sleep(0.005)
        start = _tick_twice(broker, topic)
        subscription = _loaded(broker, topic).subscriptions["ttl"]
        assert broker.call(message_expiry.expire_older_than(subscription, 0))
        sub = _stats_at(broker, topic, start + 3.0)["subscriptions"]["ttl"]
        assert sub["totalMsgExpired"] == 6
        assert sub["msgRateExpired"] == 2.0  # 6 expired over 3 s


def test_a_subscription_held_at_its_unacked_limit_says_so(tmp_path: Path, topic: str) -> None:
    with (
        EmbeddedBroker(tmp_path / "data", maxUnackedMessagesPerSubscription=4) as broker,
        closing(official_client(broker)) as client,
    ):
        consumer = client.subscribe(
            topic,
            "held",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        _produce(client, topic, 6)  # once 4 are acknowledged, the other 2 do not hold it
        got = [consumer.receive(5000) for _ in range(4)]
        sub = _stats_at(broker, topic, time.monotonic())["subscriptions"]["held"]
        assert sub["unackedMessages"] == 4
        assert sub["blockedSubscriptionOnUnackedMsgs"] is True
        for msg in got:
            consumer.acknowledge(msg)
        wait_for(
            lambda: (
                not _stats_at(broker, topic, time.monotonic())["subscriptions"]["held"][
                    "blockedSubscriptionOnUnackedMsgs"
                ]
            ),
            "the subscription to be let go",
        )
        consumer.close()


def test_key_shared_reports_its_ordering_settings_and_late_joiners(
    broker: EmbeddedBroker, topic: str
) -> None:
    with closing(official_client(broker)) as client:
        first = client.subscribe(
            topic,
            "keys",
            consumer_type=pulsar.ConsumerType.KeyShared,
            consumer_name="first",
            initial_position=pulsar.InitialPosition.Earliest,
        )
        _produce(client, topic, 10, partition_key="k")
        for _ in range(10):
            first.receive(5000)  # received, not acknowledged
        late = client.subscribe(
            topic, "keys", consumer_type=pulsar.ConsumerType.KeyShared, consumer_name="late"
        )
        sub = _stats_at(broker, topic, time.monotonic())["subscriptions"]["keys"]
        assert sub["allowOutOfOrderDelivery"] is False
        joined = sub["consumersAfterMarkDeletePosition"]
        assert list(joined) == ["late"]
        late_stats = next(c for c in sub["consumers"] if c["consumerName"] == "late")
        assert joined["late"] == late_stats["readPositionWhenJoining"]
        late.close()
        first.close()

        relaxed = client.subscribe(
            topic,
            "relaxed",
            consumer_type=pulsar.ConsumerType.KeyShared,
            key_shared_policy=pulsar.ConsumerKeySharedPolicy(allow_out_of_order_delivery=True),
        )
        sub = _stats_at(broker, topic, time.monotonic())["subscriptions"]["relaxed"]
        assert sub["allowOutOfOrderDelivery"] is True
        assert sub["consumersAfterMarkDeletePosition"] == {}
        relaxed.close()


def test_consumer_stats_over_the_binary_protocol_carry_the_consumers_rates(
    broker: EmbeddedBroker, topic: str
) -> None:
    with closing(official_client(broker)) as client:
        _produce(client, topic, 0)  # creates the topic
    with connected(broker.broker_port) as cnx:
        cnx.subscribe(topic, "raw", SubType.Exclusive, 1)
        with closing(official_client(broker)) as producer_client:
            _produce(producer_client, topic, 5)
        cnx.send_command(client_commands.flow(1, 100))
        ids = []
        while len(ids) < 5:
            frame = cnx.next()
            if frame.type == T.MESSAGE:
                ids.append(frame.message.message_id)
        cnx.send_command(client_commands.ack(1, 0, ids))
        request = T(type=T.CONSUMER_STATS)
        request.consumer_stats.request_id = 9
        request.consumer_stats.consumer_id = 1
        cnx.send_command(request)
        while (reply := cnx.next()).type != T.CONSUMER_STATS_RESPONSE:
            pass
    stats = reply.consumer_stats_response
    assert stats.msgRateOut > 0  # 5 messages since the consumer came
    assert stats.msgThroughputOut > 0
    assert stats.messageAckRate > 0  # and their 5 acknowledgments
    assert stats.msgBacklog == 0
    assert stats.blockedConsumerOnUnackedMsgs is False


def test_chunked_messages_have_rates_and_mark_the_topic(tmp_path: Path, topic: str) -> None:
    # a 10 kB message size limit: a 25 kB message goes as three chunks
    with (
        EmbeddedBroker(tmp_path / "data", maxMessageSize=10_240) as broker,
        closing(official_client(broker)) as client,
    ):
        consumer = client.subscribe(
            topic, "chunks", initial_position=pulsar.InitialPosition.Earliest
        )
        producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
        before = _stats_at(broker, topic, time.monotonic())
        assert before["msgChunkPublished"] is False
        start = _tick_twice(broker, topic)
        payload = bytes(range(256)) * 100
        producer.send(payload)
        assert consumer.receive(5000).data() == payload
        chunks = _loaded(broker, topic).entries_added
        assert chunks == 3
        stats = _stats_at(broker, topic, start + 1.0)
        assert stats["msgChunkPublished"] is True
        assert stats["publishers"][0]["chunkedMessageRate"] == 3.0  # 3 chunks over 1 s
        sub = stats["subscriptions"]["chunks"]
        assert sub["consumers"][0]["chunkedMessageRate"] == 3.0
        assert sub["chunkedMessageRate"] == 3.0
        producer.close()
        consumer.close()


def test_the_delayed_message_index_reports_its_memory(broker: EmbeddedBroker, topic: str) -> None:
    with closing(official_client(broker)) as client:
        consumer = client.subscribe(
            topic,
            "later",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Earliest,
        )
        producer = client.create_producer(topic, batching_enabled=False)

        def index_bytes(held: int) -> int:
            wait_for(
                lambda: (
                    _stats_at(broker, topic, time.monotonic())["subscriptions"]["later"][
                        "msgDelayed"
                    ]
                    == held
                ),
                f"{held} messages held back",
            )
            stats = _stats_at(broker, topic, time.monotonic())
            size = stats["subscriptions"]["later"]["delayedMessageIndexSizeInBytes"]
            assert stats["delayedMessageIndexSizeInBytes"] == size  # one subscription
            return int(size)

        empty = index_bytes(0)
        for i in range(10):
            producer.send(f"d{i}".encode(), deliver_after=timedelta(hours=1))
        ten = index_bytes(10)
        for i in range(300):
            producer.send_async(f"e{i}".encode(), None, deliver_after=timedelta(hours=2))
        producer.flush()
        more = index_bytes(310)
        assert empty < ten < more
        producer.close()
        consumer.close()


def test_acknowledgment_holes_have_their_serialized_size(
    broker: EmbeddedBroker, topic: str
) -> None:
    with closing(official_client(broker)) as client:
        consumer = client.subscribe(
            topic, "holes", initial_position=pulsar.InitialPosition.Earliest
        )
        _produce(client, topic, 5)
        messages = [consumer.receive(5000) for _ in range(5)]
        consumer.acknowledge(messages[1])
        consumer.acknowledge(messages[3])
        cursor = _loaded(broker, topic).subscriptions["holes"].cursor
        wait_for(lambda: len(cursor.individually_deleted_ranges()) == 2, "two holes")
        stats = _stats_at(broker, topic, time.monotonic())
        sub = stats["subscriptions"]["holes"]
        size = serialized_ranges_size(cursor.individually_deleted_ranges())
        assert sub["nonContiguousDeletedMessagesRanges"] == 2
        assert sub["nonContiguousDeletedMessagesRangesSerializedSize"] == size > 0
        assert stats["nonContiguousDeletedMessagesRangesSerializedSize"] == size
        consumer.close()
