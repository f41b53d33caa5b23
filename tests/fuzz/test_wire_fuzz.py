"""Generated hostile frames against one live broker while a well-behaved client keeps working.

Every example opens its own raw connection. Properties: the broker answers a following PING with
a PONG or closes that connection (it never hangs), nothing it runs logs an error, a closed
connection leaves no state behind, and an official client producing and consuming on another
topic throughout gets every message, in order.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from official_client import official_client
from wire_strategies import (
    ALL_TYPES,
    FUZZ_TOPICS,
    SMALL_IDS,
    RawPeer,
    encode_raw_command_with_entry,
    entries,
    random_command,
)

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import FRAME_PADDING, encode_command

T = pb.BaseCommand
HEALTHY_TOPIC = "persistent://public/default/healthy-under-fuzz"
FUZZ = settings(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


class ErrorRecords(logging.Handler):
    """Collects log records at ERROR and above, from any logger."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def take(self) -> list[str]:
        taken = [f"{r.name}: {r.getMessage()}" for r in self.records]
        self.records.clear()
        return taken


@dataclass
class Healthy:
    """An official client producing and consuming on its own topic, in two threads."""

    broker: EmbeddedBroker
    stop: threading.Event = field(default_factory=threading.Event)
    sent: list[bytes] = field(default_factory=list)
    received: list[bytes] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.client = official_client(self.broker)
        self.consumer = self.client.subscribe(
            HEALTHY_TOPIC, "healthy", initial_position=pulsar.InitialPosition.Earliest
        )
        self.producer = self.client.create_producer(HEALTHY_TOPIC, batching_enabled=False)
        self.threads = [
            threading.Thread(target=self._produce, daemon=True),
            threading.Thread(target=self._consume, daemon=True),
        ]
        for thread in self.threads:
            thread.start()

    def _produce(self) -> None:
        n = 0
        while not self.stop.is_set():
            payload = f"healthy-{n}".encode()
            try:
                self.producer.send(payload)
            except pulsar.PulsarException as exc:
                self.failures.append(f"send {n}: {exc}")
                return
            self.sent.append(payload)
            n += 1
            time.sleep(0.005)

    def _consume(self) -> None:
        while True:
            try:
                msg = self.consumer.receive(timeout_millis=200)
            except pulsar.Timeout:
                if self.stop.is_set() and len(self.received) >= len(self.sent):
                    return
                continue
            except pulsar.PulsarException as exc:
                self.failures.append(f"receive: {exc}")
                return
            self.received.append(msg.data())
            self.consumer.acknowledge(msg)

    def finish(self, timeout: float = 20) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout)
        self.client.close()


@pytest.fixture(scope="module")
def errors() -> Iterator[ErrorRecords]:
    handler = ErrorRecords()
    root = logging.getLogger()
    root.addHandler(handler)
    yield handler
    root.removeHandler(handler)


@pytest.fixture(scope="module")
def broker(
    tmp_path_factory: pytest.TempPathFactory, errors: ErrorRecords
) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("fuzz") / "data"
    with EmbeddedBroker(data) as running:
        running.create_partitioned_topic("persistent://public/default/fuzz-partitioned", 1)
        yield running


@pytest.fixture(scope="module")
def healthy(broker: EmbeddedBroker) -> Iterator[Healthy]:
    client = Healthy(broker)
    client.start()
    yield client
    if not client.stop.is_set():
        client.finish()


@pytest.fixture(scope="module")
def baseline(broker: EmbeddedBroker, healthy: Healthy) -> int:
    """Connections the broker holds with no fuzzing going on (the healthy client's)."""
    deadline = time.monotonic() + 5
    while not healthy.sent and time.monotonic() < deadline:
        time.sleep(0.01)
    return len(broker.service.connections)


@pytest.fixture
def check(broker: EmbeddedBroker, errors: ErrorRecords, baseline: int) -> Iterator[None]:
    """After each test: no errors logged, no connection left behind, the broker still runs."""
    yield
    _wait_for_connections(broker, baseline)
    assert errors.take() == []
    assert broker.server.service is not None


def _wait_for_connections(broker: EmbeddedBroker, expected: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while len(broker.service.connections) > expected and time.monotonic() < deadline:
        time.sleep(0.005)
    assert len(broker.service.connections) == expected


def _run(
    broker: EmbeddedBroker,
    baseline: int,
    data: bytes,
    *,
    handshake: bool,
    probe: bool = True,
) -> tuple[bool, list[pb.BaseCommand]]:
    peer = RawPeer(broker.broker_port, handshake=handshake)
    try:
        peer.send(data)
        if probe:
            outcome = peer.probe()
            closed, received = outcome.closed, outcome.commands
        else:
            closed, received = peer.closed, peer.received
    finally:
        peer.close()
    _wait_for_connections(broker, baseline)
    return closed, received


# --- bytes and framing ------------------------------------------------------------------------


@settings(FUZZ, max_examples=40)
@given(data=st.binary(min_size=1, max_size=512), handshake=st.booleans())
def test_random_bytes(
    broker: EmbeddedBroker, baseline: int, check: None, data: bytes, handshake: bool
) -> None:
    _run(broker, baseline, data, handshake=handshake, probe=False)


@settings(FUZZ, max_examples=30)
@given(frame=random_command(), cut=st.floats(0, 1, exclude_max=True), handshake=st.booleans())
def test_truncated_frames(
    broker: EmbeddedBroker,
    baseline: int,
    check: None,
    frame: bytes,
    cut: float,
    handshake: bool,
) -> None:
    """A frame cut short leaves the broker waiting for the rest; hanging up must clean up."""
    _, received = _run(
        broker, baseline, frame[: int(len(frame) * cut)], handshake=handshake, probe=False
    )
    assert received == []


@settings(FUZZ, max_examples=20)
@given(
    excess=st.one_of(st.integers(1, 10), st.integers(1, 2**32 - 1)),
    handshake=st.booleans(),
    tail=st.binary(max_size=64),
)
def test_declared_size_over_limit_closes(
    broker: EmbeddedBroker,
    baseline: int,
    check: None,
    excess: int,
    handshake: bool,
    tail: bytes,
) -> None:
    limit = broker.config.maxMessageSize + FRAME_PADDING
    total = min(limit + excess, 2**32 - 1)
    closed, received = _run(broker, baseline, struct.pack(">I", total) + tail, handshake=handshake)
    assert closed
    assert received == []


@settings(FUZZ, max_examples=40)
@given(body=st.binary(max_size=200), extra=st.binary(max_size=32), handshake=st.booleans())
def test_valid_framing_around_garbage(
    broker: EmbeddedBroker,
    baseline: int,
    check: None,
    body: bytes,
    extra: bytes,
    handshake: bool,
) -> None:
    frame = encode_raw_command_with_entry(body, extra)
    closed, received = _run(broker, baseline, frame, handshake=handshake)
    assert closed or received[-1].type == T.PONG


# --- well-framed commands with random values --------------------------------------------------


@settings(FUZZ, max_examples=150)
@given(frames=st.lists(random_command(), min_size=1, max_size=6))
def test_random_commands_after_connect(
    broker: EmbeddedBroker, baseline: int, check: None, frames: list[bytes]
) -> None:
    closed, received = _run(broker, baseline, b"".join(frames), handshake=True)
    assert closed or any(c.type == T.PONG for c in received)


@settings(FUZZ, max_examples=30)
@given(frame=random_command([t for t in ALL_TYPES if t != T.CONNECT]))
def test_commands_before_connect_close(
    broker: EmbeddedBroker, baseline: int, check: None, frame: bytes
) -> None:
    closed, received = _run(broker, baseline, frame, handshake=False)
    assert closed
    assert received == []


# --- producers: SEND with bad checksums and metadata ------------------------------------------


@settings(FUZZ, max_examples=80)
@given(
    topic=st.sampled_from(FUZZ_TOPICS[:3]),
    entry=entries(),
    sequence_id=st.integers(0, 2**64 - 1),
    producer_id=st.one_of(st.just(1), SMALL_IDS),
)
def test_send_with_fuzzed_entry(
    broker: EmbeddedBroker,
    baseline: int,
    check: None,
    topic: str,
    entry: bytes,
    sequence_id: int,
    producer_id: int,
) -> None:
    peer = RawPeer(broker.broker_port, handshake=True)
    try:
        cmd = T(type=T.PRODUCER)
        cmd.producer.topic = topic
        cmd.producer.producer_id = 1
        cmd.producer.request_id = 1
        peer.send(encode_command(cmd))
        peer.read_until(lambda: bool(peer.received))
        assert peer.received[0].type == T.PRODUCER_SUCCESS, peer.received
        peer.received.clear()
        peer.send(commands.send_frame_header(producer_id, sequence_id, len(entry)) + entry)

        def answered() -> bool:
            seen = {c.type for c in peer.received}
            return T.PONG in seen and bool(seen & {T.SEND_RECEIPT, T.SEND_ERROR})

        peer.send(commands.ping())
        peer.read_until(answered)
    finally:
        peer.close()
    _wait_for_connections(broker, baseline)
    if producer_id != 1:
        assert peer.closed, "SEND for an unknown producer must close the connection"
    if peer.closed:
        return
    replies = [c for c in peer.received if c.type in (T.SEND_RECEIPT, T.SEND_ERROR)]
    assert len(replies) == 1
    reply = replies[0]
    if reply.type == T.SEND_ERROR:
        assert reply.send_error.sequence_id == sequence_id
    else:
        assert reply.send_receipt.sequence_id == sequence_id


@settings(FUZZ, max_examples=30)
@given(
    topic=st.sampled_from(FUZZ_TOPICS[:3]),
    sub_type=st.sampled_from(list(pb.CommandSubscribe.SubType.values())),
    permits=st.integers(1, 500),
    ack_every=st.integers(1, 4),
    redeliver=st.booleans(),
)
def test_consuming_what_fuzzing_stored(
    broker: EmbeddedBroker,
    baseline: int,
    check: None,
    topic: str,
    sub_type: int,
    permits: int,
    ack_every: int,
    redeliver: bool,
) -> None:
    """Entries stored by the SEND fuzzing above (odd metadata included) dispatch and ack."""
    peer = RawPeer(broker.broker_port, handshake=True)
    try:
        cmd = T(type=T.SUBSCRIBE)
        sub = cmd.subscribe
        sub.topic = topic
        sub.subscription = f"reader-{sub_type}"
        sub.subType = sub_type  # type: ignore[assignment]
        sub.consumer_id = 1
        sub.request_id = 1
        sub.initialPosition = pb.CommandSubscribe.Earliest
        flow = T(type=T.FLOW)
        flow.flow.consumer_id = 1
        flow.flow.messagePermits = permits
        peer.send(encode_command(cmd) + encode_command(flow))
        peer.read_until(lambda: any(c.type == T.SUCCESS for c in peer.received))
        outcome = peer.probe()
        assert not outcome.closed
        messages = [c.message for c in outcome.commands if c.type == T.MESSAGE]
        ack = T(type=T.ACK)
        ack.ack.consumer_id = 1
        ack.ack.ack_type = pb.CommandAck.Individual
        for message in messages[::ack_every]:
            ack.ack.message_id.add().CopyFrom(message.message_id)
        frames = encode_command(ack) if messages else b""
        if redeliver:
            again = T(type=T.REDELIVER_UNACKNOWLEDGED_MESSAGES)
            again.redeliver_unacknowledged_messages.consumer_id = 1
            frames += encode_command(again)
        peer.received.clear()
        peer.send(frames)
        assert not peer.probe().closed
    finally:
        peer.close()
    _wait_for_connections(broker, baseline)


# --- out of order -----------------------------------------------------------------------------


@settings(FUZZ, max_examples=20)
@given(consumer_id=st.integers(0, 2**64 - 1), request_id=st.integers(0, 2**64 - 1))
def test_ack_for_unknown_consumer_is_answered(
    broker: EmbeddedBroker, baseline: int, check: None, consumer_id: int, request_id: int
) -> None:
    cmd = T(type=T.ACK)
    cmd.ack.consumer_id = consumer_id
    cmd.ack.ack_type = pb.CommandAck.Individual
    cmd.ack.request_id = request_id
    message_id = cmd.ack.message_id.add()
    message_id.ledgerId = 1
    message_id.entryId = 2
    closed, received = _run(broker, baseline, encode_command(cmd), handshake=True)
    assert not closed
    assert received[0].type == T.ACK_RESPONSE
    assert received[0].ack_response.request_id == request_id
    assert received[0].ack_response.error == pb.ConsumerNotFound


def test_unknown_ids_are_refused(broker: EmbeddedBroker, baseline: int, check: None) -> None:
    flow = T(type=T.FLOW)
    flow.flow.consumer_id = 77
    flow.flow.messagePermits = 1000
    close_consumer = T(type=T.CLOSE_CONSUMER)
    close_consumer.close_consumer.consumer_id = 77
    close_consumer.close_consumer.request_id = 5
    stats = T(type=T.CONSUMER_STATS)
    stats.consumer_stats.consumer_id = 77
    stats.consumer_stats.request_id = 6
    data = encode_command(flow) + encode_command(close_consumer) + encode_command(stats)
    closed, received = _run(broker, baseline, data, handshake=True)
    assert not closed
    replies = {c.type: c for c in received}
    assert replies[T.CONSUMER_STATS_RESPONSE].consumer_stats_response.request_id == 6
    assert replies[T.CONSUMER_STATS_RESPONSE].consumer_stats_response.error_code == (
        pb.ConsumerNotFound
    )
    assert T.SUCCESS in replies  # closing an unknown consumer: Pulsar answers success
    assert received[-1].type == T.PONG
    closed, received = _run(
        broker, baseline, commands.connect("again", protocol_version=20), handshake=True
    )
    assert closed


# --- the well-behaved client ------------------------------------------------------------------


def test_zz_healthy_client_lost_nothing(
    broker: EmbeddedBroker, healthy: Healthy, errors: ErrorRecords, baseline: int
) -> None:
    healthy.finish()
    assert healthy.failures == []
    assert len(healthy.sent) > 50
    assert healthy.received == healthy.sent
    assert errors.take() == []
