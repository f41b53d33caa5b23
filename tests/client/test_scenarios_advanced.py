"""More scenarios run with both clients: chunking, dead letters, batch receive, policies.

Only the module differs between the two runs, so any failure on ours is an incompatibility.
"""

from __future__ import annotations

import os
import threading
import time
import types
from typing import Any

import pytest
from official_client import subscribe_earliest

from starquake.broker.embedded import EmbeddedBroker
from starquake.common.hashes import murmur3_32_masked

BIG = 6 * 1024 * 1024  # above the broker's default maxMessageSize (5 MB): two chunks


@pytest.mark.parametrize("compression", ["NONE", "LZ4"])
def test_chunked_round_trip(
    mod: types.ModuleType, client: Any, topic: str, compression: str
) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(
        topic,
        batching_enabled=False,
        chunking_enabled=True,
        compression_type=getattr(mod.CompressionType, compression),
    )
    # Random bytes do not compress: the message stays above the limit after compression.
    payload = os.urandom(BIG)
    sent_id = producer.send(payload, properties={"p": "1"}, partition_key="pk")
    small_id = producer.send(b"small")
    msg = consumer.receive(timeout_millis=20000)
    assert msg.data() == payload
    assert msg.properties() == {"p": "1"}
    assert msg.partition_key() == "pk"
    mid = msg.message_id()
    # A chunked id: the last chunk's position, printed as "first;last", serialized with
    # first_chunk_message_id.
    ledger, entry = mid.ledger_id(), mid.entry_id()
    assert str(mid) == str(sent_id) == f"({ledger},{entry - 1},-1,-1);({ledger},{entry},-1,-1)"
    assert mid.batch_index() == -1
    assert mid.serialize() == sent_id.serialize()
    assert str(mod.MessageId.deserialize(mid.serialize())) == str(mid)
    second = consumer.receive(timeout_millis=10000)
    assert second.data() == b"small"
    assert str(second.message_id()) == str(small_id) == f"({ledger},{entry + 1},-1,-1)"
    consumer.acknowledge(msg)
    consumer.acknowledge(second)
    consumer.close()
    # Every chunk was acknowledged: nothing comes back.
    consumer = subscribe_earliest(mod, client, topic)
    with pytest.raises(mod.Timeout):
        consumer.receive(timeout_millis=500)


def test_chunked_message_redelivered_whole(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic, consumer_type=mod.ConsumerType.Shared)
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    payload = os.urandom(BIG)
    producer.send(payload)
    first = consumer.receive(timeout_millis=20000)
    consumer.close()  # not acknowledged: the broker redelivers every chunk
    consumer = subscribe_earliest(mod, client, topic, consumer_type=mod.ConsumerType.Shared)
    again = consumer.receive(timeout_millis=20000)
    assert again.data() == payload
    assert str(again.message_id()) == str(first.message_id())


def test_reader_and_seek_on_chunked_ids(mod: types.ModuleType, client: Any, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False, chunking_enabled=True)
    producer.send(b"before")
    payload = os.urandom(BIG)
    chunked_id = producer.send(payload)
    producer.send(b"after")
    start = mod.MessageId.deserialize(chunked_id.serialize())
    reader = client.create_reader(topic, start)
    assert reader.read_next(10000).data() == b"after"
    reader.close()
    reader = client.create_reader(topic, start, start_message_id_inclusive=True)
    assert reader.read_next(10000).data() == payload
    reader.close()
    consumer = subscribe_earliest(mod, client, topic, start_message_id_inclusive=True)
    assert [consumer.receive(10000).data() for _ in range(3)][1] == payload
    consumer.seek(chunked_id)
    assert consumer.receive(10000).data() == payload


def test_chunking_needs_batching_off(mod: types.ModuleType, client: Any, topic: str) -> None:
    with pytest.raises(ValueError):
        client.create_producer(topic, batching_enabled=True, chunking_enabled=True)


def test_too_big_without_chunking(mod: types.ModuleType, client: Any, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    with pytest.raises(mod.MessageTooBig):
        producer.send(os.urandom(BIG))
    producer.send(b"still usable")


def test_dead_letter_after_max_redeliveries(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(
        mod,
        client,
        topic,
        consumer_type=mod.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=mod.ConsumerDeadLetterPolicy(max_redeliver_count=2),
    )
    producer = client.create_producer(topic)
    first_id = producer.send(b"poison", properties={"k": "v"}, partition_key="pk")
    producer.send(b"fine")
    counts = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=800)
        except mod.Timeout:
            break
        if msg.data() == b"fine":
            consumer.acknowledge(msg)
            continue
        counts.append(msg.redelivery_count())
        consumer.negative_acknowledge(msg)
    # Delivered with redelivery counts 0..max, then published to the DLQ instead.
    assert counts == [0, 1, 2]
    dlq = subscribe_earliest(mod, client, f"{topic}-sub-DLQ", "dlq-reader")
    dead = dlq.receive(timeout_millis=5000)
    assert dead.data() == b"poison"
    assert dead.partition_key() == "pk"
    props = dead.properties()
    assert props["k"] == "v"
    assert props["REAL_TOPIC"] == topic
    assert props["ORIGIN_MESSAGE_ID"] == str(first_id)
    consumer.close()
    consumer = subscribe_earliest(mod, client, topic, consumer_type=mod.ConsumerType.Shared)
    with pytest.raises(mod.Timeout):  # the original was acknowledged
        consumer.receive(timeout_millis=500)


def test_dead_letter_named_topic(mod: types.ModuleType, client: Any, topic: str) -> None:
    dead_topic = f"{topic}-graveyard"
    consumer = subscribe_earliest(
        mod,
        client,
        topic,
        consumer_type=mod.ConsumerType.KeyShared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=mod.ConsumerDeadLetterPolicy(1, dead_letter_topic=dead_topic),
    )
    reader = subscribe_earliest(mod, client, dead_topic, "dlq-reader")
    client.create_producer(topic).send(b"bad", partition_key="k")
    for expected in (0, 1):
        msg = consumer.receive(timeout_millis=5000)
        assert msg.redelivery_count() == expected
        consumer.negative_acknowledge(msg)
    assert reader.receive(timeout_millis=5000).data() == b"bad"


def test_dead_letter_topic_per_partition(
    mod: types.ModuleType, client: Any, broker: EmbeddedBroker, topic: str
) -> None:
    broker.create_partitioned_topic(topic, 2)
    consumer = subscribe_earliest(
        mod,
        client,
        topic,
        consumer_type=mod.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=mod.ConsumerDeadLetterPolicy(1),
    )
    sent = client.create_producer(topic).send(b"bad", partition_key="k")
    for _ in range(2):
        msg = consumer.receive(timeout_millis=5000)
        consumer.negative_acknowledge(msg)
    partition = f"{topic}-partition-{sent.partition()}"
    # The default dead letter topic is named after the partition the message came from.
    dlq = subscribe_earliest(mod, client, f"{partition}-sub-DLQ", "dlq-reader")
    dead = dlq.receive(timeout_millis=5000)
    assert dead.properties()["REAL_TOPIC"] == partition
    assert dead.properties()["ORIGIN_MESSAGE_ID"] == str(sent)


def test_dead_letter_batched_messages(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(
        mod,
        client,
        topic,
        consumer_type=mod.ConsumerType.Shared,
        negative_ack_redelivery_delay_ms=100,
        dead_letter_policy=mod.ConsumerDeadLetterPolicy(1),
    )
    dlq = subscribe_earliest(mod, client, f"{topic}-sub-DLQ", "dlq-reader")
    producer = client.create_producer(topic, batching_enabled=True)
    for i in range(3):
        producer.send_async(f"m{i}".encode(), None)
    producer.flush()
    for _ in range(2):  # deliveries with redelivery count 0 and 1
        for _ in range(3):
            consumer.negative_acknowledge(consumer.receive(timeout_millis=5000))
    dead = sorted(dlq.receive(timeout_millis=5000).data() for _ in range(3))
    assert dead == [b"m0", b"m1", b"m2"]
    with pytest.raises(mod.Timeout):
        consumer.receive(timeout_millis=500)


def test_dead_letter_policy_arguments(mod: types.ModuleType) -> None:
    policy = mod.ConsumerDeadLetterPolicy(3)
    assert (policy.max_redeliver_count, policy.dead_letter_topic) == (3, "")
    assert policy.initial_subscription_name == ""
    named = mod.ConsumerDeadLetterPolicy(5, "dlq", "init")
    assert (named.dead_letter_topic, named.initial_subscription_name) == ("dlq", "init")
    for bad in (0, -1):
        with pytest.raises(ValueError):
            mod.ConsumerDeadLetterPolicy(bad)


def test_unacked_timeout_minimum(mod: types.ModuleType, client: Any, topic: str) -> None:
    with pytest.raises(ValueError):
        subscribe_earliest(mod, client, topic, unacked_messages_timeout_ms=5000)
    consumer = subscribe_earliest(mod, client, topic, unacked_messages_timeout_ms=10000)
    consumer.close()


def test_batch_receive(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(
        mod, client, topic, batch_receive_policy=mod.ConsumerBatchReceivePolicy(5, -1, 1500)
    )
    producer = client.create_producer(topic)
    for i in range(12):
        producer.send(f"m{i}".encode())
    # a batch is handed over at 5 messages or after 1.5 s: two full batches, then the rest
    # at the timeout, however slowly the 12 messages arrive (short of 1.5 s)
    got: list[bytes] = []
    sizes = []
    while len(got) < 12:
        batch = consumer.batch_receive()
        sizes.append(len(batch))
        got.extend(m.data() for m in batch)
        for msg in batch:
            consumer.acknowledge(msg)
    assert got == [f"m{i}".encode() for i in range(12)]
    assert sizes == [5, 5, 2]
    start = time.monotonic()
    assert list(consumer.batch_receive()) == []  # nothing within the timeout
    assert 1.4 < time.monotonic() - start < 10


def test_batch_receive_default_policy(mod: types.ModuleType, client: Any, topic: str) -> None:
    consumer = subscribe_earliest(mod, client, topic)
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    got: list[bytes] = []
    deadline = time.monotonic() + 5
    while len(got) < 3 and time.monotonic() < deadline:
        got.extend(m.data() for m in consumer.batch_receive())
    assert got == [b"m0", b"m1", b"m2"]


def test_batch_receive_policy_arguments(mod: types.ModuleType) -> None:
    with pytest.raises(ValueError):
        mod.ConsumerBatchReceivePolicy(0, 0, 0)
    with pytest.raises(ValueError):
        mod.ConsumerBatchReceivePolicy(-1, -1, -1)
    policy = mod.ConsumerBatchReceivePolicy(-1, -1, 100).policy()
    assert (policy.getMaxNumMessages(), policy.getMaxNumBytes(), policy.getTimeoutMs()) == (
        -1,
        10 * 1024 * 1024,
        100,
    )
    policy = mod.ConsumerBatchReceivePolicy(10, -1, -1).policy()
    assert (policy.getMaxNumMessages(), policy.getMaxNumBytes()) == (10, -1)


def test_key_shared_policy_arguments(mod: types.ModuleType) -> None:
    sticky = mod.KeySharedMode.Sticky
    with pytest.raises(ValueError):
        mod.ConsumerKeySharedPolicy(sticky)  # sticky needs ranges
    for bad in ([], [(0, 70000)], [(0, 10), (5, 20)], [(-1, 5)]):
        with pytest.raises(ValueError):
            mod.ConsumerKeySharedPolicy(sticky, False, bad)
    policy = mod.ConsumerKeySharedPolicy(sticky, True, [(0, 100), (200, 300)])
    assert policy.key_shared_mode == sticky
    assert policy.allow_out_of_order_delivery is True
    assert list(policy.sticky_ranges) == [(0, 100), (200, 300)]
    assert mod.ConsumerKeySharedPolicy().key_shared_mode == mod.KeySharedMode.AutoSplit


def test_key_shared_sticky_ranges(
    mod: types.ModuleType, client: Any, broker: EmbeddedBroker, topic: str
) -> None:
    kw: dict[str, Any] = {"consumer_type": mod.ConsumerType.KeyShared}
    sticky = mod.KeySharedMode.Sticky
    low = subscribe_earliest(
        mod,
        client,
        topic,
        key_shared_policy=mod.ConsumerKeySharedPolicy(sticky, False, [(0, 32767)]),
        **kw,
    )
    high = subscribe_earliest(
        mod,
        client,
        topic,
        key_shared_policy=mod.ConsumerKeySharedPolicy(sticky, False, [(32768, 65535)]),
        **kw,
    )
    with pytest.raises(mod.ConsumerAssignError):  # overlaps both
        subscribe_earliest(
            mod,
            client,
            topic,
            key_shared_policy=mod.ConsumerKeySharedPolicy(sticky, False, [(30000, 40000)]),
            **kw,
        )
    producer = client.create_producer(topic)
    keys = [f"key-{i}" for i in range(20)]
    for key in keys:
        producer.send(key.encode(), partition_key=key)
    owner: dict[str, str] = {}
    for name, consumer in (("low", low), ("high", high)):
        while True:
            try:
                msg = consumer.receive(timeout_millis=500)
            except mod.Timeout:
                break
            owner[msg.partition_key()] = name
            consumer.acknowledge(msg)
    assert sorted(owner) == sorted(keys)
    for key, name in owner.items():
        slot = murmur3_32_masked(key.encode()) % 65536
        assert name == ("low" if slot <= 32767 else "high"), key


def test_access_modes(mod: types.ModuleType, broker: EmbeddedBroker, topic: str) -> None:
    """Exclusive refuses a second producer; WaitForExclusive waits for the holder to leave."""
    c = mod.Client(
        broker.service_url,
        operation_timeout_seconds=10,
        logger=mod.ConsoleLogger(mod.LoggerLevel.Error),
    )
    try:
        holder = c.create_producer(topic, access_mode=mod.ProducerAccessMode.Exclusive)
        with pytest.raises(mod.PulsarException):
            c.create_producer(topic, access_mode=mod.ProducerAccessMode.Exclusive)
        waited: dict[str, Any] = {}

        def wait() -> None:
            waited["p"] = c.create_producer(
                topic, access_mode=mod.ProducerAccessMode.WaitForExclusive
            )

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(1.0)
        assert "p" not in waited
        holder.close()
        thread.join(10)
        assert "p" in waited
        waited["p"].send(b"leader")
    finally:
        c.close()


def test_reader_on_partitioned_topic(
    mod: types.ModuleType, client: Any, broker: EmbeddedBroker, topic: str
) -> None:
    broker.create_partitioned_topic(topic, 3)
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(9):
        producer.send(f"m{i}".encode(), partition_key=f"key-{i}")
    reader = client.create_reader(topic, mod.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(5000).data())
    assert sorted(got) == [f"m{i}".encode() for i in range(9)]
