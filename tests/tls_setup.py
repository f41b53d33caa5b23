"""Brokers with TLS ports for the TLS tests, and a hand-driven TLS connection for reading the
broker's raw answers."""

from __future__ import annotations

import socket
import ssl
import uuid
from pathlib import Path
from typing import Any

from tls_certs import Pki

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import FrameDecoder, encode_command

T = pb.BaseCommand


def tls_broker(data_dir: Path, pki: Pki, **overrides: Any) -> EmbeddedBroker:
    """A broker (not started) with TLS binary and HTTPS ports on free ports, serving ``pki``'s
    broker certificate, besides its plaintext ports (``overrides`` may turn them off)."""
    settings: dict[str, Any] = {
        "brokerServicePortTls": 0,
        "webServicePortTls": 0,
        "tlsCertificateFilePath": str(pki.broker_cert),
        "tlsKeyFilePath": str(pki.broker_key),
    }
    settings.update(overrides)
    return EmbeddedBroker(data_dir, **settings)


def client_context(
    ca: Path,
    cert: tuple[Path, Path] | None = None,
    *,
    minimum: ssl.TLSVersion | None = None,
    maximum: ssl.TLSVersion | None = None,
) -> ssl.SSLContext:
    """A Python SSL client context trusting ``ca`` (host names checked), optionally presenting
    ``cert`` = (certificate, key) and limited to the given TLS versions."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    if minimum is not None:
        context.minimum_version = minimum
    if maximum is not None:
        context.maximum_version = maximum
    return context


class RawTlsConnection:
    """A binary-protocol connection over TLS, driven by hand."""

    def __init__(self, port: int, context: ssl.SSLContext, host: str = "127.0.0.1") -> None:
        plain = socket.create_connection((host, port), timeout=5)
        try:
            self.sock = context.wrap_socket(plain, server_hostname=host)
        except BaseException:
            plain.close()
            raise
        self.decoder = FrameDecoder()
        self.frames: list[pb.BaseCommand] = []

    def __enter__(self) -> RawTlsConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def next(self, timeout: float = 5) -> pb.BaseCommand:
        self.sock.settimeout(timeout)
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("closed by broker")
            self.frames.extend(f.command for f in self.decoder.feed(data))
        return self.frames.pop(0)

    def handshake(self) -> pb.BaseCommand:
        """CONNECT; the broker's answer."""
        self.send(commands.connect("raw-tls-test"))
        return self.next()

    def lookup(self, topic: str, listener: str = "") -> pb.CommandLookupTopicResponse:
        cmd = T(type=T.LOOKUP)
        cmd.lookup_topic.topic = topic
        cmd.lookup_topic.request_id = 7
        if listener:
            cmd.lookup_topic.advertised_listener_name = listener
        self.send(encode_command(cmd))
        reply = self.next()
        assert reply.type == T.LOOKUP_RESPONSE
        return reply.lookup_topic_response


def round_trip(client: Any, earliest: Any, count: int = 20) -> None:
    """Produce ``count`` messages on a new topic and consume them back, in order, with
    ``client`` (the official client or Starquake's: they have the same API; ``earliest`` is
    that client's ``InitialPosition.Earliest``)."""
    topic = f"persistent://public/default/tls-{uuid.uuid4().hex[:10]}"
    consumer = client.subscribe(topic, "sub", initial_position=earliest)
    producer = client.create_producer(topic, block_if_queue_full=True)
    for i in range(count):
        producer.send(f"m-{i}".encode())
    got = []
    for _ in range(count):
        msg = consumer.receive(5000)
        consumer.acknowledge(msg)
        got.append(msg.data())
    assert got == [f"m-{i}".encode() for i in range(count)]
    producer.close()
    consumer.close()
