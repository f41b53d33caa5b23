"""The blocking API's hand-over to the I/O thread: sends, receives and acks that do not wait
for the event loop (Starquake only: they look at the blocking layer's internals).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker


def _no_round_trip(*_args: Any) -> Any:
    raise AssertionError("this call must not wait for the I/O thread")


def test_send_async_blocks_the_caller_while_the_queue_is_full(
    broker: EmbeddedBroker, topic: str
) -> None:
    client = sq.Client(broker.service_url)
    try:
        producer = client.create_producer(
            topic,
            block_if_queue_full=True,
            max_pending_messages=5,
            batching_enabled=True,
            batching_max_publish_delay_ms=60_000,  # nothing completes until we flush
        )
        results: list[tuple[int, Any, Any]] = []

        def callback_for(i: int) -> Any:
            return lambda res, mid: results.append((i, res, mid))

        sixth_sent = threading.Event()

        def send_six() -> None:
            for i in range(6):
                producer.send_async(f"m{i}".encode(), callback_for(i))
            sixth_sent.set()

        sender = threading.Thread(target=send_six)
        sender.start()
        assert not sixth_sent.wait(0.5), "the 6th send_async must wait for a free slot"
        assert results == []
        producer.flush()  # the 5 complete, which frees slots for the 6th
        assert sixth_sent.wait(10)
        sender.join(10)
        producer.flush()
        assert [i for i, _, _ in results] == list(range(6))
        assert all(res == sq.Result.Ok for _, res, _ in results)
        assert producer.last_sequence_id() == 5
    finally:
        client.close()


def test_send_with_a_full_queue_raises_at_once_without_blocking(
    broker: EmbeddedBroker, topic: str
) -> None:
    client = sq.Client(broker.service_url)
    try:
        producer = client.create_producer(
            topic,
            max_pending_messages=2,
            batching_enabled=True,
            batching_max_publish_delay_ms=60_000,
        )
        producer.send_async(b"a", None)
        producer.send_async(b"b", None)
        start = time.monotonic()
        with pytest.raises(sq.ProducerQueueIsFull):
            producer.send(b"c")
        assert time.monotonic() - start < 1
        producer.flush()
        results: list[Any] = []
        producer.send_async(b"d", lambda res, _mid: results.append(res))
        producer.flush()
        assert results == [sq.Result.Ok]
    finally:
        client.close()


def test_send_async_from_two_threads_keeps_each_threads_order(
    broker: EmbeddedBroker, topic: str
) -> None:
    client = sq.Client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "s", initial_position=sq.InitialPosition.Earliest)
        producer = client.create_producer(
            topic, batching_enabled=True, block_if_queue_full=True, max_pending_messages=50
        )
        count = 500
        ids: dict[str, list[sq.MessageId]] = {"a": [], "b": []}
        failures: list[Any] = []

        def send(name: str) -> None:
            def callback(res: Any, mid: Any) -> None:
                if res != sq.Result.Ok:
                    failures.append(res)
                else:
                    ids[name].append(mid)

            for i in range(count):
                producer.send_async(f"{name}-{i}".encode(), callback)

        threads = [threading.Thread(target=send, args=(name,)) for name in ids]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        producer.flush()
        assert failures == []
        for name in ids:
            assert len(ids[name]) == count
            assert ids[name] == sorted(ids[name])  # callbacks in send order, ids increasing
        assert producer.last_sequence_id() == 2 * count - 1
        received: dict[str, list[int]] = {"a": [], "b": []}
        for _ in range(2 * count):
            name, index = consumer.receive(5000).data().decode().split("-")
            received[name].append(int(index))
        assert received == {name: list(range(count)) for name in received}
    finally:
        client.close()


def test_receive_takes_queued_messages_without_a_round_trip(
    broker: EmbeddedBroker, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = sq.Client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "s")
        producer = client.create_producer(topic)
        for i in range(3):
            producer.send(f"m{i}".encode())
        deadline = time.monotonic() + 5
        while len(consumer._queue) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        monkeypatch.setattr(consumer._runner, "run", _no_round_trip)
        assert [consumer.receive(0).data() for _ in range(3)] == [b"m0", b"m1", b"m2"]
        start = time.monotonic()
        with pytest.raises(sq.Timeout):
            consumer.receive(200)
        assert 0.15 < time.monotonic() - start < 2
        monkeypatch.undo()

        later = threading.Timer(0.2, producer.send, args=(b"late",))
        later.start()
        assert consumer.receive(10_000).data() == b"late"  # woken up by the I/O thread
        later.join()
    finally:
        client.close()


def test_small_receiver_queue_gets_permits_back(broker: EmbeddedBroker, topic: str) -> None:
    client = sq.Client(broker.service_url)
    try:
        consumer = client.subscribe(topic, "s", receiver_queue_size=4)
        producer = client.create_producer(topic, batching_enabled=True)
        for i in range(100):
            producer.send_async(f"m{i}".encode(), None)
        producer.flush()
        got = []
        for _ in range(100):
            msg = consumer.receive(5000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert got == [f"m{i}".encode() for i in range(100)]
    finally:
        client.close()


def test_acks_do_not_wait_and_close_sends_them(
    broker: EmbeddedBroker, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = sq.Client(broker.service_url)
    try:
        consumer = client.subscribe(
            topic,
            "s",
            consumer_type=sq.ConsumerType.Shared,
            initial_position=sq.InitialPosition.Earliest,
        )
        producer = client.create_producer(topic)
        for i in range(10):
            producer.send(f"m{i}".encode())
        messages = [consumer.receive(5000) for _ in range(10)]
        with monkeypatch.context() as patch:
            patch.setattr(consumer._runner, "run", _no_round_trip)
            for msg in messages:
                consumer.acknowledge(msg)
            consumer.negative_acknowledge(messages[0].message_id())  # acked already: no-op
            with pytest.raises(sq.CumulativeAcknowledgementNotAllowedError):
                consumer.acknowledge_cumulative(messages[-1])
            with pytest.raises(TypeError):  # as the official client
                consumer.acknowledge("not a message")
        consumer.close()  # flushes the acks queued above
        with pytest.raises(sq.AlreadyClosed):
            consumer.acknowledge(messages[0])

        again = client.subscribe(topic, "s", consumer_type=sq.ConsumerType.Shared)
        with pytest.raises(sq.Timeout):
            again.receive(500)
    finally:
        client.close()


def test_reader_and_batch_receive_use_the_fast_path(broker: EmbeddedBroker, topic: str) -> None:
    client = sq.Client(broker.service_url)
    try:
        producer = client.create_producer(topic)
        for i in range(5):
            producer.send(f"m{i}".encode())
        reader = client.create_reader(topic, sq.MessageId.earliest)
        assert reader.read_next(5000).data() == b"m0"
        assert reader.has_message_available()
        for i in range(1, 5):
            assert reader.read_next(5000).data() == f"m{i}".encode()
        assert not reader.has_message_available()

        consumer = client.subscribe(
            topic,
            "b",
            initial_position=sq.InitialPosition.Earliest,
            batch_receive_policy=sq.ConsumerBatchReceivePolicy(5, -1, 5000),
        )
        batch = consumer.batch_receive()
        assert [m.data() for m in batch] == [f"m{i}".encode() for i in range(5)]
    finally:
        client.close()


def test_client_close_wakes_a_blocked_receive(broker: EmbeddedBroker, topic: str) -> None:
    client = sq.Client(broker.service_url)
    consumer = client.subscribe(topic, "s")
    errors: list[BaseException] = []

    def receive() -> None:
        try:
            consumer.receive()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=receive)
    thread.start()
    time.sleep(0.2)
    client.close()
    thread.join(10)
    assert not thread.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], sq.AlreadyClosed)


def test_blocking_receive_from_a_callback_raises(
    broker: EmbeddedBroker, topic: str, topic_factory: Any
) -> None:
    client = sq.Client(broker.service_url)
    try:
        consumer = client.subscribe(topic_factory("empty"), "s")
        producer = client.create_producer(topic)
        errors: list[BaseException] = []
        done = threading.Event()

        def callback(_res: Any, _mid: Any) -> None:
            try:
                consumer.receive(100)
            except BaseException as exc:
                errors.append(exc)
            done.set()

        producer.send_async(b"x", callback)
        assert done.wait(10)
        assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    finally:
        client.close()
