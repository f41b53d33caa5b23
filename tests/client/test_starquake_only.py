"""Behaviour of our client that the shared scenarios do not cover."""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from typing import Any

import pytest

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.client import asyncio as sqa
from starquake.client.base._config import ProducerConfig
from starquake.client.producer._partitioned import MessageRouter
from starquake.client.producer._producer import OutgoingMessage


def test_asyncio_api(broker: EmbeddedBroker, topic: str) -> None:
    async def main() -> None:
        client = sqa.Client(broker.service_url, operation_timeout_seconds=10)
        consumer = await client.subscribe(topic, "s", initial_position=sq.InitialPosition.Earliest)
        producer = await client.create_producer(topic)  # batching on by default here
        ids = await asyncio.gather(*(producer.send(f"m{i}".encode()) for i in range(10)))
        assert any(mid.batch_index() > 0 for mid in ids)
        for i in range(10):
            msg = await consumer.receive()
            assert msg.data() == f"m{i}".encode()
            await consumer.acknowledge(msg)
        with pytest.raises(sq.Timeout):
            await consumer.receive(timeout_millis=100)
        reader = await client.create_reader(topic, sq.MessageId.earliest)
        assert await reader.has_message_available()
        assert (await reader.read_next()).data() == b"m0"
        await client.close()

    asyncio.run(main())


def test_queue_full_raises_and_callback_reports(broker: EmbeddedBroker, topic: str) -> None:
    client = sq.Client(broker.service_url)
    try:
        producer = client.create_producer(
            topic, batching_enabled=True, batching_max_publish_delay_ms=5000, max_pending_messages=3
        )
        results: list[Any] = []
        for i in range(5):
            producer.send_async(f"m{i}".encode(), lambda res, _mid: results.append(res))
        producer.flush()
        assert results.count(sq.Result.ProducerQueueIsFull) == 2
        assert results.count(sq.Result.Ok) == 3
        with pytest.raises(sq.ProducerQueueIsFull):
            for i in range(5):
                producer._runner.run(_send_nowait(producer, i))
    finally:
        client.close()


async def _send_nowait(producer: Any, i: int) -> None:
    producer._inner.impl.send_nowait(OutgoingMessage(f"x{i}".encode()))


def test_block_if_queue_full(broker: EmbeddedBroker, topic: str) -> None:
    client = sq.Client(broker.service_url)
    try:
        producer = client.create_producer(topic, max_pending_messages=2, block_if_queue_full=True)
        results: list[Any] = []
        for i in range(20):
            producer.send_async(f"m{i}".encode(), lambda res, _mid: results.append(res))
        producer.flush()
        assert results == [sq.Result.Ok] * 20
    finally:
        client.close()


def test_send_timeout_when_broker_is_gone(tmp_path: Any) -> None:
    broker = EmbeddedBroker(tmp_path / "d").start()
    client = sq.Client(broker.service_url, operation_timeout_seconds=5)
    try:
        producer = client.create_producer(
            "persistent://public/default/gone", send_timeout_millis=500
        )
        broker.stop()
        with pytest.raises(sq.Timeout):
            producer.send(b"never")
    finally:
        client.close()
        broker.stop()


def test_connect_failure_times_out() -> None:
    client = sq.Client("pulsar://127.0.0.1:1", operation_timeout_seconds=1)
    try:
        start = time.monotonic()
        with pytest.raises(sq.Timeout):
            client.create_producer("t")
        assert time.monotonic() - start < 5
    finally:
        client.close()


def test_regex_discovers_new_topics(broker: EmbeddedBroker) -> None:
    prefix = f"disc-{uuid.uuid4().hex[:8]}"
    client = sq.Client(broker.service_url)
    try:
        client.create_producer(f"{prefix}-a").send(b"a")
        consumer = client.subscribe(
            re.compile(f"persistent://public/default/{prefix}-.*"),
            "s",
            initial_position=sq.InitialPosition.Earliest,
            pattern_auto_discovery_period=1,
        )
        assert consumer.receive(5000).data() == b"a"
        late = client.create_producer(f"{prefix}-b")
        late.send(b"ignored-before-subscribe?")
        msg = consumer.receive(10000)
        assert msg.topic_name().endswith(f"{prefix}-b")
    finally:
        client.close()


def test_ack_of_batch_waits_for_all_indexes(broker: EmbeddedBroker, topic: str) -> None:
    client = sq.Client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "s", initial_position=sq.InitialPosition.Earliest)
        producer = client.create_producer(topic, batching_enabled=True)
        for i in range(3):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        msgs = [consumer.receive(5000) for _ in range(3)]
        consumer.acknowledge(msgs[0])
        consumer.acknowledge(msgs[2])
        consumer.close()
        consumer = client.subscribe(topic, "s")
        again = [consumer.receive(5000).data() for _ in range(3)]
        assert again == [b"m0", b"m1", b"m2"]  # whole batch redelivered: index 1 was not acked
        for m in msgs:
            consumer.acknowledge(m.message_id())
    finally:
        client.close()


class _FakeClock:
    """A monotonic clock that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_round_robin_switches_at_batch_boundaries() -> None:
    clock = _FakeClock()
    config = ProducerConfig(
        batching_enabled=True, batching_max_messages=4, batching_max_publish_delay_ms=10
    )
    router = MessageRouter(config, clock=clock)
    picks = [router.choose(OutgoingMessage(b"x"), 5) for _ in range(12)]
    start = picks[0]
    # a full batch (4 messages) stays on one partition, the fifth message moves on
    assert picks == [(start + i // 4) % 5 for i in range(12)]
    timed = MessageRouter(config, clock=clock)
    first = timed.choose(OutgoingMessage(b"x"), 5)
    clock.now += 0.009  # under the 10 ms batching delay: same partition
    assert timed.choose(OutgoingMessage(b"x"), 5) == first
    clock.now += 0.001  # the delay has elapsed since the partition was chosen: next one
    assert timed.choose(OutgoingMessage(b"x"), 5) == (first + 1) % 5
    sized = MessageRouter(
        ProducerConfig(
            batching_enabled=True,
            batching_max_messages=1000,
            batching_max_allowed_size_in_bytes=10,
        ),
        clock=clock,
    )
    first = sized.choose(OutgoingMessage(b"12345"), 5)
    assert sized.choose(OutgoingMessage(b"12345"), 5) == first  # 10 bytes: still fits
    assert sized.choose(OutgoingMessage(b"1"), 5) == (first + 1) % 5  # 11 bytes: next batch
    single = MessageRouter(
        ProducerConfig(message_routing_mode=sq.PartitionsRoutingMode.UseSinglePartition)
    )
    assert len({single.choose(OutgoingMessage(b"x"), 5) for _ in range(20)}) == 1
    custom = MessageRouter(ProducerConfig(message_router=lambda msg, n: len(msg.data()) % n))
    assert custom.choose(OutgoingMessage(b"abc"), 2) == 1


def test_hashing_schemes() -> None:
    def pick(scheme: sq.HashingScheme, key: str) -> int:
        return MessageRouter(ProducerConfig(hashing_scheme=scheme)).choose(
            OutgoingMessage(b"", partition_key=key), 7
        )

    # Partitions the official Python client (BoostHash, its default) picks out of 7.
    observed = {"k1": 6, "k2": 1, "key1": 1, "key2": 6, "a": 4, "hello": 5, "日本": 0}
    for key, partition in observed.items():
        assert pick(sq.HashingScheme.BoostHash, key) == partition
    assert pick(sq.HashingScheme.JavaStringHash, "key1") == 3288498 % 7
    assert pick(sq.HashingScheme.Murmur3_32Hash, "key1") == 462881061 % 7


def test_exception_tree() -> None:
    assert issubclass(sq.Timeout, sq.PulsarException)
    assert sq.ConsumerBusy("x").error() == sq.Result.ConsumerBusy
    assert sq.CumulativeAcknowledgementNotAllowedError.result == 37


def test_wait_for_exclusive_has_no_time_limit(broker: EmbeddedBroker, topic: str) -> None:
    """SPEC: WaitForExclusive creation waits without timing out (the official Python wrapper
    gives up after its operation timeout; ours follows the spec and Pulsar's Java client)."""
    c = sq.Client(broker.service_url, operation_timeout_seconds=1)
    try:
        holder = c.create_producer(topic, access_mode=sq.ProducerAccessMode.Exclusive)
        waited: dict[str, sq.Producer] = {}

        def wait() -> None:
            waited["p"] = c.create_producer(
                topic, access_mode=sq.ProducerAccessMode.WaitForExclusive
            )

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(2.5)  # well past the operation timeout
        assert "p" not in waited
        holder.close()
        thread.join(10)
        assert "p" in waited
    finally:
        c.close()
