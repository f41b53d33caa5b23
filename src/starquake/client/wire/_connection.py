"""One TCP connection to a broker: an asyncio.Protocol around the sans-IO frame decoder.

Requests carry a ``request_id``; each waits on a Future that the matching response (SUCCESS,
ERROR, PRODUCER_SUCCESS, LOOKUP_RESPONSE, ...) resolves. Producers and consumers register by id
and get SEND_RECEIPT / MESSAGE / CLOSE_* pushed to them. Keep-alive: PINGs are answered; when
the connection was idle for a whole interval we send a PING, and if nothing came back by the
next check the connection is considered dead and closed.

Authentication: CONNECT carries the method and credentials of the client's
:class:`~starquake.client.base._auth.Authentication`; an ERROR before CONNECTED (the broker refused
them) fails the handshake with that error (AuthenticationError), which is not retried. An
AUTH_CHALLENGE (the credentials expired) is answered with AUTH_RESPONSE carrying fresh ones
(a token supplier is called again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from starquake.client.base._logging import CLIENT_LOGGER_NAME
from starquake.client.exceptions import (
    AuthenticationError,
    ConnectError,
    PulsarException,
    Timeout,
    from_server_error,
)
from starquake.protocol import client_commands
from starquake.protocol.commands import MAX_PROTOCOL_VERSION
from starquake.protocol.errors import ProtocolError
from starquake.protocol.framing import (
    DEFAULT_MAX_MESSAGE_SIZE,
    FRAME_PADDING,
    FrameDecoder,
    encode_command,
)
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.client.base._auth import Authentication

log = logging.getLogger(CLIENT_LOGGER_NAME)
T = pb.BaseCommand


class FinalConnectError(ConnectError):
    """A ConnectError that retrying cannot cure (the operation fails at once, as in the
    official client): a client certificate that cannot be used, an HTTP lookup refused."""


class TlsHandshakeError(ConnectError):
    """The TLS handshake failed (an untrusted certificate, a host name that does not match, no
    common protocol version, a client certificate the broker refused): retrying will not
    help."""


class ProducerListener(Protocol):
    """What a connection pushes to a registered producer."""

    def on_send_receipt(self, receipt: pb.CommandSendReceipt) -> None: ...
    def on_send_error(self, error: pb.CommandSendError) -> None: ...
    def on_disconnected(self, cnx: ClientConnection) -> None: ...


class ConsumerListener(Protocol):
    """What a connection pushes to a registered consumer."""

    def on_message(self, command: pb.CommandMessage, entry: bytes) -> None: ...
    def on_active_consumer_change(self, is_active: bool) -> None: ...
    def on_reached_end_of_topic(self) -> None: ...
    def on_disconnected(self, cnx: ClientConnection) -> None: ...


# Responses that complete a request, and where their request_id lives.
_RESPONSES: dict[int, Callable[[T], Any]] = {
    T.SUCCESS: lambda c: c.success,
    T.PRODUCER_SUCCESS: lambda c: c.producer_success,
    T.PARTITIONED_METADATA_RESPONSE: lambda c: c.partition_metadata_response,
    T.LOOKUP_RESPONSE: lambda c: c.lookup_topic_response,
    T.GET_LAST_MESSAGE_ID_RESPONSE: lambda c: c.get_last_message_id_response,
    T.GET_TOPICS_OF_NAMESPACE_RESPONSE: lambda c: c.get_topics_of_namespace_response,
    T.GET_SCHEMA_RESPONSE: lambda c: c.get_schema_response,
    T.GET_OR_CREATE_SCHEMA_RESPONSE: lambda c: c.get_or_create_schema_response,
    T.CONSUMER_STATS_RESPONSE: lambda c: c.consumer_stats_response,
    T.ACK_RESPONSE: lambda c: c.ack_response,
    T.TC_CLIENT_CONNECT_RESPONSE: lambda c: c.tc_client_connect_response,
    T.NEW_TXN_RESPONSE: lambda c: c.new_txn_response,
    T.ADD_PARTITION_TO_TXN_RESPONSE: lambda c: c.add_partition_to_txn_response,
    T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE: lambda c: c.add_subscription_to_txn_response,
    T.END_TXN_RESPONSE: lambda c: c.end_txn_response,
    T.END_TXN_ON_PARTITION_RESPONSE: lambda c: c.end_txn_on_partition_response,
    T.END_TXN_ON_SUBSCRIPTION_RESPONSE: lambda c: c.end_txn_on_subscription_response,
}


class ClientConnection(asyncio.Protocol):
    """A connection to one broker, shared by every producer and consumer the pool maps to it."""

    def __init__(
        self,
        logical_address: str,
        client_version: str,
        keep_alive: float,
        authentication: Authentication | None = None,
    ) -> None:
        self.logical_address = logical_address
        self._authentication = authentication
        self._auth_tasks: set[asyncio.Task[None]] = set()
        self._client_version = client_version
        self._keep_alive = keep_alive
        self._decoder = FrameDecoder(DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[T]] = {}
        self._unbounded: set[int] = set()
        self.producers: dict[int, ProducerListener] = {}
        self.consumers: dict[int, ConsumerListener] = {}
        self.max_message_size = DEFAULT_MAX_MESSAGE_SIZE
        self.protocol_version = MAX_PROTOCOL_VERSION
        self.server_version = ""
        self._connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closed = False
        self._last_received = time.monotonic()
        self._ping_outstanding = False
        self._keepalive_timer: asyncio.TimerHandle | None = None

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """True until the connection is lost or closed."""
        return not self._closed

    async def handshake(self, max_wait: float) -> None:
        """Send CONNECT (with the credentials) and wait for CONNECTED."""
        try:
            await asyncio.wait_for(self._send_connect_and_wait(), max_wait)
        except TimeoutError:
            self.close()
            raise ConnectError(f"no CONNECTED from {self.logical_address}") from None

    async def _send_connect_and_wait(self) -> None:
        command = client_commands.connect(self._client_version, MAX_PROTOCOL_VERSION)
        if self._authentication is not None:
            method, data = await self._credentials()
            command.connect.auth_method_name = method
            if data:
                command.connect.auth_data = data
        self.write_command(command)
        await asyncio.shield(self._connected)

    async def _credentials(self) -> tuple[str, bytes]:
        assert self._authentication is not None
        try:
            return await self._authentication.credentials()
        except Exception as exc:
            self.close()
            raise AuthenticationError(  # the official client's error for this
                f"cannot get the credentials for {self.logical_address}: {exc}"
            ) from None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        if self._keep_alive > 0:
            loop = asyncio.get_running_loop()
            self._keepalive_timer = loop.call_later(self._keep_alive, self._check_keepalive)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._lost.done():
            self._lost.set_result(None)
        if isinstance(exc, ssl.SSLError) and not self._connected.done():
            # e.g. the broker refused our certificate (TLS 1.3 says so after the handshake)
            error: ConnectError = TlsHandshakeError(
                f"TLS connection to {self.logical_address} refused: {exc}"
            )
        else:
            error = ConnectError(f"connection to {self.logical_address} lost")
        self._shutdown(error)

    async def wait_lost(self, max_wait: float) -> None:
        """After :meth:`close`, wait until the socket is closed (a TLS connection says goodbye
        to the broker first), aborting it after ``max_wait`` seconds."""
        try:
            await asyncio.wait_for(asyncio.shield(self._lost), max_wait)
        except TimeoutError:
            if self._transport is not None:
                self._transport.abort()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._lost), max_wait)

    def close(self) -> None:
        """Close the socket; pending requests fail and handlers are told to reconnect."""
        if self._transport is not None:
            self._transport.close()
        self._shutdown(ConnectError(f"connection to {self.logical_address} closed"))

    def abort(self) -> None:
        """Close the socket at once, without a TLS goodbye: for a connection given up before
        (or without) an orderly close, whose socket must not outlive the event loop."""
        if self._transport is not None:
            self._transport.abort()
        self._shutdown(ConnectError(f"connection to {self.logical_address} aborted"))

    def _shutdown(self, error: PulsarException) -> None:
        if self._closed:
            return
        self._closed = True
        if self._keepalive_timer is not None:
            self._keepalive_timer.cancel()
        if not self._connected.done():
            self._connected.set_exception(error)
            self._connected.exception()  # mark retrieved
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(error)
        producers, self.producers = self.producers, {}
        consumers, self.consumers = self.consumers, {}
        for p in producers.values():
            p.on_disconnected(self)
        for c in consumers.values():
            c.on_disconnected(self)

    def _check_keepalive(self) -> None:
        if self._closed:
            return
        idle = time.monotonic() - self._last_received
        if idle >= self._keep_alive:
            if self._ping_outstanding:
                log.warning("no answer to PING from %s; closing", self.logical_address)
                self.close()
                return
            self._ping_outstanding = True
            self.write_command(client_commands.ping())
        loop = asyncio.get_running_loop()
        self._keepalive_timer = loop.call_later(self._keep_alive, self._check_keepalive)

    # --- writing ------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Write raw frame bytes (dropped silently once closed: handlers resend after reconnect)."""
        if self._transport is not None and not self._closed:
            self._transport.write(data)

    def write_command(self, command: T) -> None:
        """Encode and write a simple command."""
        self.write(encode_command(command))

    async def request(self, command: T, request_id: int, max_wait: float | None) -> T:
        """Send a command and wait for the response carrying ``request_id``.

        ERROR responses raise the mapped :class:`PulsarException`; a timeout raises
        :class:`Timeout`.
        """
        if self._closed:
            raise ConnectError(f"connection to {self.logical_address} is closed")
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = fut
        self.write_command(command)
        try:
            if max_wait is None:
                return await fut
            try:
                return await asyncio.wait_for(asyncio.shield(fut), max_wait)
            except TimeoutError:
                if request_id in self._unbounded:
                    # WaitForExclusive: the broker said "not yet"; wait as long as it takes.
                    return await fut
                fut.cancel()
                raise Timeout(f"request {request_id} timed out") from None
        finally:
            self._unbounded.discard(request_id)
            if self._pending.get(request_id) is fut:
                del self._pending[request_id]

    # --- reading ------------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        self._last_received = time.monotonic()
        self._ping_outstanding = False
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as exc:
            log.error("bad frame from %s: %s", self.logical_address, exc)
            self.close()
            return
        for frame in frames:
            try:
                self._dispatch(frame.command, frame.entry)
            except Exception:
                log.exception("error handling %s", T.Type.Name(frame.command.type))

    def _dispatch(self, cmd: T, entry: bytes | None) -> None:
        kind = cmd.type
        if kind == T.MESSAGE:
            consumer = self.consumers.get(cmd.message.consumer_id)
            if consumer is not None and entry is not None:
                consumer.on_message(cmd.message, entry)
            return
        if kind == T.SEND_RECEIPT:
            producer = self.producers.get(cmd.send_receipt.producer_id)
            if producer is not None:
                producer.on_send_receipt(cmd.send_receipt)
            return
        getter = _RESPONSES.get(kind)
        if getter is not None:
            body = getter(cmd)
            if kind == T.PRODUCER_SUCCESS and not cmd.producer_success.producer_ready:
                self._unbounded.add(body.request_id)
                return  # WaitForExclusive: the real answer comes later, without a time limit
            self._complete(body.request_id, cmd, None)
            return
        self._dispatch_other(cmd, kind)

    def _dispatch_other(self, cmd: T, kind: pb.BaseCommand.Type.ValueType) -> None:
        """The commands other than messages, receipts and responses to requests."""
        if kind == T.ERROR:
            self._on_error(cmd)
        elif kind == T.SEND_ERROR:
            producer = self.producers.get(cmd.send_error.producer_id)
            if producer is not None:
                producer.on_send_error(cmd.send_error)
        elif kind == T.PING:
            self.write_command(client_commands.pong())
        elif kind == T.PONG:
            pass
        elif kind == T.AUTH_CHALLENGE:
            task = asyncio.get_running_loop().create_task(self._answer_auth_challenge())
            self._auth_tasks.add(task)
            task.add_done_callback(self._auth_tasks.discard)
        elif kind == T.CONNECTED:
            self._on_connected(cmd.connected)
        elif kind == T.CLOSE_PRODUCER:
            p = self.producers.pop(cmd.close_producer.producer_id, None)
            if p is not None:
                p.on_disconnected(self)
        elif kind == T.CLOSE_CONSUMER:
            c = self.consumers.pop(cmd.close_consumer.consumer_id, None)
            if c is not None:
                c.on_disconnected(self)
        elif kind == T.ACTIVE_CONSUMER_CHANGE:
            c = self.consumers.get(cmd.active_consumer_change.consumer_id)
            if c is not None:
                c.on_active_consumer_change(cmd.active_consumer_change.is_active)
        elif kind == T.REACHED_END_OF_TOPIC:
            c = self.consumers.get(cmd.reached_end_of_topic.consumer_id)
            if c is not None:
                c.on_reached_end_of_topic()
        elif kind == T.TOPIC_MIGRATED:
            migrated = cmd.topic_migrated
            if migrated.resource_type == pb.CommandTopicMigrated.Producer:
                p = self.producers.pop(migrated.resource_id, None)
                if p is not None:
                    p.on_disconnected(self)
            else:
                c = self.consumers.pop(migrated.resource_id, None)
                if c is not None:
                    c.on_disconnected(self)
        else:
            log.debug("ignoring %s from %s", T.Type.Name(kind), self.logical_address)

    def _on_error(self, cmd: T) -> None:
        """An ERROR answer: fails its request, or the connection when CONNECT was refused."""
        err = from_server_error(cmd.error.error, cmd.error.message)
        if not self._connected.done():  # the broker refused the CONNECT
            self._connected.set_exception(err)
            self._connected.exception()  # mark retrieved
            self.close()
            return
        if isinstance(err, AuthenticationError):
            log.warning("%s refused our credentials: %s", self.logical_address, err)
        self._complete(cmd.error.request_id, cmd, err)

    def _on_connected(self, connected: pb.CommandConnected) -> None:
        """CONNECTED: the broker's version and message size limit; the connection is up."""
        self.server_version = connected.server_version
        self.protocol_version = connected.protocol_version
        if connected.HasField("max_message_size"):
            self.max_message_size = connected.max_message_size
            if self.max_message_size > DEFAULT_MAX_MESSAGE_SIZE and not self._decoder.buffered:
                # the broker sends chunks (and messages) up to its own limit
                self._decoder = FrameDecoder(self.max_message_size + FRAME_PADDING)
        if not self._connected.done():
            self._connected.set_result(None)

    async def _answer_auth_challenge(self) -> None:
        """Send fresh credentials (AUTH_RESPONSE) for the broker's AUTH_CHALLENGE."""
        if self._authentication is None:
            log.warning("%s asked for credentials, but none are configured", self.logical_address)
            return
        try:
            method, data = await self._credentials()
        except AuthenticationError as exc:
            log.error("%s", exc)
            return
        command = T(type=T.AUTH_RESPONSE)
        response = command.auth_response
        response.client_version = self._client_version
        response.protocol_version = MAX_PROTOCOL_VERSION
        response.response.auth_method_name = method
        response.response.auth_data = data
        self.write_command(command)
        log.debug("sent fresh credentials to %s", self.logical_address)

    def _complete(self, request_id: int, cmd: T, error: PulsarException | None) -> None:
        fut = self._pending.pop(request_id, None)
        if fut is None or fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(cmd)
