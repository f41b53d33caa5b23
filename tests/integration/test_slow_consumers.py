"""Consumers that stop reading, or vanish, must not cost the broker memory or other consumers.

A consumer that never reads fills its TCP window; the broker must then stop writing to it (its
connection is write-paused above the high-water mark and its permits are held back), so the
broker's buffer for it stays small while healthy consumers get everything. A consumer that
vanishes is found by keep-alive, removed, and its unacknowledged messages go to another consumer.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest
from official_client import official_client

from starquake.broker.connection import WRITE_BUFFER_HIGH, ServerCnx
from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import FrameDecoder, encode_command

T = pb.BaseCommand
EARLIEST = pulsar.InitialPosition.Earliest


class RawConsumer:
    """A consumer on a raw socket with a small receive buffer, which reads only when told."""

    def __init__(self, port: int, topic: str, subscription: str, sub_type: int) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
        self.sock.settimeout(10)
        self.sock.connect(("127.0.0.1", port))
        self.decoder = FrameDecoder(1 << 30)
        self.frames: list[pb.BaseCommand] = []
        self.sock.sendall(commands.connect("raw-consumer", protocol_version=20))
        self.read_until(lambda: any(c.type == T.CONNECTED for c in self.frames))
        cmd = T(type=T.SUBSCRIBE)
        sub = cmd.subscribe
        sub.topic = topic
        sub.subscription = subscription
        sub.subType = sub_type  # type: ignore[assignment]
        sub.consumer_id = 1
        sub.request_id = 1
        sub.initialPosition = pb.CommandSubscribe.Earliest
        self.sock.sendall(encode_command(cmd))
        self.read_until(lambda: any(c.type == T.SUCCESS for c in self.frames))

    @property
    def local_address(self) -> str:
        host, port = self.sock.getsockname()[:2]
        return f"{host}:{port}"

    def flow(self, permits: int) -> None:
        cmd = T(type=T.FLOW)
        cmd.flow.consumer_id = 1
        cmd.flow.messagePermits = permits
        self.sock.sendall(encode_command(cmd))

    def read_until(self, done: object, timeout: float = 20) -> bool:
        """Read (answering PINGs) until ``done()``; False if the broker closed the socket."""
        deadline = time.monotonic() + timeout
        assert callable(done)
        while not done():
            assert time.monotonic() < deadline, "timed out reading from the broker"
            try:
                data = self.sock.recv(1 << 20)
            except ConnectionResetError:
                return False
            if not data:
                return False
            for frame in self.decoder.feed(data):
                if frame.command.type == T.PING:
                    self.sock.sendall(commands.pong())
                self.frames.append(frame.command)
        return True

    def messages(self) -> int:
        return sum(1 for c in self.frames if c.type == T.MESSAGE)

    def closed_by_broker(self, timeout: float = 15) -> bool:
        """Drain the socket until the broker closes it (or ``timeout`` passes)."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(1)
        while time.monotonic() < deadline:
            try:
                if not self.sock.recv(1 << 20):
                    return True
            except ConnectionResetError:
                return True
            except TimeoutError:
                continue
        return False

    def close(self) -> None:
        self.sock.close()


def _cnx(broker: EmbeddedBroker, address: str) -> ServerCnx | None:
    """The broker's connection whose peer is ``address``."""
    for cnx in list(broker.service.connections):
        if isinstance(cnx, ServerCnx) and cnx.remote_address == address:
            return cnx
    return None


@pytest.fixture
def raw_consumers() -> Iterator[list[RawConsumer]]:
    opened: list[RawConsumer] = []
    yield opened
    for raw in opened:
        raw.close()


def test_consumer_that_never_reads_costs_bounded_memory(
    tmp_path: Path, topic: str, raw_consumers: list[RawConsumer]
) -> None:
    size, count = 32 * 1024, 2000  # 64 MiB in all
    with EmbeddedBroker(tmp_path / "data", managedLedgerCacheSizeMB=8) as broker:
        client = official_client(broker)
        try:
            healthy = client.subscribe(topic, "healthy", initial_position=EARLIEST)
            dead = RawConsumer(broker.broker_port, topic, "dead", pb.CommandSubscribe.Exclusive)
            raw_consumers.append(dead)
            dead.flow(1_000_000)
            dead_cnx = _cnx(broker, dead.local_address)
            assert dead_cnx is not None and dead_cnx.transport is not None
            (dead_consumer,) = dead_cnx.consumers.values()

            peak = {"buffer": 0}
            stop = threading.Event()

            def watch() -> None:
                transport = dead_cnx.transport
                while not stop.is_set() and transport is not None:
                    peak["buffer"] = max(peak["buffer"], transport.get_write_buffer_size())
                    time.sleep(0.002)

            watcher = threading.Thread(target=watch)
            watcher.start()
            received: list[bytes] = []

            def consume() -> None:
                while len(received) < count:
                    msg = healthy.receive(timeout_millis=10000)
                    received.append(msg.data()[:8])
                    healthy.acknowledge(msg)

            consumer_thread = threading.Thread(target=consume)
            consumer_thread.start()
            producer = client.create_producer(
                topic, batching_enabled=False, block_if_queue_full=True
            )
            started = time.monotonic()
            for i in range(count):
                producer.send_async(i.to_bytes(8, "big") + bytes(size - 8), None)
            producer.flush()
            consumer_thread.join(30)
            elapsed = time.monotonic() - started
            stop.set()
            watcher.join()

            assert received == [i.to_bytes(8, "big") for i in range(count)]
            assert elapsed < 30
            assert dead_cnx.is_write_paused
            # Without back-pressure the broker would buffer nearly all 64 MiB for it.
            assert peak["buffer"] < WRITE_BUFFER_HIGH + 4 * 1024 * 1024, peak
            assert dead_consumer.unacked * size < 16 * 1024 * 1024
            assert dead_cnx.transport.get_write_buffer_size() < 8 * 1024 * 1024

            # Once it reads again, the permits held back are handed back: it gets everything.
            assert dead.read_until(lambda: dead.messages() >= count, timeout=30)
            assert dead.messages() == count
            assert not dead_cnx.is_write_paused
        finally:
            client.close()


def test_vanished_consumer_is_dropped_by_keepalive_and_its_messages_redelivered(
    tmp_path: Path, topic: str, raw_consumers: list[RawConsumer]
) -> None:
    with EmbeddedBroker(tmp_path / "data", keepAliveIntervalSeconds=1) as broker:
        client = official_client(broker)
        try:
            producer = client.create_producer(
                topic, batching_enabled=False, block_if_queue_full=True
            )
            gone = RawConsumer(broker.broker_port, topic, "shared", pb.CommandSubscribe.Shared)
            raw_consumers.append(gone)
            for i in range(10):
                producer.send(f"m-{i}".encode())
            gone.flow(100)
            assert gone.read_until(lambda: gone.messages() == 10)
            # It holds all ten unacknowledged and now goes silent: no reads, no PONGs.
            other = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
            cnx = _cnx(broker, gone.local_address)
            assert cnx is not None
            started = time.monotonic()
            got = set()
            while len(got) < 10:
                msg = other.receive(timeout_millis=10000)
                got.add(msg.data())
                other.acknowledge(msg)
            assert got == {f"m-{i}".encode() for i in range(10)}
            assert time.monotonic() - started < 10
            assert cnx.transport is None  # the connection is gone, with its consumer
            assert not cnx.consumers
            assert gone.closed_by_broker()
        finally:
            client.close()


def test_dead_peer_with_full_window_is_cut_off_by_keepalive(
    tmp_path: Path, topic: str, raw_consumers: list[RawConsumer]
) -> None:
    """Closing a connection whose peer does not read would wait forever to flush: abort it."""
    size, count = 64 * 1024, 400  # 25 MiB
    with EmbeddedBroker(tmp_path / "data", keepAliveIntervalSeconds=1) as broker:
        client = official_client(broker)
        try:
            gone = RawConsumer(broker.broker_port, topic, "shared", pb.CommandSubscribe.Shared)
            raw_consumers.append(gone)
            gone.flow(count)
            cnx = _cnx(broker, gone.local_address)
            assert cnx is not None and cnx.transport is not None
            producer = client.create_producer(
                topic, batching_enabled=False, block_if_queue_full=True
            )
            for i in range(count):
                producer.send_async(i.to_bytes(4, "big") + bytes(size - 4), None)
            producer.flush()
            deadline = time.monotonic() + 10
            while cnx.transport is not None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert cnx.transport is None, "the dead peer's connection was never dropped"
            other = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
            got = set()
            while len(got) < count:
                msg = other.receive(timeout_millis=10000)
                got.add(msg.data()[:4])
                other.acknowledge(msg)
            assert got == {i.to_bytes(4, "big") for i in range(count)}
        finally:
            client.close()


def test_write_pause_never_delivers_more_than_the_permits_given(
    tmp_path: Path, topic: str, raw_consumers: list[RawConsumer]
) -> None:
    size, count, permits = 32 * 1024, 600, 400
    with EmbeddedBroker(tmp_path / "data") as broker:
        client = official_client(broker)
        try:
            producer = client.create_producer(
                topic, batching_enabled=False, block_if_queue_full=True
            )
            for i in range(count):
                producer.send_async(i.to_bytes(8, "big") + bytes(size - 8), None)
            producer.flush()
            slow = RawConsumer(broker.broker_port, topic, "slow", pb.CommandSubscribe.Exclusive)
            raw_consumers.append(slow)
            slow_cnx = _cnx(broker, slow.local_address)
            assert slow_cnx is not None
            slow.flow(permits)  # 12.5 MiB of messages for a peer that is not reading yet
            deadline = time.monotonic() + 10
            while not slow_cnx.is_write_paused and time.monotonic() < deadline:
                time.sleep(0.01)
            assert slow_cnx.is_write_paused
            # how many of the permits were spent before the pause depends on when it came
            (consumer,) = slow_cnx.consumers.values()

            # Reading resumes the writes; exactly the permits given arrive, no more.
            assert slow.read_until(lambda: slow.messages() >= permits, timeout=30)
            slow.sock.settimeout(0.5)
            with pytest.raises(TimeoutError):
                slow.read_until(lambda: slow.messages() > permits, timeout=30)
            assert slow.messages() == permits
            assert consumer.permits == 0
        finally:
            client.close()
