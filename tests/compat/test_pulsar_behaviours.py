"""Behaviours where the official client expects exactly what Pulsar does."""

from __future__ import annotations

import socket
from pathlib import Path

import pulsar
import pytest

from starquake.broker.embedded import EmbeddedBroker
from starquake.protocol import commands
from starquake.protocol._generated import starquake_wire_pb2 as pb
from starquake.protocol.framing import FrameDecoder, encode_command

Mode = pulsar.ProducerAccessMode
T = pb.BaseCommand


@pytest.mark.parametrize("round_", range(3))
def test_reader_seek_by_timestamp_delivers_from_that_time(
    client: pulsar.Client, topic: str, round_: int
) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    for i in range(30):
        producer.send(f"m{i}".encode())
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    messages = [reader.read_next(5000) for _ in range(30)]
    target = messages[20].publish_timestamp()
    first = next(m for m in messages if m.publish_timestamp() >= target)
    reader.seek(target)
    assert reader.read_next(5000).data() == first.data()
    # and the reader goes on from there
    index = int(first.data()[1:])
    assert reader.read_next(5000).data() == f"m{index + 1}".encode()


def test_reader_seek_by_message_id_still_works(client: pulsar.Client, topic: str) -> None:
    producer = client.create_producer(topic, batching_enabled=False)
    ids = [producer.send(f"m{i}".encode()) for i in range(10)]
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    for _ in range(10):
        reader.read_next(5000)
    reader.seek(ids[4])
    assert reader.read_next(5000).data() == b"m5"


def test_second_exclusive_producer_is_fenced(client: pulsar.Client, topic: str) -> None:
    holder = client.create_producer(topic, access_mode=Mode.Exclusive, producer_name="holder")
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.ProducerBusy):
        client.create_producer(topic)  # a Shared producer is busy, not fenced
    holder.send(b"still the writer")


def test_exclusive_producer_is_fenced_by_shared_producers(
    client: pulsar.Client, topic: str
) -> None:
    client.create_producer(topic)
    with pytest.raises(pulsar.ProducerFenced):
        client.create_producer(topic, access_mode=Mode.Exclusive)


def test_unknown_listener_name_fails_the_lookup(broker: EmbeddedBroker, topic: str) -> None:
    client = pulsar.Client(
        broker.service_url,
        listener_name="nowhere",
        operation_timeout_seconds=3,
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
    )
    try:
        with pytest.raises(pulsar.PulsarException):  # it retries the lookup until its timeout
            client.create_producer(topic)
    finally:
        client.close()
    # what the broker answers
    lookup = T(type=T.LOOKUP)
    lookup.lookup_topic.topic = topic
    lookup.lookup_topic.request_id = 5
    lookup.lookup_topic.advertised_listener_name = "nowhere"
    with socket.create_connection(("127.0.0.1", broker.broker_port), timeout=5) as sock:
        decoder = FrameDecoder()
        sock.sendall(commands.connect("listener-test") + encode_command(lookup))
        replies: list[pb.BaseCommand] = []
        while not any(r.type == T.LOOKUP_RESPONSE for r in replies):
            data = sock.recv(65536)
            assert data
            replies.extend(frame.command for frame in decoder.feed(data))
    response = next(r.lookup_topic_response for r in replies if r.type == T.LOOKUP_RESPONSE)
    assert response.response == pb.CommandLookupTopicResponse.Failed
    assert response.error == pb.ServiceNotReady  # Pulsar's answer: the client retries
    assert "listener named 'nowhere'" in response.message


def test_advertised_listener_name_is_served(tmp_path: Path, topic: str) -> None:
    with EmbeddedBroker(tmp_path / "data", advertisedListeners="internal:") as broker:
        client = pulsar.Client(
            broker.service_url,
            listener_name="internal",
            operation_timeout_seconds=10,
            logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error),
        )
        try:
            client.create_producer(topic).send(b"via a named listener")
        finally:
            client.close()
