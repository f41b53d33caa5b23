"""Producer access modes through the official client."""

from __future__ import annotations

import threading

import pulsar
import pytest

Mode = pulsar.ProducerAccessMode


def test_exclusive_refuses_second_producer(client: pulsar.Client, topic: str) -> None:
    first = client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic, access_mode=Mode.Exclusive)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic)
    first.send(b"still works")
    first.close()
    client.create_producer(topic, access_mode=Mode.Exclusive).close()


def test_exclusive_refused_while_shared_producers_exist(client: pulsar.Client, topic: str) -> None:
    client.create_producer(topic)
    with pytest.raises(pulsar.PulsarException):
        client.create_producer(topic, access_mode=Mode.Exclusive)


def test_exclusive_with_fencing_fences_the_old_producer(client: pulsar.Client, topic: str) -> None:
    old = client.create_producer(topic, access_mode=Mode.Exclusive, producer_name="old")
    old.send(b"before")
    new = client.create_producer(topic, access_mode=Mode.ExclusiveWithFencing)
    new.send(b"from new")
    with pytest.raises(pulsar.PulsarException):
        old.send(b"after fencing")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    got = []
    while reader.has_message_available():
        got.append(reader.read_next(5000).data())
    assert got == [b"before", b"from new"]


def test_wait_for_exclusive_becomes_ready_when_the_holder_leaves(
    client: pulsar.Client, topic: str
) -> None:
    holder = client.create_producer(topic, access_mode=Mode.Exclusive)
    result: dict[str, pulsar.Producer] = {}

    def wait() -> None:
        result["p"] = client.create_producer(topic, access_mode=Mode.WaitForExclusive)

    thread = threading.Thread(target=wait)
    thread.start()
    # Whenever the waiting request reaches the broker, the holder keeps the topic: its send
    # still succeeds (it would be fenced otherwise) and the waiter is not ready before it leaves.
    holder.send(b"leader 1")
    assert "p" not in result
    holder.close()
    thread.join(10)
    assert "p" in result
    result["p"].send(b"leader 2")
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    assert [reader.read_next(5000).data() for _ in range(2)] == [b"leader 1", b"leader 2"]
