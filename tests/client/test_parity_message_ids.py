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
