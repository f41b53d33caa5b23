"""Every client socket is closed on every path: a connect cancelled during the handshake, one
that finishes after the client closed, one the broker refused, and a client shut down at once.

The broker here is a scripted asyncio server that accepts the TCP connection, reads CONNECT and
answers only what the test tells it to, so each race is played deterministically."""

from __future__ import annotations

import asyncio
import gc
import warnings
from collections.abc import Awaitable, Callable

import pytest

from starquake import client as sq
from starquake.client.base._config import ClientConfig
from starquake.client.exceptions import AuthenticationError, ConnectError
from starquake.client.wire._connection import ClientConnection
from starquake.client.wire._pool import ConnectionPool
from starquake.protocol.framing import encode_command
from starquake.protocol.wire import pb

_DEADLINE = 10.0  # seconds a socket gets to be closed
T = pb.BaseCommand


class ScriptedBroker:
    """Accepts connections and records, per connection, that CONNECT arrived and that the
    client closed its end; answers CONNECT only when the test says so."""

    def __init__(self) -> None:
        self.connect_received = asyncio.Event()
        self.client_closed = asyncio.Event()
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"pulsar://127.0.0.1:{port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        self._writers.append(writer)
        try:
            await reader.read(1)  # CONNECT's first byte
            self.connect_received.set()
            answer = asyncio.ensure_future(asyncio.shield(self.answer))
            eof = asyncio.ensure_future(reader.read())
            await asyncio.wait([answer, eof], return_when=asyncio.FIRST_COMPLETED)
            if not eof.done():
                writer.write(answer.result())
                await eof
            answer.cancel()
            self.client_closed.set()
        finally:
            writer.close()
            self._handlers.discard(task)

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in self._writers:  # the handlers see EOF and end
            writer.transport.abort()
        await asyncio.gather(*self._handlers)
        await self._server.wait_closed()


def _connected() -> bytes:
    command = T(type=T.CONNECTED)
    command.connected.server_version = "scripted"
    command.connected.protocol_version = 21
    return encode_command(command)


def _refused() -> bytes:
    command = T(type=T.ERROR)
    command.error.request_id = 0
    command.error.error = pb.AuthenticationError
    command.error.message = "refused"
    return encode_command(command)


def _run_without_leaks(scenario: Callable[[ScriptedBroker, str], Awaitable[None]]) -> None:
    """Run ``scenario`` on a fresh loop, close the loop, and fail if a socket or transport was
    left for the garbage collector (the ResourceWarning the leak shows up as)."""

    async def main() -> None:
        broker = ScriptedBroker()
        url = await broker.start()
        try:
            await scenario(broker, url)
            await asyncio.wait_for(broker.client_closed.wait(), _DEADLINE)
        finally:
            await broker.stop()

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        asyncio.run(main())
        gc.collect()
    leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert leaks == []


def _pool(url: str) -> ConnectionPool:
    return ConnectionPool(ClientConfig(service_url=url, connection_timeout_ms=30_000))


def test_connect_cancelled_during_the_handshake_closes_its_socket() -> None:
    async def scenario(broker: ScriptedBroker, url: str) -> None:
        pool = _pool(url)
        opening = asyncio.ensure_future(pool.get_connection(url))
        await asyncio.wait_for(broker.connect_received.wait(), _DEADLINE)
        opening.cancel()
        with pytest.raises(asyncio.CancelledError):
            await opening
        await pool.close()

    _run_without_leaks(scenario)


def test_connect_finishing_after_the_pool_closed_closes_its_socket() -> None:
    async def scenario(broker: ScriptedBroker, url: str) -> None:
        pool = _pool(url)
        opening = asyncio.ensure_future(pool.get_connection(url))
        await asyncio.wait_for(broker.connect_received.wait(), _DEADLINE)
        await pool.close()
        broker.answer.set_result(_connected())
        with pytest.raises(ConnectError, match="closed"):
            await opening

    _run_without_leaks(scenario)


def test_refused_connect_closes_its_socket() -> None:
    async def scenario(broker: ScriptedBroker, url: str) -> None:
        pool = _pool(url)
        broker.answer.set_result(_refused())
        with pytest.raises(AuthenticationError):
            await pool.get_connection(url)
        await pool.close()

    _run_without_leaks(scenario)


def test_pool_close_closes_its_connections() -> None:
    """The orderly path: a connection the pool handed out is closed with the pool."""

    async def scenario(broker: ScriptedBroker, url: str) -> None:
        pool = _pool(url)
        broker.answer.set_result(_connected())
        cnx = await pool.get_connection(url)
        assert isinstance(cnx, ClientConnection) and cnx.is_open
        await pool.close()
        assert not cnx.is_open

    _run_without_leaks(scenario)


def test_shutdown_closes_the_connections() -> None:
    """Client.shutdown() closes at once, yet leaves no socket behind."""

    async def scenario(broker: ScriptedBroker, url: str) -> None:
        broker.answer.set_result(_connected())
        client = sq.Client(url, operation_timeout_seconds=5)
        try:
            # a lookup opens the connection; the scripted broker never answers it
            await asyncio.to_thread(_lookup_quietly, client)
            await asyncio.wait_for(broker.connect_received.wait(), _DEADLINE)
        finally:
            await asyncio.to_thread(client.shutdown)

    _run_without_leaks(scenario)


def _lookup_quietly(client: sq.Client) -> None:
    """Start a lookup (it opens the service connection) without waiting for its answer."""
    client._runner.call_soon(_spawn_lookup, client)


def _spawn_lookup(client: sq.Client) -> None:
    core = client._inner.core
    core.spawn(_ignore_errors(core.lookup.get_partitioned_metadata("persistent://a/b/c")))


async def _ignore_errors(coro: Awaitable[int]) -> None:
    try:
        await coro
    except Exception:
        return
