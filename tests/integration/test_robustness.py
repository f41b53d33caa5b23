"""Bad input over raw sockets: the offending connection is closed, everyone else is served."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest
from official_client import official_client
from raw_connection import RawConnection

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import encode_command, encode_entry

T = pb.BaseCommand
EARLIEST = pulsar.InitialPosition.Earliest


@pytest.fixture
def connect() -> Iterator[Callable[[int], RawConnection]]:
    opened: list[RawConnection] = []

    def open_raw(port: int) -> RawConnection:
        raw = RawConnection(port)
        opened.append(raw)
        return raw

    yield open_raw
    for raw in opened:
        raw.close()


def _producer_command(topic: str, initial_subscription: str | None = None) -> bytes:
    cmd = T(type=T.PRODUCER)
    cmd.producer.topic = topic
    cmd.producer.producer_id = 1
    cmd.producer.request_id = 1
    if initial_subscription is not None:
        cmd.producer.initial_subscription_name = initial_subscription
    return encode_command(cmd)


def _producer(raw: RawConnection, topic: str) -> None:
    raw.send(_producer_command(topic))
    reply = raw.next()
    assert reply.type == T.PRODUCER_SUCCESS, reply


def _send_frame(
    producer_id: int, sequence_id: int, payload: bytes, *, checksum: bool = True
) -> bytes:
    meta = pb.MessageMetadata(producer_name="raw", sequence_id=sequence_id, publish_time=1)
    entry = encode_entry(meta, payload, checksum=checksum)
    return commands.send_frame_header(producer_id, sequence_id, len(entry)) + entry


def _still_serving(broker: EmbeddedBroker, topic: str) -> None:
    client = official_client(broker)
    try:
        producer = client.create_producer(topic)
        consumer = client.subscribe(topic, "check", initial_position=EARLIEST)
        producer.send(b"still here")
        found = False
        while not found:
            found = consumer.receive(timeout_millis=5000).data() == b"still here"
    finally:
        client.close()


@pytest.mark.parametrize(
    "garbage",
    [
        b"\xff" * 64,  # absurd frame size
        b"\x00\x00\x00\x02\x00\x00",  # frame smaller than its header
        b"\x00\x00\x00\x10\x00\x00\x00\x0c" + b"\x99" * 12,  # not a protobuf command
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",  # wrong protocol
    ],
    ids=["huge-size", "tiny-size", "bad-protobuf", "http"],
)
def test_garbage_closes_only_that_connection(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str, garbage: bytes
) -> None:
    raw = connect(broker.broker_port)
    raw.send(garbage)
    assert raw.closed()
    _still_serving(broker, topic)


def test_command_before_connect_closes(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str
) -> None:
    raw = connect(broker.broker_port)
    raw.send(commands.ping())
    assert raw.closed()
    _still_serving(broker, topic)


def test_bad_checksum_gets_send_error_and_connection_stays(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str
) -> None:
    raw = connect(broker.broker_port)
    raw.handshake()
    _producer(raw, topic)
    frame = bytearray(_send_frame(1, 0, b"payload"))
    frame[-1] ^= 0x55
    raw.send(bytes(frame))
    reply = raw.next()
    assert reply.type == T.SEND_ERROR
    assert reply.send_error.error == pb.ChecksumError
    raw.send(_send_frame(1, 1, b"good"))
    reply = raw.next()
    assert reply.type == T.SEND_RECEIPT
    assert reply.send_receipt.sequence_id == 1


def test_message_without_checksum_is_stored(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str
) -> None:
    raw = connect(broker.broker_port)
    raw.handshake()
    _producer(raw, topic)
    raw.send(_send_frame(1, 0, b"no-crc", checksum=False))
    assert raw.next().type == T.SEND_RECEIPT
    client = official_client(broker)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        assert reader.read_next(5000).data() == b"no-crc"
    finally:
        client.close()


def test_oversize_message_refused_connection_kept(
    connect: Callable[[int], RawConnection], tmp_path: Path, topic: str
) -> None:
    with EmbeddedBroker(f"{tmp_path}/data", maxMessageSize=1024) as broker:
        raw = connect(broker.broker_port)
        raw.handshake()
        _producer(raw, topic)
        raw.send(_send_frame(1, 0, b"x" * 2000))
        reply = raw.next()
        assert reply.type == T.SEND_ERROR
        assert "maxMessageSize" in reply.send_error.message
        raw.send(_send_frame(1, 1, b"small"))
        assert raw.next().type == T.SEND_RECEIPT


def test_frame_over_max_size_closes_connection(
    connect: Callable[[int], RawConnection], tmp_path: Path, topic: str
) -> None:
    with EmbeddedBroker(f"{tmp_path}/data", maxMessageSize=1024) as broker:
        raw = connect(broker.broker_port)
        raw.handshake()
        _producer(raw, topic)
        raw.send(_send_frame(1, 0, b"x" * 20000))
        assert raw.closed()
        _still_serving(broker, topic)


def test_send_for_unknown_producer_closes_connection(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str
) -> None:
    raw = connect(broker.broker_port)
    raw.handshake()
    raw.send(_send_frame(42, 0, b"x"))
    assert raw.closed()


def test_unknown_request_gets_error(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker
) -> None:
    raw = connect(broker.broker_port)
    raw.handshake()
    cmd = T(type=T.GET_SCHEMA)
    cmd.get_schema.request_id = 7
    cmd.get_schema.topic = "persistent://public/default/x"
    raw.send(encode_command(cmd))
    reply = raw.next()
    assert reply.type == T.GET_SCHEMA_RESPONSE
    assert reply.get_schema_response.request_id == 7


def test_lookup_of_missing_namespace_fails_inside_response(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker
) -> None:
    raw = connect(broker.broker_port)
    raw.handshake()
    cmd = T(type=T.LOOKUP)
    cmd.lookup_topic.topic = "persistent://nope/nope/t"
    cmd.lookup_topic.request_id = 3
    raw.send(encode_command(cmd))
    reply = raw.next()
    assert reply.type == T.LOOKUP_RESPONSE
    assert reply.lookup_topic_response.response == pb.CommandLookupTopicResponse.Failed
    assert reply.lookup_topic_response.error == pb.TopicNotFound
    cmd = T(type=T.PARTITIONED_METADATA)
    cmd.partition_metadata.topic = "persistent://nope/nope/t"
    cmd.partition_metadata.request_id = 4
    raw.send(encode_command(cmd))
    reply = raw.next()
    failed = pb.CommandPartitionedTopicMetadataResponse.Failed
    assert reply.partition_metadata_response.response == failed


def test_broker_answers_ping_and_pings_idle_clients(
    connect: Callable[[int], RawConnection], tmp_path: Path
) -> None:
    with EmbeddedBroker(f"{tmp_path}/data", keepAliveIntervalSeconds=1) as broker:
        raw = connect(broker.broker_port)
        raw.handshake()
        raw.send(commands.ping())
        assert raw.next().type == T.PONG
        assert raw.next(timeout=4).type == T.PING
        raw.send(commands.pong())
        # Without replies the broker gives up on the connection.
        assert raw.next(timeout=4).type == T.PING
        assert raw.closed(timeout=4)


def test_connected_advertises_max_message_size(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker
) -> None:
    raw = connect(broker.broker_port)
    raw.send(commands.connect("raw-test", protocol_version=15))
    reply = raw.next()
    assert reply.connected.max_message_size == 5 * 1024 * 1024
    assert reply.connected.protocol_version == 15


def test_health_endpoint(broker: EmbeddedBroker) -> None:
    with urllib.request.urlopen(f"{broker.web_service_url}/admin/v2/brokers/health") as resp:
        assert resp.status == 200
        assert resp.read() == b"ok"


def test_many_clients_interleaved(broker: EmbeddedBroker, topic: str) -> None:
    clients = [official_client(broker) for _ in range(4)]
    try:
        consumer = clients[0].subscribe(topic, "all", initial_position=EARLIEST)
        producers = [c.create_producer(topic, batching_enabled=False) for c in clients]
        for i in range(50):
            for n, p in enumerate(producers):
                p.send_async(f"{n}-{i}".encode(), None)
        for p in producers:
            p.flush()
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 200 and time.monotonic() < deadline:
            msg = consumer.receive(timeout_millis=5000)
            got.append(msg.data())
            consumer.acknowledge(msg)
        assert sorted(got) == sorted(f"{n}-{i}".encode() for n in range(4) for i in range(50))
        for n in range(4):
            mine = [g for g in got if g.startswith(f"{n}-".encode())]
            assert mine == [f"{n}-{i}".encode() for i in range(50)]
    finally:
        for c in clients:
            c.close()


def test_failover_active_consumer_follows_priority(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str
) -> None:
    raw = connect(broker.broker_port)
    raw.handshake()
    for consumer_id, name, priority in ((1, "low", 2), (2, "high", 0)):
        cmd = T(type=T.SUBSCRIBE)
        sub = cmd.subscribe
        sub.topic = topic
        sub.subscription = "fo"
        sub.subType = pb.CommandSubscribe.Failover
        sub.consumer_id = consumer_id
        sub.request_id = consumer_id
        sub.consumer_name = name
        sub.priority_level = priority
        raw.send(encode_command(cmd))
    active: dict[int, bool] = {}
    successes = 0
    while successes < 2 or len(active) < 2:
        reply = raw.next()
        if reply.type == T.SUCCESS:
            successes += 1
        elif reply.type == T.ACTIVE_CONSUMER_CHANGE:
            change = reply.active_consumer_change
            active[change.consumer_id] = change.is_active
    assert active == {1: False, 2: True}


def test_producer_creates_its_initial_subscription(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str
) -> None:
    raw = connect(broker.broker_port)
    raw.handshake()
    raw.send(_producer_command(topic, "dlq-sub"))
    assert raw.next().type == T.PRODUCER_SUCCESS
    raw.send(_send_frame(1, 0, b"kept"))
    assert raw.next().type == T.SEND_RECEIPT
    client = official_client(broker)
    try:
        consumer = client.subscribe(topic, "dlq-sub")
        assert consumer.receive(timeout_millis=5000).data() == b"kept"
    finally:
        client.close()


def test_initial_subscription_refused_without_auto_creation(
    connect: Callable[[int], RawConnection], tmp_path: Path, topic: str
) -> None:
    with EmbeddedBroker(tmp_path / "data", allowAutoSubscriptionCreation=False) as broker:
        raw = connect(broker.broker_port)
        raw.handshake()
        raw.send(_producer_command(topic, "dlq-sub"))
        reply = raw.next()
        assert reply.type == T.ERROR
        assert "allowAutoSubscriptionCreation" in reply.error.message


def test_ack_response_and_consumer_stats(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str
) -> None:
    raw = connect(broker.broker_port)
    raw.handshake()
    _producer(raw, topic)
    raw.send(_send_frame(1, 0, b"one"))
    assert raw.next().type == T.SEND_RECEIPT
    cmd = T(type=T.SUBSCRIBE)
    sub = cmd.subscribe
    sub.topic = topic
    sub.subscription = "s"
    sub.subType = pb.CommandSubscribe.Exclusive
    sub.consumer_id = 5
    sub.request_id = 2
    sub.consumer_name = "raw-consumer"
    sub.initialPosition = pb.CommandSubscribe.Earliest
    raw.send(encode_command(cmd))
    assert raw.next().type == T.SUCCESS
    flow = T(type=T.FLOW)
    flow.flow.consumer_id = 5
    flow.flow.messagePermits = 10
    raw.send(encode_command(flow))
    message = raw.next()
    assert message.type == T.MESSAGE
    stats = T(type=T.CONSUMER_STATS)
    stats.consumer_stats.request_id = 3
    stats.consumer_stats.consumer_id = 5
    raw.send(encode_command(stats))
    reply = raw.next()
    assert reply.type == T.CONSUMER_STATS_RESPONSE
    assert reply.consumer_stats_response.consumerName == "raw-consumer"
    assert reply.consumer_stats_response.unackedMessages == 1
    assert reply.consumer_stats_response.availablePermits == 9
    ack = T(type=T.ACK)
    ack.ack.consumer_id = 5
    ack.ack.ack_type = pb.CommandAck.Individual
    ack.ack.message_id.add().CopyFrom(message.message.message_id)
    ack.ack.request_id = 4
    raw.send(encode_command(ack))
    reply = raw.next()
    assert reply.type == T.ACK_RESPONSE
    assert reply.ack_response.request_id == 4
    assert not reply.ack_response.HasField("error")


def test_a_partition_key_that_is_not_utf8_is_stored_and_dispatched(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str
) -> None:
    """MessageMetadata.partition_key is a proto2 string, which the Java broker reads leniently
    (bad bytes become U+FFFD): such a message is stored and dispatched, also by key."""
    client = official_client(broker)
    try:
        consumer = client.subscribe(
            topic, "by-key", consumer_type=pulsar.ConsumerType.KeyShared, initial_position=EARLIEST
        )
        raw = connect(broker.broker_port)
        raw.handshake()
        _producer(raw, topic)
        meta = pb.MessageMetadata(producer_name="raw", sequence_id=0, publish_time=1)
        raw_meta = meta.SerializeToString() + b"\x32\x02\xff\xfe"  # partition_key
        entry = len(raw_meta).to_bytes(4, "big") + raw_meta + b"odd key"
        raw.send(commands.send_frame_header(1, 0, len(entry)) + entry)
        reply = raw.next()
        assert reply.type == T.SEND_RECEIPT, reply
        raw.send(_send_frame(1, 1, b"after"))
        assert raw.next().type == T.SEND_RECEIPT  # the connection goes on
        got = [consumer.receive(timeout_millis=5000).data() for _ in range(2)]
        assert sorted(got) == [b"after", b"odd key"]
    finally:
        client.close()


def test_peeked_properties_never_break_the_reply_or_add_headers(
    connect: Callable[[int], RawConnection], broker: EmbeddedBroker, topic: str
) -> None:
    """A property is any string the client sent: one with a line break or bytes that are not
    UTF-8 is served by the admin peek as its header (line breaks as spaces, as Jetty writes
    them; bad bytes as U+FFFD), never as a header of its own, never a dropped reply."""
    client = official_client(broker)
    try:
        client.subscribe(topic, "peek", initial_position=EARLIEST)
        client.create_producer(topic).send(b"crlf", properties={"p": "a\r\nX-Injected: yes"})
        raw = connect(broker.broker_port)
        raw.handshake()
        _producer(raw, topic)
        meta = pb.MessageMetadata(producer_name="raw", sequence_id=0, publish_time=1)
        prop = b"\x0a\x01k\x12\x02\xff\xfe"  # KeyValue{key: "k", value: bytes not UTF-8}
        raw_meta = meta.SerializeToString() + b"\x22" + bytes([len(prop)]) + prop
        entry = len(raw_meta).to_bytes(4, "big") + raw_meta + b"odd value"
        raw.send(commands.send_frame_header(1, 0, len(entry)) + entry)
        assert raw.next().type == T.SEND_RECEIPT
    finally:
        client.close()
    path = topic.replace("persistent://", "/admin/v2/persistent/")
    replies = []
    for position in (1, 2):
        url = f"{broker.web_service_url}{path}/subscription/peek/position/{position}"
        with urllib.request.urlopen(url, timeout=10) as resp:
            replies.append((resp.read(), resp.headers))
    (crlf, first), (odd, second) = replies
    assert crlf == b"crlf" and first["X-Pulsar-PROPERTY-p"] == "a  X-Injected: yes"
    assert "X-Injected" not in first
    utf8_as_latin1 = "\ufffd\ufffd".encode().decode("latin-1")  # how http.client reads it
    assert odd == b"odd value" and second["X-Pulsar-PROPERTY-k"] == utf8_as_latin1
    _still_serving(broker, topic)
