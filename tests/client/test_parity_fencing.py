"""A producer fenced by an ``ExclusiveWithFencing`` producer fails its sends at once with
``ProducerFenced`` (not after the send timeout), with both clients."""

from __future__ import annotations

import time
from typing import Any

import pytest


def test_fenced_producer_fails_at_once(client: Any, mod: Any, topic_factory: Any) -> None:
    topic = topic_factory("fenced")
    old = client.create_producer(
        topic, access_mode=mod.ProducerAccessMode.Exclusive, send_timeout_millis=20000
    )
    old.send(b"before")
    new = client.create_producer(topic, access_mode=mod.ProducerAccessMode.ExclusiveWithFencing)
    started = time.monotonic()
    with pytest.raises(mod.ProducerFenced):
        old.send(b"after")
    with pytest.raises(mod.ProducerFenced):  # and every later send
        old.send(b"again")
    # far below the 20 s send timeout: the producer learnt it was fenced from the broker
    assert time.monotonic() - started < 10
    new.send(b"from the new one")
    reader = client.create_reader(topic, mod.MessageId.earliest)
    got = [reader.read_next(5000).data() for _ in range(2)]
    assert got == [b"before", b"from the new one"]
    assert not reader.has_message_available()
    reader.close()
    new.close()
    with pytest.raises(mod.AlreadyClosed):  # the broker dropped it when it was fenced
        old.close()
