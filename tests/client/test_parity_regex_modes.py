"""Regex subscriptions choose persistent and non-persistent topics by
``regex_subscription_mode`` alone, as the official client does: the pattern is matched against
names without their scheme, and a scheme written in the pattern does not narrow the domain."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
from polling import wait_for

from starquake.broker.embedded import EmbeddedBroker

CASES = [
    ("", "AllTopics", ["np", "p"]),
    ("", "NonPersistentOnly", ["np"]),
    ("", "PersistentOnly", ["p"]),
    ("persistent://", "AllTopics", ["np", "p"]),
    ("persistent://", "NonPersistentOnly", ["np"]),
    ("non-persistent://", "PersistentOnly", ["p"]),
]


@pytest.mark.parametrize(("scheme", "mode", "expected"), CASES)
def test_the_mode_chooses_the_domains(
    client: Any, mod: Any, broker: EmbeddedBroker, scheme: str, mode: str, expected: list[str]
) -> None:
    tag = uuid.uuid4().hex[:8]
    non_persistent = client.create_producer(f"non-persistent://public/default/rx-{tag}-np")
    persistent = client.create_producer(f"persistent://public/default/rx-{tag}-p")
    consumer = client.subscribe(
        re.compile(f"{scheme}public/default/rx-{tag}-.*"),
        "sub",
        regex_subscription_mode=getattr(mod.RegexSubscriptionMode, mode),
        initial_position=mod.InitialPosition.Earliest,
    )
    if "np" in expected:  # a non-persistent message reaches only consumers already attached
        np_name = f"non-persistent://public/default/rx-{tag}-np"

        async def attached() -> bool:
            loaded = broker.service.nonpersistent_topics.get(np_name)
            return loaded is not None and "sub" in loaded.subscriptions

        wait_for(lambda: broker.call(attached()), "the consumer on the non-persistent topic")
    non_persistent.send(b"np")
    persistent.send(b"p")
    got = []
    while True:
        try:
            msg = consumer.receive(700)
        except mod.Timeout:
            break
        got.append(msg.data().decode())
        consumer.acknowledge(msg)
    assert sorted(got) == expected
    consumer.close()
