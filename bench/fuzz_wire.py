"""Fuzz a real broker process with a million generated frames (``--frames N`` to change).

Each connection gets a burst of frames: mostly well-framed commands of client command types with
random field values (which create and use producers, subscriptions, flows and acks on a few
topics), sometimes commands of any type, and at most one hostile frame at the end (random bytes,
a truncated frame, a declared size over the limit, garbage protobuf, a SEND with a bad checksum or
garbage metadata). A PING follows every burst: the broker must answer it or close the connection.
At the end an official client must still round-trip a message.

Everything stays on 127.0.0.1; every loop is bounded. Prints a summary (``--json`` for one JSON
object) with frames sent, connections, connections the broker closed, error replies, broker
crashes, hangs, errors in the broker's log and its RSS at start, after warm-up, peak and end.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess

from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.checksum import crc32c
from starquake.protocol.framing import FRAME_PADDING, FrameDecoder, encode_command, encode_entry

T = pb.BaseCommand
FD = FieldDescriptor
MAX_FRAME = 5 * 1024 * 1024 + FRAME_PADDING
TOPICS = [f"persistent://public/default/fz-{n}" for n in range(4)] + [
    "non-persistent://public/default/fz-np"
]
SUBSCRIPTIONS = ["a", "b", "c"] + [f"pool-{n}" for n in range(20)]
HEALTHY_TOPIC = "persistent://public/default/fz-healthy"
SUBCOMMAND_FIELD = {
    f.number: f.name for f in T.DESCRIPTOR.fields if f.message_type and f.number in T.Type.values()
}
ALL_TYPES = sorted(T.Type.values())
CLIENT_TYPES = [
    T.PING,
    T.PONG,
    T.PARTITIONED_METADATA,
    T.LOOKUP,
    T.PRODUCER,
    T.SEND,
    T.SEND,
    T.SEND,
    T.CLOSE_PRODUCER,
    T.SUBSCRIBE,
    T.FLOW,
    T.FLOW,
    T.ACK,
    T.ACK,
    T.REDELIVER_UNACKNOWLEDGED_MESSAGES,
    T.UNSUBSCRIBE,
    T.CLOSE_CONSUMER,
    T.SEEK,
    T.GET_LAST_MESSAGE_ID,
    T.GET_TOPICS_OF_NAMESPACE,
    T.CONSUMER_STATS,
    T.GET_SCHEMA,
]
_INT_LIMITS = {
    FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
    FD.TYPE_SFIXED32: (-(2**31), 2**31 - 1),
    FD.TYPE_UINT32: (0, 2**32 - 1),
    FD.TYPE_FIXED32: (0, 2**32 - 1),
    FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    FD.TYPE_UINT64: (0, 2**64 - 1),
    FD.TYPE_FIXED64: (0, 2**64 - 1),
}


class Generator:
    """Frames from a seeded ``random.Random``: the same seed gives the same run."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def _string(self, name: str) -> str:
        rng = self.rng
        if name in ("topic", "topics_pattern"):
            return rng.choice(TOPICS) if rng.random() < 0.9 else f"bogus:/{rng.random()}"
        if name == "subscription":
            return rng.choice(SUBSCRIPTIONS)
        if name == "namespace":
            return "public/default" if rng.random() < 0.8 else "no/such"
        return "".join(chr(rng.randrange(32, 0x3000)) for _ in range(rng.randrange(8)))

    def _scalar(self, fd: FieldDescriptor) -> Any:
        rng = self.rng
        if fd.type in _INT_LIMITS:
            low, high = _INT_LIMITS[fd.type]
            if rng.random() < 0.8:
                return rng.randrange(max(low, 0), 4)
            return rng.randint(low, high)
        if fd.type == FD.TYPE_BOOL:
            return rng.random() < 0.5
        if fd.type in (FD.TYPE_DOUBLE, FD.TYPE_FLOAT):
            return rng.uniform(-1e6, 1e6)
        if fd.type == FD.TYPE_STRING:
            return self._string(fd.name)
        if fd.type == FD.TYPE_BYTES:
            return rng.randbytes(rng.randrange(16))
        if fd.type == FD.TYPE_ENUM:
            return rng.choice(fd.enum_type.values).number
        raise AssertionError(fd.type)

    def fill(self, message: Any, depth: int = 0) -> None:
        """Set random values on the fields of ``message`` (nested up to a depth)."""
        rng = self.rng
        desc: Descriptor = message.DESCRIPTOR
        for fd in desc.fields:
            if not fd.is_required and rng.random() < 0.6:
                continue
            if fd.type == FD.TYPE_MESSAGE:
                if depth >= 2 and not fd.is_required:
                    continue
                if fd.is_repeated:
                    for _ in range(rng.randrange(3)):
                        self.fill(getattr(message, fd.name).add(), depth + 1)
                else:
                    sub = getattr(message, fd.name)
                    sub.SetInParent()
                    self.fill(sub, depth + 1)
            elif fd.is_repeated:
                getattr(message, fd.name).extend(self._scalar(fd) for _ in range(rng.randrange(3)))
            else:
                setattr(message, fd.name, self._scalar(fd))

    def entry(self) -> bytes:
        """A random message entry: metadata, payload and sometimes a checksum."""
        rng = self.rng
        payload = rng.randbytes(rng.randrange(64))
        meta = pb.MessageMetadata(
            producer_name="fz", sequence_id=rng.randrange(100), publish_time=1 + rng.randrange(9)
        )
        kind = rng.random()
        if kind < 0.6:
            return encode_entry(meta, payload)
        if kind < 0.7:
            entry = bytearray(encode_entry(meta, payload))
            entry[rng.randrange(2, len(entry))] ^= rng.randrange(1, 256)
            return bytes(entry)
        if kind < 0.85:
            self.fill(meta)
            return encode_entry(meta, payload)
        garbage = rng.randbytes(rng.randrange(48))
        declared = len(garbage) if rng.random() < 0.5 else rng.randrange(2**32)
        body = struct.pack(">I", declared) + garbage + payload
        return struct.pack(">HI", 0x0E01, crc32c(body)) + body if rng.random() < 0.7 else body

    def command(self, types: list[int]) -> bytes:
        """A random frame of one of ``types``, sometimes malformed."""
        rng = self.rng
        type_ = rng.choice(types)
        cmd = T(type=type_)  # type: ignore[arg-type]
        field = SUBCOMMAND_FIELD.get(type_ if rng.random() < 0.99 else rng.choice(ALL_TYPES))
        if field is not None:
            sub = getattr(cmd, field)
            sub.SetInParent()
            self.fill(sub)
        body = cmd.SerializePartialToString()
        entry = self.entry() if type_ == T.SEND else b""
        return struct.pack(">II", len(body) + 4 + len(entry), len(body)) + body + entry

    def setup(self) -> list[bytes]:
        """Producers and consumers with ids 0-3, for the random commands that follow to use."""
        rng = self.rng
        frames = []
        for n in range(4):
            cmd = T(type=T.PRODUCER)
            cmd.producer.topic = rng.choice(TOPICS)
            cmd.producer.producer_id = n
            cmd.producer.request_id = n
            frames.append(encode_command(cmd))
            cmd = T(type=T.SUBSCRIBE)
            sub = cmd.subscribe
            sub.topic = rng.choice(TOPICS)
            sub.subscription = rng.choice(SUBSCRIPTIONS)
            sub.subType = rng.choice(pb.CommandSubscribe.SubType.values())  # type: ignore[assignment]
            sub.consumer_id = n
            sub.request_id = 4 + n
            sub.initialPosition = pb.CommandSubscribe.Earliest
            frames.append(encode_command(cmd))
            cmd = T(type=T.FLOW)
            cmd.flow.consumer_id = n
            cmd.flow.messagePermits = rng.randrange(1000)
            frames.append(encode_command(cmd))
        return frames

    def hostile(self) -> tuple[bytes, bool]:
        """A hostile frame, and whether it may leave the broker waiting for more bytes."""
        rng = self.rng
        kind = rng.randrange(5)
        if kind == 0:
            return rng.randbytes(rng.randrange(1, 256)), True
        if kind == 1:
            frame = self.command(CLIENT_TYPES)
            return frame[: rng.randrange(len(frame))], True
        if kind == 2:
            size = rng.randint(MAX_FRAME + 1, 2**32 - 1)
            return struct.pack(">I", size) + rng.randbytes(8), False
        if kind == 3:
            body = rng.randbytes(rng.randrange(64))
            return struct.pack(">II", len(body) + 4, len(body)) + body, False
        return self.command(ALL_TYPES), False


def rss_kb(pid: int) -> int:
    """VmRSS of a process, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Stats:
    """Counters of one run."""

    def __init__(self) -> None:
        self.frames = 0
        self.connections = 0
        self.closed_by_broker = 0
        self.error_replies = 0
        self.hangs = 0
        self.replies = 0


_ERROR_TYPES = {T.ERROR, T.SEND_ERROR}


def _count_replies(frames: list[Any], stats: Stats) -> bool:
    """Count replies; True when a PONG is among them."""
    pong = False
    for frame in frames:
        command = frame.command
        stats.replies += 1
        if command.type in _ERROR_TYPES or (
            command.type == T.ACK_RESPONSE and command.ack_response.HasField("error")
        ):
            stats.error_replies += 1
        elif command.type == T.PONG:
            pong = True
    return pong


def run_connection(port: int, gen: Generator, burst: int, stats: Stats) -> None:
    """One connection: maybe a handshake, a burst of frames, maybe a hostile one, a PING."""
    rng = gen.rng
    frames: list[bytes] = []
    if rng.random() < 0.98:
        frames.append(commands.connect("fuzz-bench", protocol_version=20))
        frames.extend(gen.setup())
    for _ in range(rng.randrange(1, burst + 1)):
        frames.append(gen.command(CLIENT_TYPES if rng.random() < 0.98 else ALL_TYPES))
    may_stall = False
    if rng.random() < 0.3:
        hostile, may_stall = gen.hostile()
        frames.append(hostile)
    stats.connections += 1
    stats.frames += len(frames)
    decoder = FrameDecoder(1 << 31)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(b"".join(frames) + commands.ping())
        except (BrokenPipeError, ConnectionResetError):
            stats.closed_by_broker += 1
            return
        if may_stall:
            sock.settimeout(0.2)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                data = sock.recv(1 << 16)
            except ConnectionResetError:
                data = b""
            except TimeoutError:
                break
            if not data:
                stats.closed_by_broker += 1
                return
            try:
                decoded = decoder.feed(data)
            except Exception:  # the broker never sends malformed frames
                stats.hangs += 1
                return
            if _count_replies(decoded, stats):
                return
        # Neither a PONG nor a close: acceptable only after a frame whose end the broker is
        # still waiting for (we hang up).
        if not may_stall:
            stats.hangs += 1


def healthy_round_trip(url: str) -> bool:
    """Whether the official client can still produce and consume a message."""
    import pulsar

    client = pulsar.Client(
        url, operation_timeout_seconds=10, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
    )
    try:
        consumer = client.subscribe(HEALTHY_TOPIC, "healthy")
        producer = client.create_producer(HEALTHY_TOPIC)
        producer.send(b"still here")
        msg = consumer.receive(timeout_millis=10000)
        consumer.acknowledge(msg)
        return msg.data() == b"still here"
    except Exception:
        return False
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    """Run the fuzzer; exit status 1 if the broker crashed, hung or cannot serve at the end."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frames", type=int, default=1_000_000)
    parser.add_argument("--burst", type=int, default=100, help="most frames per connection")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "-D", dest="defines", action="append", default=[], help="broker setting key=value"
    )
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="sq-fuzz-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data", *args.defines, log_level="ERROR")
        try:
            broker.start(timeout=30)
        except RuntimeError as exc:
            print(exc, file=sys.stderr)
            return 1
        proc, port = broker.proc, broker.port
        assert proc is not None
        try:
            gen = Generator(args.seed)
            stats = Stats()
            rss_start = rss_peak = rss_kb(proc.pid)
            rss_warm = 0
            started = time.monotonic()
            crashes = 0
            while stats.frames < args.frames:
                run_connection(port, gen, args.burst, stats)
                if stats.connections % 50 == 0:
                    if proc.poll() is not None:
                        crashes += 1
                        break
                    rss = rss_kb(proc.pid)
                    rss_peak = max(rss_peak, rss)
                    if not rss_warm and stats.frames >= args.frames // 10:
                        rss_warm = rss
            elapsed = time.monotonic() - started
            if proc.poll() is not None:
                crashes = 1
            rss_end = rss_kb(proc.pid) if not crashes else 0
            rss_peak = max(rss_peak, rss_end)
            healthy = not crashes and healthy_round_trip(f"pulsar://127.0.0.1:{port}")
            broker_log = broker.log()
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    broker.cleanup()
    result = {
        "frames_sent": stats.frames,
        "connections": stats.connections,
        "connections_closed_by_broker": stats.closed_by_broker,
        "replies": stats.replies,
        "error_replies": stats.error_replies,
        "broker_crashes": crashes,
        "hangs": stats.hangs,
        "tracebacks_in_broker_log": broker_log.count("Traceback"),
        "rss_kb_start": rss_start,
        "rss_kb_after_warmup": rss_warm or rss_end,
        "rss_kb_peak": rss_peak,
        "rss_kb_end": rss_end,
        "elapsed_s": round(elapsed, 1),
        "frames_per_s": round(stats.frames / elapsed) if elapsed else 0,
        "healthy_client_round_trip": healthy,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:32} {value}")
        if result["tracebacks_in_broker_log"]:
            print(broker_log[-5000:])
    ok = not crashes and not stats.hangs and healthy and not result["tracebacks_in_broker_log"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
