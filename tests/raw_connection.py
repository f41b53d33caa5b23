"""A binary-protocol connection driven by hand (over TLS when given a context): for sending
what no real client would, and reading the broker's raw answers."""

from __future__ import annotations

import socket
import ssl

from starquake.protocol import client_commands, commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.enums import InitialPosition
from starquake.protocol.framing import FrameDecoder, encode_command

T = pb.BaseCommand


class RawConnection:
    """One connection to ``host:port``; TLS with ``context`` when given."""

    def __init__(
        self, port: int, context: ssl.SSLContext | None = None, host: str = "127.0.0.1"
    ) -> None:
        plain = socket.create_connection((host, port), timeout=5)
        if context is None:
            self.sock: socket.socket = plain
        else:
            try:
                self.sock = context.wrap_socket(plain, server_hostname=host)
            except BaseException:
                plain.close()
                raise
        self.decoder = FrameDecoder()
        self.frames: list[pb.BaseCommand] = []

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        """Send bytes as they are (frames, or garbage)."""
        self.sock.sendall(data)

    def send_command(self, cmd: pb.BaseCommand) -> None:
        self.sock.sendall(encode_command(cmd))

    def next(self, timeout: float = 5) -> pb.BaseCommand:
        """The broker's next command (ConnectionError if it closes, TimeoutError if silent)."""
        self.sock.settimeout(timeout)
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by the broker")
            self.frames.extend(f.command for f in self.decoder.feed(data))
        return self.frames.pop(0)

    def subscribe(
        self, topic: str, subscription: str, sub_type: int, consumer_id: int, priority: int = 0
    ) -> list[pb.BaseCommand]:
        """SUBSCRIBE durable consumer ``c{consumer_id}`` (of ``priority``, its request id the
        consumer id) from the earliest message; wait for its SUCCESS. The ACTIVE_CONSUMER_CHANGE
        frames that came before it are returned."""
        cmd = client_commands.subscribe(
            topic,
            subscription,
            sub_type,
            consumer_id,
            consumer_id,
            consumer_name=f"c{consumer_id}",
            durable=True,
            initial_position=InitialPosition.Earliest,
            read_compacted=False,
            metadata={},
        )
        cmd.subscribe.priority_level = priority
        self.send_command(cmd)
        notices = []
        while (reply := self.next()).type != T.SUCCESS:
            assert reply.type == T.ACTIVE_CONSUMER_CHANGE, reply
            notices.append(reply)
        return notices

    def settled(self) -> list[pb.BaseCommand]:
        """What the broker sends until it has surely handled everything sent before: two PING
        round trips. A command's effects that run in the broker's next loop turn (a dispatch
        pass a FLOW starts) may follow the first PONG when the command and the PING were read
        together, never the second."""
        frames = []
        for _ in range(2):
            self.send_command(T(type=T.PING))
            while (frame := self.next()).type != T.PONG:
                frames.append(frame)
        return frames

    def handshake(self) -> pb.BaseCommand:
        """CONNECT without credentials; the broker's CONNECTED (asserted)."""
        self.send(commands.connect("raw-test"))
        reply = self.next()
        assert reply.type == T.CONNECTED, reply
        return reply

    def connect(
        self, method: str | None = None, data: bytes | None = None, *, refresh: bool = True
    ) -> None:
        """Send CONNECT with credentials (``method``, ``data``), announcing auth refresh."""
        cmd = T(type=T.CONNECT)
        cmd.connect.client_version = "raw-auth-test"
        cmd.connect.protocol_version = commands.MAX_PROTOCOL_VERSION
        if method is not None:
            cmd.connect.auth_method_name = method
        if data is not None:
            cmd.connect.auth_data = data
        cmd.connect.feature_flags.supports_auth_refresh = refresh
        self.send_command(cmd)

    def lookup(self, topic: str, listener: str = "") -> pb.CommandLookupTopicResponse:
        cmd = T(type=T.LOOKUP)
        cmd.lookup_topic.topic = topic
        cmd.lookup_topic.request_id = 7
        if listener:
            cmd.lookup_topic.advertised_listener_name = listener
        self.send_command(cmd)
        reply = self.next()
        assert reply.type == T.LOOKUP_RESPONSE
        return reply.lookup_topic_response

    def closed(self, timeout: float = 5) -> bool:
        """Whether the broker closes the connection within ``timeout`` (what it sends until
        then is skipped)."""
        self.sock.settimeout(timeout)
        try:
            while self.sock.recv(65536):
                pass
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return True
