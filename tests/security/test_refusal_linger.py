"""A connection refused for its credentials gets its error at once but is closed only a moment
later (``authenticationRefusalLingerSeconds``), so that clients reconnecting in a loop whenever
the broker closes them cannot churn hundreds of connections a second. Through a real broker
process, on both ports."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import struct
import time
from collections.abc import Iterator

import pulsar
import pytest
from auth_support import BASIC_PROVIDER, HASHES, htpasswd
from broker_process import BrokerProcess

from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import FrameDecoder, encode_command

T = pb.BaseCommand
USER, PASSWORD = "alice", "alice-secret"
LINGER = 2.0
WRONG_HEAD = (
    b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\nAuthorization: Basic "
    + base64.b64encode(f"{USER}:wrong".encode())
    + b"\r\n\r\n"
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    directory = tmp_path_factory.mktemp("refusal-linger")
    conf = htpasswd(directory / "htpasswd", {USER: HASHES["apr1"](PASSWORD)})
    process = BrokerProcess(
        directory / "data",
        "authenticationEnabled=true",
        f"authenticationProviders={BASIC_PROVIDER}",
        f"basicAuthConf=file://{conf}",
        f"authenticationRefusalLingerSeconds={LINGER}",
    )
    process.start()
    try:
        yield process
    finally:
        process.cleanup()


def _connect_frame(password: str) -> bytes:
    cmd = T(type=T.CONNECT)
    cmd.connect.client_version = "linger-test"
    cmd.connect.protocol_version = commands.MAX_PROTOCOL_VERSION
    cmd.connect.auth_method_name = "basic"
    cmd.connect.auth_data = f"{USER}:{password}".encode()
    return encode_command(cmd)


async def _refused_binary(port: int) -> tuple[int, float]:
    """One wrong CONNECT held until the broker closes: (the ERROR's code, seconds from the
    ERROR to the close)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(_connect_frame("wrong"))
        decoder, code, answered = FrameDecoder(), 0, 0.0
        # the close of a socket with unread input (the second CONNECT) is a reset
        with contextlib.suppress(ConnectionResetError):
            async with asyncio.timeout(60):
                while chunk := await reader.read(65536):
                    for frame in decoder.feed(chunk):
                        assert frame.command.type == T.ERROR, frame.command
                        code, answered = int(frame.command.error.error), time.monotonic()
                        writer.write(_connect_frame("again"))  # read by nobody
        assert answered, "closed without an ERROR"
        return code, time.monotonic() - answered
    finally:
        writer.close()


async def _refused_web(port: int) -> tuple[bytes, float]:
    """One request with a wrong password held until the broker closes: (its status line,
    seconds from the complete 401 to the close)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(WRONG_HEAD)
        async with asyncio.timeout(60):
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":", 1)[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)
            answered = time.monotonic()
            writer.write(WRONG_HEAD)  # a second request on the connection: read by nobody
            rest = b""
            with contextlib.suppress(ConnectionResetError):  # closed with unread input
                rest = await reader.read()
        assert rest == b"", rest
        return head.split(b"\r\n", 1)[0], time.monotonic() - answered
    finally:
        writer.close()


def test_a_refusal_is_answered_at_once_and_closed_after_the_linger(
    broker: BrokerProcess,
) -> None:
    """The ERROR (binary) or 401 (web) comes while the connection is still open, and the
    broker closes it no sooner than the linger later, ignoring what the client sends meanwhile
    (a second CONNECT or request gets no answer)."""

    async def both() -> tuple[tuple[int, float], tuple[bytes, float]]:
        return await asyncio.gather(_refused_binary(broker.port), _refused_web(broker.web_port))

    (code, binary_gap), (status, web_gap) = asyncio.run(both())
    assert code == pb.AuthenticationError
    assert status.startswith(b"HTTP/1.1 401"), status
    assert binary_gap >= LINGER * 0.75, binary_gap
    assert web_gap >= LINGER * 0.75, web_gap


async def _reconnect_loop(port: int, web: bool, seconds: float) -> int:
    """Refused attempts made in ``seconds`` by a client that reopens at once whenever the
    broker closes it."""
    attempts = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(WRONG_HEAD if web else _connect_frame("wrong"))
            with contextlib.suppress(TimeoutError, ConnectionError):
                async with asyncio.timeout(max(0.01, deadline - time.monotonic())):
                    while await reader.read(65536):
                        pass
            attempts += 1
        finally:
            writer.close()
    return attempts


def test_reconnect_loops_are_slowed_to_the_linger(broker: BrokerProcess) -> None:
    """40 clients on each port that reconnect as soon as they are closed make at most about
    one attempt per linger each (with an immediate close: dozens each)."""
    loops, seconds = 40, 3.0

    async def storm() -> list[int]:
        return await asyncio.gather(
            *(_reconnect_loop(broker.port, False, seconds) for _ in range(loops)),
            *(_reconnect_loop(broker.web_port, True, seconds) for _ in range(loops)),
        )

    counts = asyncio.run(storm())
    bound = loops * (seconds / LINGER + 1)
    assert sum(counts[:loops]) <= bound, counts
    assert sum(counts[loops:]) <= bound, counts
    # a rightful client is not kept waiting, and the broker still serves
    client = pulsar.Client(
        broker.url,
        authentication=pulsar.AuthenticationBasic(USER, PASSWORD),
        operation_timeout_seconds=30,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        client.create_producer("persistent://public/default/after-linger").send(b"x")
    finally:
        client.close()


def test_clients_that_leave_before_their_401_leave_no_trace_in_the_log(
    broker: BrokerProcess,
) -> None:
    """A client that sends wrong credentials and resets the connection at once: the 401 cannot
    be written, which is no error of the broker's (nothing logged but the refusals)."""

    async def hit_and_run() -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", broker.web_port)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.write(WRONG_HEAD)
        await writer.drain()
        writer.close()  # with SO_LINGER 0: a reset

    async def many() -> None:
        await asyncio.gather(*(hit_and_run() for _ in range(200)))

    asyncio.run(many())
    time.sleep(1.0)  # the broker handles what it read before the resets
    assert "Traceback" not in broker.log(), broker.log()[-3000:]
