#!/usr/bin/env python3
"""Replay pre-built SEND frames over one raw TCP connection: the broker's publish path alone.

No Pulsar client library is involved. The script does CONNECT, PARTITIONED_METADATA, LOOKUP
and PRODUCER with hand-built frames, builds K SEND frames up front (each one message of
``--size`` bytes, or a batch of ``--batch-size`` messages), then writes them as fast as the
socket takes them while keeping at most ``--window`` SENDs without a SEND_RECEIPT. The clock
runs from the first byte written to the last receipt read.

Frame layout (Pulsar's binary protocol), all integers big-endian u32 unless noted:

    [totalSize][cmdSize][BaseCommand{SEND}][0x0e01 u16][crc32c][metaSize][MessageMetadata][payload]

    crc32c covers metaSize + MessageMetadata + payload.
    A batch payload is B times [u32 size][SingleMessageMetadata][message bytes].

    .venv/bin/python bench/replay_send.py --service-url pulsar://127.0.0.1:6650
    .venv/bin/python bench/replay_send.py --batch-size 100 --frames 4000
"""

from __future__ import annotations

import argparse
import json
import selectors
import socket
import struct
import sys
import time
import uuid
from urllib.parse import urlparse

import crc32c

from starquake.protocol._generated import starquake_wire_pb2 as pb

_U32 = struct.Struct(">I")
_CHECKSUM_MAGIC = b"\x0e\x01"
_PROTOCOL_VERSION = 20
Type = pb.BaseCommand.Type
# Serialized BaseCommand starts with field 1 (type) as a one-byte varint: 0x08, then the value.
_RECEIPT_PREFIX = bytes([0x08, Type.SEND_RECEIPT])


class BrokerError(RuntimeError):
    """The broker refused a request or the connection ended early."""


def simple_frame(cmd: pb.BaseCommand) -> bytes:
    """[totalSize][cmdSize][BaseCommand] for a command without payload."""
    body = cmd.SerializeToString()
    return _U32.pack(len(body) + 4) + _U32.pack(len(body)) + body


def payload_frame(cmd: pb.BaseCommand, metadata: pb.MessageMetadata, payload: bytes) -> bytes:
    """A SEND frame with checksum, as the official clients write it."""
    cmd_bytes = cmd.SerializeToString()
    meta_bytes = metadata.SerializeToString()
    checked = _U32.pack(len(meta_bytes)) + meta_bytes + payload
    total = 4 + len(cmd_bytes) + 2 + 4 + len(checked)
    return b"".join(
        (
            _U32.pack(total),
            _U32.pack(len(cmd_bytes)),
            cmd_bytes,
            _CHECKSUM_MAGIC,
            _U32.pack(crc32c.crc32c(checked)),
            checked,
        )
    )


def batch_payload(first_sequence_id: int, count: int, message: bytes) -> bytes:
    """Uncompressed batch body: per message [u32 size][SingleMessageMetadata][bytes]."""
    parts: list[bytes] = []
    for i in range(count):
        single = pb.SingleMessageMetadata(
            payload_size=len(message), sequence_id=first_sequence_id + i
        ).SerializeToString()
        parts += (_U32.pack(len(single)), single, message)
    return b"".join(parts)


def build_send_frames(
    producer_id: int, producer_name: str, frames: int, batch_size: int, size: int
) -> list[bytes]:
    """K SEND frames with consecutive sequence ids; batch_size 1 means unbatched messages."""
    message = bytes(i % 251 for i in range(size))
    publish_time = int(time.time() * 1000)
    out: list[bytes] = []
    for k in range(frames):
        seq = k * batch_size
        send = pb.CommandSend(producer_id=producer_id, sequence_id=seq)
        metadata = pb.MessageMetadata(
            producer_name=producer_name, sequence_id=seq, publish_time=publish_time
        )
        if batch_size > 1:
            send.num_messages = batch_size
            payload = batch_payload(seq, batch_size, message)
            metadata.num_messages_in_batch = batch_size
            metadata.uncompressed_size = len(payload)
        else:
            payload = message
        cmd = pb.BaseCommand(type=Type.SEND, send=send)
        out.append(payload_frame(cmd, metadata, payload))
    return out


class Connection:
    """A raw socket plus a receive buffer that yields whole frames (command bytes, rest)."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def send(self, cmd: pb.BaseCommand) -> None:
        """Write one command frame."""
        self.sock.sendall(simple_frame(cmd))

    def frames(self) -> list[tuple[bytes, memoryview]]:
        """Split off every complete frame in the buffer: (BaseCommand bytes, remainder)."""
        out: list[tuple[bytes, memoryview]] = []
        buf = self.buf
        pos = 0
        n = len(buf)
        while n - pos >= 8:
            (total,) = _U32.unpack_from(buf, pos)
            end = pos + 4 + total
            if end > n:
                break
            (cmd_size,) = _U32.unpack_from(buf, pos + 4)
            cmd = bytes(buf[pos + 8 : pos + 8 + cmd_size])
            out.append((cmd, memoryview(bytes(buf[pos + 8 + cmd_size : end]))))
            pos = end
        if pos:
            del buf[:pos]
        return out

    def fill(self) -> int:
        """Read what the socket has into the buffer; the bytes read."""
        data = self.sock.recv(1 << 20)
        if not data:
            raise BrokerError("connection closed by broker")
        self.buf += data
        return len(data)

    def request(self, cmd: pb.BaseCommand, want: set[int]) -> pb.BaseCommand:
        """Send cmd and block until a reply of one of the wanted types (PINGs answered)."""
        self.send(cmd)
        return self.wait_for(want)

    def wait_for(self, want: set[int]) -> pb.BaseCommand:
        """Block until a reply of one of the wanted types (PINGs answered)."""
        while True:
            for raw, _rest in self.frames():
                reply = pb.BaseCommand.FromString(raw)
                if reply.type == Type.PING:
                    self.send(pb.BaseCommand(type=Type.PONG, pong=pb.CommandPong()))
                elif reply.type in want:
                    return reply
                elif reply.type == Type.ERROR:
                    raise BrokerError(f"ERROR {reply.error.error}: {reply.error.message}")
            self.fill()


def handshake(conn: Connection, topic: str, producer_id: int) -> str:
    """CONNECT, lookup as the official client does, PRODUCER; returns the producer name."""
    conn.request(
        pb.BaseCommand(
            type=Type.CONNECT,
            connect=pb.CommandConnect(
                client_version="starquake-bench-replay",
                auth_method_name="none",
                protocol_version=_PROTOCOL_VERSION,
            ),
        ),
        {Type.CONNECTED},
    )
    meta = conn.request(
        pb.BaseCommand(
            type=Type.PARTITIONED_METADATA,
            partition_metadata=pb.CommandPartitionedTopicMetadata(topic=topic, request_id=1),
        ),
        {Type.PARTITIONED_METADATA_RESPONSE},
    )
    if meta.partition_metadata_response.partitions:
        raise BrokerError(f"{topic} is partitioned; replay needs a plain topic")
    lookup = conn.request(
        pb.BaseCommand(
            type=Type.LOOKUP,
            lookup_topic=pb.CommandLookupTopic(topic=topic, request_id=2),
        ),
        {Type.LOOKUP_RESPONSE},
    )
    if lookup.lookup_topic_response.response == pb.CommandLookupTopicResponse.Failed:
        raise BrokerError(f"lookup failed: {lookup.lookup_topic_response.message}")
    reply = conn.request(
        pb.BaseCommand(
            type=Type.PRODUCER,
            producer=pb.CommandProducer(
                topic=topic,
                producer_id=producer_id,
                request_id=3,
                user_provided_producer_name=False,
            ),
        ),
        {Type.PRODUCER_SUCCESS},
    )
    while not reply.producer_success.producer_ready:
        reply = conn.wait_for({Type.PRODUCER_SUCCESS})
    return str(reply.producer_success.producer_name)


def blast(conn: Connection, frames: list[bytes], window: int) -> float:
    """Write every frame keeping <= window unreceipted; return seconds to the last receipt."""
    sock = conn.sock
    sock.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ | selectors.EVENT_WRITE)
    total = len(frames)
    next_frame = 0
    acked = 0
    out = memoryview(b"")
    max_chunk = 256 * 1024
    writing = True
    start = time.perf_counter()
    while acked < total:
        if not out and next_frame < total and next_frame - acked < window:
            # Gather as many frames as the window allows, up to ~max_chunk bytes.
            limit = min(total, acked + window)
            end = next_frame
            size = 0
            while end < limit and size < max_chunk:
                size += len(frames[end])
                end += 1
            out = memoryview(b"".join(frames[next_frame:end]))
            next_frame = end
        want_write = bool(out)
        if want_write != writing:
            interest = selectors.EVENT_READ | (selectors.EVENT_WRITE if want_write else 0)
            sel.modify(sock, interest)
            writing = want_write
        events = sel.select(timeout=30.0)
        if not events:
            raise TimeoutError(f"no progress for 30 s: {acked}/{total} receipts")
        for _key, mask in events:
            if mask & selectors.EVENT_WRITE and out:
                try:
                    sent = sock.send(out)
                except BlockingIOError:
                    sent = 0
                out = out[sent:]
            if mask & selectors.EVENT_READ:
                try:
                    conn.fill()
                except BlockingIOError:
                    continue
                for raw, _rest in conn.frames():
                    if raw[:2] == _RECEIPT_PREFIX:
                        acked += 1
                        continue
                    cmd = pb.BaseCommand.FromString(raw)
                    if cmd.type == Type.PING:
                        sock.setblocking(True)
                        conn.send(pb.BaseCommand(type=Type.PONG, pong=pb.CommandPong()))
                        sock.setblocking(False)
                    elif cmd.type == Type.SEND_ERROR:
                        err = cmd.send_error
                        raise BrokerError(f"SEND_ERROR seq {err.sequence_id}: {err.message}")
                    elif cmd.type in (Type.ERROR, Type.CLOSE_PRODUCER):
                        raise BrokerError(f"broker sent {Type.Name(cmd.type)}: {cmd}")
    elapsed = time.perf_counter() - start
    sel.close()
    sock.setblocking(True)
    return elapsed


def close_producer(conn: Connection, producer_id: int) -> None:
    """Close the producer, ignoring a broker that does not answer."""
    try:
        conn.sock.settimeout(5.0)
        conn.request(
            pb.BaseCommand(
                type=Type.CLOSE_PRODUCER,
                close_producer=pb.CommandCloseProducer(producer_id=producer_id, request_id=4),
            ),
            {Type.SUCCESS},
        )
    except (OSError, BrokerError):
        pass


def run(
    service_url: str,
    frames: int,
    batch_size: int,
    size: int,
    window: int,
    namespace: str = "public/default",
    topic: str | None = None,
) -> dict[str, object]:
    """One replay: returns the figures as a dict."""
    url = urlparse(service_url)
    host, port = url.hostname or "127.0.0.1", url.port or 6650
    topic = topic or f"persistent://{namespace}/bench-replay-{uuid.uuid4().hex[:12]}"
    conn = Connection(host, port, timeout=30.0)
    try:
        producer_id = 0
        name = handshake(conn, topic, producer_id)
        t0 = time.perf_counter()
        prepared = build_send_frames(producer_id, name, frames, batch_size, size)
        build_s = time.perf_counter() - t0
        seconds = blast(conn, prepared, window)
        close_producer(conn, producer_id)
    finally:
        conn.sock.close()
    messages = frames * batch_size
    return {
        "scenario": "replay-batched" if batch_size > 1 else "replay-unbatched",
        "service_url": service_url,
        "entries": frames,
        "messages": messages,
        "batch_size": batch_size,
        "window": window,
        "seconds": round(seconds, 4),
        "entries_per_s": round(frames / seconds, 1),
        "msgs_per_s": round(messages / seconds, 1),
        "mb_per_s": round(sum(map(len, prepared)) / seconds / 1e6, 3),
        "build_s": round(build_s, 3),
        "size": size,
    }


def main(argv: list[str] | None = None) -> int:
    """Run the replay and print its figures as one JSON line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--service-url", default="pulsar://127.0.0.1:6650")
    p.add_argument("--frames", "-k", type=int, default=100_000, help="SEND frames (entries)")
    p.add_argument(
        "--batch-size", "-b", type=int, default=1, help="messages per SEND; 1 = unbatched"
    )
    p.add_argument("--size", type=int, default=100, help="bytes per message")
    p.add_argument("--window", type=int, default=1000, help="max SENDs without a receipt")
    p.add_argument("--namespace", default="public/default")
    p.add_argument("--topic", help="full topic name; default a fresh uuid topic")
    p.add_argument("--label", default="")
    args = p.parse_args(argv)
    try:
        figures = run(
            args.service_url,
            args.frames,
            args.batch_size,
            args.size,
            args.window,
            args.namespace,
            args.topic,
        )
        figures["ok"] = True
    except (OSError, BrokerError, TimeoutError) as exc:
        figures = {
            "scenario": "replay-batched" if args.batch_size > 1 else "replay-unbatched",
            "service_url": args.service_url,
            "ok": False,
            "error": f"{type(exc).__name__}: {exc}",
        }
    if args.label:
        figures["label"] = args.label
    print(json.dumps(figures), flush=True)
    return 0 if figures["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
