"""ServerCnx: one client connection, an asyncio protocol around the sans-IO frame decoder.

Commands are handled in arrival order, synchronously where possible, so SENDs after a PRODUCER
see the producer. A malformed frame closes this connection only; a request that fails gets an
ERROR (or SEND_ERROR, or a failed lookup response) with the matching ServerError code.

A frame is valid only with a known ``type`` whose sub-command is present with all its required
fields; anything else closes the connection, as does a command no handler serves and no error
reply can name (it carries no request id).

Read back-pressure: when the bytes of sends waiting for their receipt pass
``maxPendingSendBytesPerConnection``, reading pauses until receipts catch up.

Write back-pressure: when the transport's write buffer passes its high-water mark
(``WRITE_BUFFER_HIGH``) the connection is *write-paused* until the buffer drains below
``WRITE_BUFFER_LOW``. Meanwhile it stops reading (a peer that does not read our replies cannot
make us queue more of them) and holds back the permits of its consumers, FLOWs included, so
dispatchers send them nothing; the permits are handed back on resume.

Closing flushes what is queued; a peer that does not read it within ``CLOSE_GRACE_SECONDS`` is
cut off (abort), as is one that does not answer a keep-alive PING: a dead peer's full TCP window
must not keep the connection, its consumers and their unacknowledged messages alive.

Before the handshake: until CONNECTED is sent, a frame may be at most
``HANDSHAKE_MAX_FRAME_BYTES`` (not ``maxMessageSize``), and a connection still without it at
its first keep-alive check is closed (as Pulsar does). Such closes of peers that never
identified themselves are logged at most once per ``LOG_INTERVAL_SECONDS``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar, cast

from google.protobuf.message import Message

from starquake.broker.cnx_work import load_topic, persist_cursors
from starquake.broker.command_checks import invalid_command, unsupported_reply
from starquake.broker.consumer_commands import ConsumerCommands
from starquake.broker.error_replies import error_reply
from starquake.broker.errors import BrokerServiceError
from starquake.broker.held_permits import HeldPermits
from starquake.broker.keepalive import KeepAlive
from starquake.broker.log_throttle import LogThrottle
from starquake.broker.producer import Producer
from starquake.broker.producer_commands import ProducerCommands
from starquake.broker.registrations import CreationsUnderWay
from starquake.broker.security.cnx_auth import ConnectionAuthenticator
from starquake.broker.security.tls import peer_common_name
from starquake.broker.topic_commands import TopicCommands
from starquake.broker.transactions.commands import TxnCommands
from starquake.protocol.errors import FrameTooLargeError, ProtocolError
from starquake.protocol.framing import FRAME_PADDING, Frame, FrameDecoder
from starquake.protocol.send_scan import SendFields
from starquake.protocol.wire import pb

if TYPE_CHECKING:
    from starquake.broker.consumer import Consumer
    from starquake.broker.service import BrokerService
    from starquake.broker.topic_api import TopicApi
    from starquake.common.topic_name import TopicName

log = logging.getLogger(__name__)

T = pb.BaseCommand
_R = TypeVar("_R")
WRITE_BUFFER_HIGH = 1024 * 1024
WRITE_BUFFER_LOW = 256 * 1024
# Frames queued in one loop iteration are written together, but never more than this at once.
FLUSH_NOW_BYTES = WRITE_BUFFER_HIGH
CLOSE_GRACE_SECONDS = 5.0
HANDSHAKE_MAX_FRAME_BYTES = 64 * 1024
"""The largest frame accepted before CONNECTED (a CONNECT carries a token at most)."""
LOG_INTERVAL_SECONDS = 10.0
_handshake_log = LogThrottle(log, LOG_INTERVAL_SECONDS)

WRITES = "full write buffer"
"""The reason reading is held while the peer does not take our writes."""


class ServerCnx(asyncio.Protocol):
    """The broker side of one client connection; command handlers are delegated to."""

    def __init__(self, service: BrokerService, on_closed: Callable[[], None] | None = None) -> None:
        self.service = service
        config = service.config
        self._max_frame = config.maxMessageSize + FRAME_PADDING
        self.decoder = FrameDecoder(min(HANDSHAKE_MAX_FRAME_BYTES, self._max_frame))
        self._handshake_frames = True
        self._on_closed = on_closed
        self.transport: asyncio.Transport | None = None
        self.remote_address = ""
        self.authenticator = ConnectionAuthenticator(self)
        self.producers: dict[int, Producer] = {}
        self.consumers: dict[int, Consumer] = {}
        self.creating = CreationsUnderWay()
        self._read_holds: set[str] = set()
        self.last_received = time.monotonic()
        self._keepalive = KeepAlive(self, service.config.keepAliveIntervalSeconds)
        self._out: list[bytes | memoryview] = []
        self._out_bytes = 0
        self._flush_scheduled = False
        self.closing = False
        self._write_paused = False
        self._held_permits = HeldPermits()
        self._producer_commands = ProducerCommands(self)
        self._consumer_commands = ConsumerCommands(self)
        # Built once the handshake is done (only CONNECT is served before): thousands of
        # connections that never get in keep fewer objects for the collector to walk.
        self._handlers: dict[int, Callable[[T, bytes | None], None]] | None = None

    def _handler_table(self) -> dict[int, Callable[[T, bytes | None], None]]:
        """The handler of each command type this connection serves."""
        handshake = self.authenticator
        producing = self._producer_commands
        consuming = self._consumer_commands
        topics = TopicCommands(self)
        return {
            T.CONNECT: handshake.on_connect,
            T.AUTH_RESPONSE: handshake.on_auth_response,
            T.PING: self._keepalive.on_ping,
            T.PONG: self._keepalive.on_pong,
            T.PARTITIONED_METADATA: topics.on_partitioned_metadata,
            T.LOOKUP: topics.on_lookup,
            T.GET_TOPICS_OF_NAMESPACE: topics.on_get_topics_of_namespace,
            T.GET_SCHEMA: topics.on_get_schema,
            T.GET_OR_CREATE_SCHEMA: topics.on_get_or_create_schema,
            T.PRODUCER: producing.on_producer,
            T.SEND: producing.on_send,
            T.CLOSE_PRODUCER: producing.on_close_producer,
            T.SUBSCRIBE: consuming.on_subscribe,
            T.FLOW: self._on_flow_unless_paused,
            T.ACK: consuming.on_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: consuming.on_redeliver,
            T.UNSUBSCRIBE: consuming.on_unsubscribe,
            T.CLOSE_CONSUMER: consuming.on_close_consumer,
            T.SEEK: consuming.on_seek,
            T.GET_LAST_MESSAGE_ID: consuming.on_get_last_message_id,
            T.CONSUMER_STATS: consuming.on_consumer_stats,
            **TxnCommands(self, self.service.transactions).table(),
        }

    # --- transport plumbing -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Register the new connection and start its keep-alive checks."""
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.remote_address = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.service.connections.add(self)
        self.service.connection_counts.created += 1
        self.transport.set_write_buffer_limits(high=WRITE_BUFFER_HIGH, low=WRITE_BUFFER_LOW)
        self._keepalive.start()

    def connection_lost(self, exc: Exception | None) -> None:
        """Detach the connection's producers and consumers."""
        self.service.connections.discard(self)
        self.service.connection_counts.closed += 1
        self._keepalive.stop()
        for producer in list(self.producers.values()):
            self._producer_commands.remove_producer(producer)
        for consumer in list(self.consumers.values()):
            self._consumer_commands.remove_consumer(consumer)
        self._held_permits.clear()
        self.transport = None
        if self._on_closed is not None:
            self._on_closed()

    def data_received(self, data: bytes) -> None:
        """Decode the frames ``data`` completes and handle them in order."""
        self.last_received = self.service.received_at = time.monotonic()
        if self._handshake_frames and self.authenticator.connected:
            self._handshake_frames = False
            self.decoder.max_frame_size = self._max_frame
        try:
            frames = self.decoder.feed_sends(data)
        except ProtocolError as exc:
            what = "" if isinstance(exc, FrameTooLargeError) else "malformed frame: "
            self.log_close(f"{what}{exc}")
            self.close()
            return
        sends = self._producer_commands
        try:
            for frame in frames:
                if self.transport is None or self.closing:
                    return
                if isinstance(frame, SendFields) and self._handlers is not None:
                    sends.on_scanned_send(frame)  # the hot path: a SEND read without protobuf
                    continue
                sends.flush_sends()  # the SENDs before any other command are published first
                if not self._handle(frame):
                    return
        finally:
            sends.flush_sends()  # the SENDs at the end of the read (of one producer: together)

    def _handle(self, frame: Frame | SendFields) -> bool:
        """Hand one command to its handler; False when the connection closes because of it."""
        if isinstance(frame, SendFields):  # a SEND before the handshake
            frame = Frame(frame.base_command(), frame.entry)
        command, entry = frame
        handlers = self._handlers  # per frame: a CONNECT read with it may build the table
        if handlers is None:
            handler = self._handler_before_table(command.type)
        else:  # a plain lookup, no call
            handler = handlers.get(command.type)
        if handler is None:
            if not self.authenticator.connected:
                self.log_close("command before CONNECT")
                self.close()
                return False
            self._unsupported(command)
            return True
        problem = invalid_command(command)
        if problem is not None:
            log.warning("closing connection from %s: %s", self.remote_address, problem)
            self.close()
            return False
        try:
            handler(command, entry)
        except Exception:
            log.exception(
                "error handling %s from %s", T.Type.Name(command.type), self.remote_address
            )
            self.close()
            return False
        return True

    def _handler_before_table(self, kind: int) -> Callable[[T, bytes | None], None] | None:
        """Without a table: CONNECT's before the handshake; after it, the table's (built now)."""
        if not self.authenticator.connected:
            return self.authenticator.on_connect if kind == T.CONNECT else None
        self._handlers = self._handler_table()
        return self._handlers.get(kind)

    def write(self, frame: bytes) -> None:
        """Queue a frame; everything queued in one loop iteration goes out in one write."""
        if self.transport is None or self.closing:
            return
        self._out.append(frame)
        self._queued(len(frame))

    def write_frames(self, frames: list[bytes | memoryview]) -> None:
        """Queue several frames (see :meth:`write`)."""
        if self.transport is None or self.closing:
            return
        self._out.extend(frames)
        self._queued(sum(map(len, frames)))

    def _queued(self, size: int) -> None:
        self._out_bytes += size
        if self._out_bytes >= FLUSH_NOW_BYTES:
            # Hand it to the transport now, so that crossing the high-water mark pauses the
            # dispatchers before they queue more in this same loop iteration.
            self._flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out, self._out = self._out, []
        self._out_bytes = 0
        if self.transport is not None and out:
            self.transport.writelines(out)

    def close(self) -> None:
        """Flush what is queued and close; abort if the peer has not taken it after a grace."""
        transport = self.transport
        if transport is None or self.closing:
            return
        self._flush()
        self.closing = True
        if transport.is_closing():
            return  # already going (a TLS peer said goodbye): closing twice breaks TLS transports
        transport.close()
        if transport.get_write_buffer_size() > 0:
            asyncio.get_running_loop().call_later(CLOSE_GRACE_SECONDS, self.abort)

    def abort(self) -> None:
        """Drop the connection now, discarding unsent data."""
        self.closing = True
        if self.transport is not None:
            self.transport.abort()

    @property
    def is_write_paused(self) -> bool:
        """The write buffer is above its high-water mark: send this connection nothing more."""
        return self._write_paused

    def pause_writing(self) -> None:
        """The write buffer is full: stop reading and hold back the consumers' permits."""
        self._write_paused = True
        if self.transport is not None and not self.closing:
            self.hold_reading(WRITES)
        self._held_permits.take_from(self.consumers)

    def resume_writing(self) -> None:
        """The write buffer drained: read again and hand the held permits back."""
        self._write_paused = False
        self.release_reading(WRITES)
        self._held_permits.give_back(self.consumers)

    def hold_reading(self, reason: str) -> None:
        """Stop reading from the peer until every reason is released."""
        if not self._read_holds and self.transport is not None:
            self.transport.pause_reading()
        self._read_holds.add(reason)

    def release_reading(self, reason: str) -> None:
        """Drop one reason to hold reading; reading resumes once none is left."""
        if reason not in self._read_holds:
            return
        self._read_holds.discard(reason)
        if not self._read_holds and self.transport is not None and not self.closing:
            self.transport.resume_reading()

    @property
    def is_open(self) -> bool:
        """The connection is up (replies can still be written)."""
        return self.transport is not None

    def pending_write_bytes(self) -> int:
        """Bytes written to the connection that the peer has not taken yet."""
        return 0 if self.transport is None else self.transport.get_write_buffer_size()

    def peer_common_name(self) -> str | None:
        """The common name of the TLS client certificate, or None without one."""
        return peer_common_name(self.transport)

    # --- authentication (the handshake is handled by the authenticator) ------------------------

    @property
    def connected(self) -> bool:
        """CONNECTED was sent: the connection may carry other commands."""
        return self.authenticator.connected

    @property
    def client_version(self) -> str:
        """The client library and version the client announced in CONNECT ("" before)."""
        return self.authenticator.client_version

    @property
    def auth_role(self) -> str | None:
        """The authenticated role (None while authentication is off or not yet done)."""
        return self.authenticator.role

    @property
    def auth_expires_at(self) -> float | None:
        """When the connection's credentials expire (seconds since the epoch; None: never)."""
        return self.authenticator.expires_at

    def check_credentials_expiry(self, now: float) -> None:
        """Challenge (or close) the connection if its credentials expired by ``now``."""
        self.authenticator.check_credentials_expiry(now)

    # --- async steps of the command handlers --------------------------------------------------

    def fail(self, request: Message, exc: BrokerServiceError) -> None:
        """Answer ``request`` with its error reply (a PRODUCER or SUBSCRIBE is then over)."""
        self.write(error_reply(request, exc))
        self.creating.failed(request)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run ``coro`` as a background task of the broker service."""
        task = asyncio.get_running_loop().create_task(coro)
        self.service.background.add(task)
        task.add_done_callback(self.service.background.discard)

    def await_then(
        self,
        request: Message,
        work: Coroutine[Any, Any, _R],
        then: Callable[[_R], None],
        what: str,
    ) -> None:
        """Run ``work`` off the hot path, then ``then`` with its result while the connection
        is open; a failure answers ``request`` instead, and an unexpected one is also logged."""

        async def run() -> None:
            try:
                result = await work
            except BrokerServiceError as exc:
                self.fail(request, exc)
                return
            except Exception as exc:  # never leave a request unanswered
                log.exception("%s failed", what)
                self.fail(request, BrokerServiceError(f"{what} failed: {exc!r}"))
                return
            if self.transport is not None:  # the connection may have closed meanwhile
                then(result)

        self.spawn(run())

    def load_then(
        self,
        request: Message,
        topic_name: TopicName,
        create: bool,
        then: Callable[[TopicApi], None],
    ) -> None:
        """Load the topic off the hot path, then run ``then`` (or answer the request's error)."""
        work = load_topic(self.service, topic_name, create)
        self.await_then(request, work, then, f"loading topic {topic_name}")

    def persist_then(
        self,
        request: Message,
        then: Callable[[], None],
        always: Callable[[], None] | None = None,
        undo: Callable[[], None] | None = None,
    ) -> None:
        """Store the durable cursor changes made so far, then run ``then`` (and ``always``,
        whether storing succeeded or not).

        A state change that a client is told about (a new subscription, an unsubscribe, a
        seek) must survive a crash from the moment the client hears of it; when storing fails,
        ``undo`` runs at once (before any other write can store the change), so that the
        failure the client hears of means nothing changed.
        """
        work = persist_cursors(self.service, always, undo)
        self.await_then(request, work, lambda _: then(), "storing the cursors")

    # --- producers and consumers (their commands are handled by the classes delegated to) ----

    def receipt_sent(self, producer_id: int, *, newest: bool = False) -> None:
        """A send of ``producer_id`` is answered (receipt or error): give its bytes back."""
        self._producer_commands.receipt_sent(producer_id, newest=newest)

    def receipts_sent(self, producer_id: int, count: int) -> None:
        """The ``count`` oldest sends of ``producer_id`` are answered: give their bytes back."""
        self._producer_commands.receipts_sent(producer_id, count)

    def disconnect_producer(self, producer: Producer) -> None:
        """Close a producer from the broker side; the client creates it again."""
        self._producer_commands.disconnect_producer(producer)

    def disconnect_consumer(self, consumer: Consumer) -> None:
        """Close a consumer from the broker side; the client subscribes again."""
        self._consumer_commands.disconnect_consumer(consumer)

    @property
    def pending_send_bytes(self) -> int:
        """Bytes of the sends on this connection still awaiting their receipt."""
        return self._producer_commands.pending_send_bytes

    @property
    def reading_paused_for_sends(self) -> bool:
        """Reading is held because too many sent bytes await their receipt."""
        return self._producer_commands.reading_paused

    def _on_flow_unless_paused(self, command: T, entry: bytes | None) -> None:
        if self._write_paused:
            flow = command.flow
            consumer = self.consumers.get(flow.consumer_id)
            if consumer is not None:
                self._held_permits.hold(flow.consumer_id, consumer, flow.messagePermits)
            return
        self._consumer_commands.on_flow(command, entry)

    def log_close(self, why: str) -> None:
        """Log why the connection closes; at most once an interval before the handshake (a
        peer that never identified itself can repeat this at will)."""
        if self.authenticator.connected:
            log.warning("closing connection from %s: %s", self.remote_address, why)
        else:
            _handshake_log.log(
                logging.WARNING,
                "closing connection from %s before its handshake completed: %s",
                self.remote_address,
                why,
            )

    def _unsupported(self, command: T) -> None:
        name = T.Type.Name(command.type)
        reply = unsupported_reply(command)
        if reply is None:
            log.warning("closing connection from %s: unsupported %s", self.remote_address, name)
            self.close()
            return
        log.info("unsupported command %s from %s", name, self.remote_address)
        self.write(reply)
