"""``MessageId.wrap``: the official client wraps the ids of its C extension; ours takes any id
that serializes (its own, or the official client's), so ids pass between the two clients."""

from __future__ import annotations

from typing import Any

import pulsar
import pytest

import starquake.client as sq


def _send_and_receive(client: Any, mod: Any, topic: str) -> Any:
    consumer = client.subscribe(topic, "sub", initial_position=mod.InitialPosition.Earliest)
    producer = client.create_producer(topic, block_if_queue_full=True)
    producer.send(b"one")
    msg = consumer.receive(5000)
    consumer.acknowledge(msg)
    producer.close()
    consumer.close()
    return msg.message_id()


def test_wrap_gives_the_same_id_with_both_clients(
    client: Any, mod: Any, topic_factory: Any
) -> None:
    received = _send_and_receive(client, mod, topic_factory("wrap"))
    # message_id() of the official client is its extension's id, which wrap makes a MessageId
    wrapped = mod.MessageId.wrap(received)
    assert isinstance(wrapped, mod.MessageId)
    assert (wrapped.ledger_id(), wrapped.entry_id()) == (
        received.ledger_id(),
        received.entry_id(),
    )
    assert wrapped.serialize() == received.serialize()


def test_our_wrap_takes_the_official_clients_ids(official: Any, topic_factory: Any) -> None:
    received = _send_and_receive(official, pulsar, topic_factory("wrap-interop"))
    wrapped = sq.MessageId.wrap(received)
    assert (wrapped.ledger_id(), wrapped.entry_id(), wrapped.partition()) == (
        received.ledger_id(),
        received.entry_id(),
        received.partition(),
    )


def test_our_wrap_refuses_what_is_not_an_id() -> None:
    with pytest.raises(TypeError):
        sq.MessageId.wrap(5)


def test_multi_topic_ack_of_an_id_without_topic_is_not_supported(
    client: Any, mod: Any, topic_factory: Any
) -> None:
    """The ids a send returns name no topic: a consumer of several topics cannot route them."""
    topics = [topic_factory("multi-a"), topic_factory("multi-b")]
    consumer = client.subscribe(topics, "sub", initial_position=mod.InitialPosition.Earliest)
    producer = client.create_producer(topics[0])
    sent = producer.send(b"x")
    received = consumer.receive(5000)
    with pytest.raises(mod.OperationNotSupported):
        consumer.acknowledge(sent)
    with pytest.raises(mod.OperationNotSupported):
        consumer.acknowledge(mod.MessageId.earliest)
    consumer.acknowledge(received.message_id())  # a received id knows its topic
    consumer.acknowledge(received)
    producer.close()
    consumer.close()
