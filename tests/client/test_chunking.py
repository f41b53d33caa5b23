"""Chunked messages beyond what the shared scenarios can arrange (our client only).

A broker with a small ``maxMessageSize`` keeps the payloads small. To interleave the chunks of
two messages deterministically, each producer's frames are captured instead of written, then
written to the real connection in the wanted order (receipts still reach the producers).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from itertools import zip_longest
from pathlib import Path

import pytest

import starquake.client as sq
from starquake.broker.embedded import EmbeddedBroker
from starquake.client import asyncio as sqa
from starquake.client.base._message import MessageId
from starquake.client.core._chunks import ChunkAssembler, chunk_count
from starquake.client.producer._producer import OutgoingMessage, ProducerImpl
from starquake.protocol._generated import starquake_wire_pb2 as pb

MAX = 10_000  # the small_broker fixture's maxMessageSize


class _Capture:
    """Stands in for a producer's connection: keeps the frames it is asked to write."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.frames.append(data)


def _impl(producer: sqa.Producer) -> ProducerImpl:
    impl = producer._impl
    assert isinstance(impl, ProducerImpl)
    return impl


def _capture_send(
    producer: sqa.Producer, payload: bytes
) -> tuple[list[bytes], asyncio.Future[MessageId]]:
    impl = _impl(producer)
    real, capture = impl._cnx, _Capture()
    impl._cnx = capture  # type: ignore[assignment]
    try:
        fut = impl.send_nowait(OutgoingMessage(payload))
    finally:
        impl._cnx = real
    return capture.frames, fut


def _write(producer: sqa.Producer, frames: list[bytes]) -> None:
    cnx = _impl(producer)._cnx
    assert cnx is not None
    for frame in frames:
        cnx.write(frame)


def _run(broker: EmbeddedBroker, body: Callable[[sqa.Client], Awaitable[None]]) -> None:
    async def main() -> None:
        client = sqa.Client(broker.service_url, operation_timeout_seconds=10)
        try:
            await body(client)
        finally:
            await client.close()

    asyncio.run(main())


async def _chunked_producer(client: sqa.Client, topic: str, name: str) -> sqa.Producer:
    return await client.create_producer(
        topic, producer_name=name, batching_enabled=False, chunking_enabled=True
    )


def test_chunks_use_the_brokers_max_message_size(small_broker: EmbeddedBroker, topic: str) -> None:
    async def body(client: sqa.Client) -> None:
        producer = await _chunked_producer(client, topic, "p")
        frames, fut = _capture_send(producer, os.urandom(35_000))
        assert len(frames) == 4  # 35 000 bytes in chunks of a little under 10 000
        _write(producer, frames)
        mid = await fut
        assert mid.first_chunk_message_id is not None
        assert len(mid.chunk_message_ids) == 4
        assert producer.last_sequence_id() == 0  # one message, one sequence id
        with pytest.raises(sq.MessageTooBig):
            plain = await client.create_producer(topic, batching_enabled=False)
            await plain.send(os.urandom(MAX + 1))

    _run(small_broker, body)


def test_interleaved_chunked_messages(small_broker: EmbeddedBroker, topic: str) -> None:
    async def body(client: sqa.Client) -> None:
        consumer = await client.subscribe(topic, "s", initial_position=sq.InitialPosition.Earliest)
        p1 = await _chunked_producer(client, topic, "p1")
        p2 = await _chunked_producer(client, topic, "p2")
        a, b = os.urandom(30_000), os.urandom(25_000)
        frames_a, fut_a = _capture_send(p1, a)
        frames_b, fut_b = _capture_send(p2, b)
        for fa, fb in zip_longest(frames_a, frames_b):
            if fa is not None:
                _write(p1, [fa])
            if fb is not None:
                _write(p2, [fb])
        await asyncio.gather(fut_a, fut_b)
        first = await consumer.receive(5000)
        second = await consumer.receive(5000)
        assert {first.data(), second.data()} == {a, b}
        assert {first.producer_name(), second.producer_name()} == {"p1", "p2"}
        for msg in (first, second):
            await consumer.acknowledge(msg)
        await consumer.close()
        again = await client.subscribe(topic, "s")
        with pytest.raises(sq.Timeout):
            await again.receive(300)

    _run(small_broker, body)


@pytest.mark.parametrize("auto_ack", [True, False], ids=["auto-ack", "redeliver"])
def test_max_pending_chunked_message(
    small_broker: EmbeddedBroker, topic: str, auto_ack: bool
) -> None:
    async def body(client: sqa.Client) -> None:
        consumer = await client.subscribe(
            topic,
            "s",
            consumer_type=sq.ConsumerType.Shared,
            initial_position=sq.InitialPosition.Earliest,
            negative_ack_redelivery_delay_ms=100,
            max_pending_chunked_message=1,
            auto_ack_oldest_chunked_message_on_queue_full=auto_ack,
        )
        p1 = await _chunked_producer(client, topic, "p1")
        p2 = await _chunked_producer(client, topic, "p2")
        a, b = os.urandom(25_000), os.urandom(25_000)
        frames_a, fut_a = _capture_send(p1, a)
        frames_b, fut_b = _capture_send(p2, b)
        # a0 b0 a1 b1 a2 b2: b0 pushes "a" out of the single buffer slot.
        for fa, fb in zip(frames_a, frames_b, strict=True):
            _write(p1, [fa])
            _write(p2, [fb])
        await asyncio.gather(fut_a, fut_b)
        got = await consumer.receive(5000)
        assert got.data() == b
        await consumer.acknowledge(got)
        if auto_ack:  # "a" was acknowledged silently: it never comes
            with pytest.raises(sq.Timeout):
                await consumer.receive(600)
        else:  # "a" was handed back to the broker and arrives whole
            again = await consumer.receive(5000)
            assert again.data() == a
            await consumer.acknowledge(again)
        await consumer.close()
        fresh = await client.subscribe(topic, "s", consumer_type=sq.ConsumerType.Shared)
        with pytest.raises(sq.Timeout):
            await fresh.receive(300)

    _run(small_broker, body)


def test_incomplete_chunked_message_expires(small_broker: EmbeddedBroker, topic: str) -> None:
    async def body(client: sqa.Client) -> None:
        consumer = await client.subscribe(
            topic,
            "s",
            initial_position=sq.InitialPosition.Earliest,
            expire_time_of_incomplete_chunked_message_ms=200,
        )
        producer = await _chunked_producer(client, topic, "p")
        frames, fut = _capture_send(producer, os.urandom(25_000))
        _write(producer, frames[:1])
        await asyncio.sleep(0.6)  # chunk 0 expires and is acknowledged
        _write(producer, frames[1:])  # the rest is recognised as belonging to it
        await fut
        await (await client.create_producer(topic)).send(b"next")
        assert (await consumer.receive(5000)).data() == b"next"
        await consumer.close()
        again = await client.subscribe(topic, "s")
        msg = await again.receive(2000)
        assert msg.data() == b"next"  # every chunk was acknowledged

    _run(small_broker, body)


def test_broker_with_a_larger_max_message_size(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "big", maxMessageSize=8 * 1024 * 1024) as broker:

        async def body(client: sqa.Client) -> None:
            consumer = await client.subscribe(topic, "s")
            producer = await client.create_producer(
                topic, batching_enabled=False, chunking_enabled=True
            )
            payload = os.urandom(7 * 1024 * 1024)  # one frame: under the broker's limit
            mid = await producer.send(payload)
            assert mid.first_chunk_message_id is None
            assert (await consumer.receive(10000)).data() == payload

        _run(broker, body)


# --- the assembler alone ------------------------------------------------------------------


def _meta(uuid: str, chunk_id: int, num: int, total: int) -> pb.MessageMetadata:
    return pb.MessageMetadata(
        producer_name="p",
        sequence_id=0,
        publish_time=1,
        uuid=uuid,
        chunk_id=chunk_id,
        num_chunks_from_msg=num,
        total_chunk_msg_size=total,
    )


def test_assembler_rules() -> None:
    discarded: list[tuple[list[str], bool]] = []

    def discard(ids: list[MessageId], ack: bool) -> None:
        discarded.append(([str(i) for i in ids], ack))

    asm = ChunkAssembler(2, True, 0, discard)
    mid = [MessageId.from_parts(1, i) for i in range(10)]
    assert asm.add(_meta("a", 0, 2, 4), b"aa", mid[0]) is None
    assert asm.add(_meta("a", 0, 2, 4), b"aa", mid[0]) is None  # chunk 0 again: restart
    assert asm.add(_meta("b", 1, 2, 4), b"bb", mid[1]) is None  # unknown message: dropped
    assert asm.add(_meta("c", 0, 2, 4), b"cc", mid[2]) is None
    assert asm.add(_meta("d", 0, 2, 4), b"dd", mid[3]) is None  # evicts "a" (auto-ack)
    assert discarded == [(["(1,0,-1,-1)"], True)]
    assert asm.add(_meta("a", 1, 2, 4), b"AA", mid[4]) is None  # late chunk of "a": acked
    assert discarded[-1] == (["(1,4,-1,-1)"], True)
    whole = asm.add(_meta("c", 1, 2, 4), b"CC", mid[5])
    assert whole is not None
    assert whole[0] == b"ccCC"
    assert [str(i) for i in whole[1]] == ["(1,2,-1,-1)", "(1,5,-1,-1)"]
    assert asm.add(_meta("d", 3, 4, 8), b"??", mid[6]) is None  # gap: "d" is abandoned
    assert len(asm) == 0


def test_chunk_count() -> None:
    assert chunk_count(10, 10) == 1
    assert chunk_count(11, 10) == 2
    assert chunk_count(30, 10) == 3
    assert chunk_count(5, 0) == 1


def test_chunked_message_id() -> None:
    chunks = [MessageId.from_parts(3, 7), MessageId.from_parts(3, 9), MessageId.from_parts(3, 12)]
    mid = MessageId.from_chunks(chunks)
    assert str(mid) == "(3,7,-1,-1);(3,12,-1,-1)"
    assert (mid.ledger_id(), mid.entry_id()) == (3, 12)
    back = MessageId.deserialize(mid.serialize())
    assert str(back) == str(mid)
    assert [str(c) for c in back.chunk_message_ids] == ["(3,7,-1,-1)", "(3,12,-1,-1)"]
    assert mid == MessageId.from_parts(3, 12)
