"""Connections that never do their part: idle sockets beyond the descriptor limit, slow
headers and bodies on the web port, half frames and missing CONNECTs on the binary port.
Each is closed in bounded time, the broker's log stays small, and real clients keep working.
All through a real ``starquake standalone`` process."""

from __future__ import annotations

import base64
import contextlib
import socket
import struct
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
from auth_support import BASIC_PROVIDER, HASHES, htpasswd
from broker_process import BrokerProcess
from polling import wait_for

USER, PASSWORD = "alice", "alice-secret"
BASIC = ("Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()).encode()
WRONG = ("Basic " + base64.b64encode(f"{USER}:wrong".encode()).decode()).encode()


def _auth_defines(directory: Path) -> list[str]:
    conf = htpasswd(directory / "htpasswd", {USER: HASHES["apr1"](PASSWORD)})
    return [
        "authenticationEnabled=true",
        f"authenticationProviders={BASIC_PROVIDER}",
        f"basicAuthConf=file://{conf}",
    ]


@contextlib.contextmanager
def _broker(
    tmp_path: Path, *defines: str, open_files: int | None = None
) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        tmp_path / "data", *_auth_defines(tmp_path), *defines, open_files=open_files
    )
    broker.start()
    try:
        yield broker
    finally:
        broker.cleanup()


def _client(broker: BrokerProcess) -> pulsar.Client:
    return pulsar.Client(
        broker.url,
        authentication=pulsar.AuthenticationBasic(USER, PASSWORD),
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )


def _http_status(broker: BrokerProcess, authorization: bytes) -> int:
    request = urllib.request.Request(
        f"{broker.web_service_url}/admin/v2/tenants",
        headers={"Authorization": authorization.decode()},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _closed_by_peer(sock: socket.socket) -> bool:
    """The broker closed ``sock`` (it reads end-of-stream or a reset), without blocking."""
    try:
        return sock.recv(65536, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _round_trip(producer: pulsar.Producer, consumer: pulsar.Consumer) -> None:
    payload = uuid.uuid4().bytes
    producer.send(payload)
    msg = consumer.receive(10_000)
    consumer.acknowledge(msg)
    assert msg.data() == payload


def test_idle_connections_beyond_the_descriptor_limit_do_not_lock_clients_out(
    tmp_path: Path,
) -> None:
    limit = 256
    with _broker(
        tmp_path,
        "keepAliveIntervalSeconds=2",
        "httpServerIdleTimeoutSeconds=2",
        open_files=limit,
    ) as broker:
        client = _client(broker)
        topic = f"persistent://public/default/guard-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        _round_trip(producer, consumer)
        idle = [socket.create_connection(("127.0.0.1", port)) for port in [broker.port] * 200]
        idle += [socket.create_connection(("127.0.0.1", broker.web_port)) for _ in range(200)]
        try:
            # descriptors run out while they are held: the open connection keeps working
            _round_trip(producer, consumer)
            wait_for(lambda: all(_closed_by_peer(s) for s in idle), "idle ones closed", 120)
        finally:
            for sock in idle:
                sock.close()
        _round_trip(producer, consumer)
        client.close()
        fresh = _client(broker)
        fresh_consumer = fresh.subscribe(topic, "sub2")
        _round_trip(fresh.create_producer(topic), fresh_consumer)
        fresh.close()
        assert _http_status(broker, BASIC) == 200
        assert _http_status(broker, WRONG) == 401
        log = broker.log()
    assert "not accepting connections" in log
    # one line per kind of event and interval, however many connections
    assert len(log.splitlines()) < 40, log


def _send_slowly(sock: socket.socket, chunks: list[bytes], pause: float) -> bool:
    """Send ``chunks`` one by one, ``pause`` seconds apart; whether the broker closed the
    connection before the last one."""
    for chunk in chunks:
        if _closed_by_peer(sock):
            return True
        try:
            sock.sendall(chunk)
        except OSError:
            return True
        time.sleep(pause)
    return _closed_by_peer(sock)


def _read_status(sock: socket.socket, timeout: float) -> int:
    """The status code of the next response on ``sock``."""
    sock.settimeout(timeout)
    head = b""
    while b"\r\n" not in head:
        data = sock.recv(4096)
        assert data, f"closed without a response (got {head!r})"
        head += data
    return int(head.split(b" ", 2)[1])


def test_slow_or_idle_web_clients_are_closed(tmp_path: Path) -> None:
    with _broker(
        tmp_path,
        "httpServerIdleTimeoutSeconds=1.5",
        "httpServerRequestBodyTimeoutSeconds=1.5",
    ) as broker:
        address = ("127.0.0.1", broker.web_port)
        # a head sent a byte at a time never completes: closed at the idle timeout
        with socket.create_connection(address) as slow_head:
            trickle = [bytes([b]) for b in b"GET /admin/v2/tenants HTTP/1.1\r\n" + b"X: y\r\n" * 20]
            assert _send_slowly(slow_head, trickle, 0.1), "a trickled head was served for 18 s"
        cases = [
            # a body sent slowly gets 408
            ("PUT /admin/v2/tenants/slow", BASIC, b"Content-Length: 100\r\n\r\n{", 408),
            # wrong credentials are refused from the head, without waiting for the body
            ("PUT /admin/v2/tenants/big", WRONG, b"Content-Length: 900000\r\n\r\n", 401),
            # an idle keep-alive connection closes after its last response
            ("GET /admin/v2/tenants", BASIC, b"\r\n", 200),
        ]
        for target, authorization, rest, status in cases:
            with socket.create_connection(address) as sock:
                sock.sendall(
                    f"{target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n".encode()
                    + b"Authorization: "
                    + authorization
                    + b"\r\n"
                    + rest
                )
                assert _read_status(sock, 20) == status, target
                wait_for(lambda: _closed_by_peer(sock), f"{target}: the connection closed")
        assert _http_status(broker, BASIC) == 200


def test_a_large_frame_before_connect_closes_the_connection(tmp_path: Path) -> None:
    with _broker(tmp_path, "keepAliveIntervalSeconds=600") as broker:
        with socket.create_connection(("127.0.0.1", broker.port)) as half_frame:
            # announces a 1 MiB frame (within maxMessageSize) and sends its first bytes
            half_frame.sendall(struct.pack(">I", 1024 * 1024) + b"\0" * 4096)
            wait_for(lambda: _closed_by_peer(half_frame), "the half frame's connection closed", 15)
        # once connected, frames up to maxMessageSize pass
        client = _client(broker)
        topic = f"persistent://public/default/big-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic, batching_enabled=False)
        big = b"x" * (4 * 1024 * 1024)
        producer.send(big)
        assert consumer.receive(10_000).data() == big
        client.close()


def test_a_connection_without_connect_is_closed_at_the_first_keepalive_check(
    tmp_path: Path,
) -> None:
    with _broker(tmp_path, "keepAliveIntervalSeconds=1") as broker:
        received: list[bytes] = []

        def closed_silently(sock: socket.socket) -> bool:
            try:
                data = sock.recv(65536, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return False
            except OSError:
                return True
            received.append(data)
            return data == b""

        with socket.create_connection(("127.0.0.1", broker.port)) as silent:
            wait_for(lambda: closed_silently(silent), "the silent connection closed", 15)
        assert b"".join(received) == b"", "the broker sent something (a PING?) before closing"
        # bytes trickling in do not keep a connection that has not completed CONNECT
        # (a 32 KiB frame, within the bound before CONNECT, a byte at a time)
        trickle = [struct.pack(">I", 32 * 1024)] + [b"\0"] * 100
        with socket.create_connection(("127.0.0.1", broker.port)) as trickling:
            assert _send_slowly(trickling, trickle, 0.1), "a trickling connection stayed 10 s"
        # a client that completed CONNECT stays through several checks
        client = _client(broker)
        topic = f"persistent://public/default/ka-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "sub")
        producer = client.create_producer(topic)
        time.sleep(3)
        _round_trip(producer, consumer)
        client.close()


def test_connection_limits_of_both_ports(tmp_path: Path) -> None:
    with _broker(tmp_path, "brokerMaxConnections=3", "maxHttpServerConnections=2") as broker:
        # the binary port closes a connection beyond brokerMaxConnections at once
        held = [socket.create_connection(("127.0.0.1", broker.port)) for _ in range(3)]
        with socket.create_connection(("127.0.0.1", broker.port)) as extra:
            wait_for(lambda: _closed_by_peer(extra), "the connection over the limit closed", 15)
        assert not any(_closed_by_peer(sock) for sock in held)
        for sock in held:
            sock.close()
        wait_for(lambda: _client_round_trip(broker), "a client under the limit", 30)
        # the web port leaves a connection beyond maxHttpServerConnections in the queue
        idle = [socket.create_connection(("127.0.0.1", broker.web_port)) for _ in range(2)]
        statuses: list[int] = []
        waiting = threading.Thread(target=lambda: statuses.append(_http_status(broker, BASIC)))
        waiting.start()
        waiting.join(1.0)
        assert not statuses, "a request was served over maxHttpServerConnections"
        idle[0].close()
        waiting.join(20)
        assert statuses == [200]
        idle[1].close()


def _client_round_trip(broker: BrokerProcess) -> bool:
    client = _client(broker)
    try:
        topic = f"persistent://public/default/limit-{uuid.uuid4().hex[:8]}"
        consumer = client.subscribe(topic, "sub")
        _round_trip(client.create_producer(topic), consumer)
        return True
    except pulsar.PulsarException:
        return False
    finally:
        client.close()
