"""Consumer priority on a Shared subscription, as Pulsar dispatches: entries go round-robin to
the consumers of the highest priority (the lowest ``priority_level``) that have permits; a
consumer of a lower priority gets entries only while none of a higher one can take them.

Consumers speak the protocol by hand (the official Python client cannot set a priority level;
the Java and C++ clients can): both FLOWs travel in one write, so one dispatch pass sees both
consumers' permits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from raw_connection import RawConnection, T
from txn_raw import connected

from starquake.broker.embedded import EmbeddedBroker
from starquake.client import Client
from starquake.protocol import client_commands
from starquake.protocol.enums import SubType
from starquake.protocol.framing import encode_command

MESSAGES = 10


def _produce(broker: EmbeddedBroker, topic: str) -> None:
    client = Client(broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(MESSAGES):
            producer.send(f"m{i}".encode())
        producer.close()
    finally:
        client.close()


def _deliveries(cnx: RawConnection, flows: dict[int, int]) -> dict[int, list[int]]:
    """Send the FLOWs (consumer id -> permits) in one write; the entry ids each consumer got."""
    cnx.send(b"".join(encode_command(client_commands.flow(c, n)) for c, n in flows.items()))
    got: dict[int, list[int]] = {c: [] for c in flows}
    for frame in cnx.settled():
        if frame.type == T.MESSAGE:
            got[frame.message.consumer_id].append(frame.message.message_id.entryId)
    return got


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        # consumer 2 has the higher priority: its 3 permits first, the rest to consumer 1
        ((1, 0), {1: [3, 4, 5, 6, 7, 8, 9], 2: [0, 1, 2]}),
        # one level: round-robin while both have permits
        ((0, 0), {1: [0, 2, 4, 6, 7, 8, 9], 2: [1, 3, 5]}),
        # levels far apart, the lower number first all the same
        ((0, 5), {1: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], 2: []}),
    ],
)
def test_entries_go_to_the_highest_priority_with_permits(
    tmp_path: Path, topic: str, levels: tuple[int, int], expected: dict[int, list[int]]
) -> None:
    with EmbeddedBroker(tmp_path / "data") as broker:
        _produce(broker, topic)
        with connected(broker.broker_port) as cnx:
            cnx.subscribe(topic, "shared", SubType.Shared, 1, levels[0])
            cnx.subscribe(topic, "shared", SubType.Shared, 2, levels[1])
            assert _deliveries(cnx, {1: 100, 2: 3}) == expected


def test_a_lower_priority_takes_over_when_the_higher_has_no_permits_and_back(
    tmp_path: Path, topic: str
) -> None:
    with EmbeddedBroker(tmp_path / "data") as broker:
        _produce(broker, topic)
        with connected(broker.broker_port) as cnx:
            cnx.subscribe(topic, "shared", SubType.Shared, 1, 0)
            cnx.subscribe(topic, "shared", SubType.Shared, 2, 1)
            # the high-priority consumer can take 2, the low one gets what is left of 4 more
            assert _deliveries(cnx, {1: 2, 2: 4}) == {1: [0, 1], 2: [2, 3, 4, 5]}
            # once the high one has permits again, it comes first
            assert _deliveries(cnx, {2: 10, 1: 3}) == {1: [6, 7, 8], 2: [9]}


def test_non_persistent_topics_choose_the_same_way(tmp_path: Path) -> None:
    # nothing is stored: each message goes to a consumer as it is published
    topic = "non-persistent://public/default/shared-priority"
    with EmbeddedBroker(tmp_path / "data") as broker, connected(broker.broker_port) as cnx:
        cnx.subscribe(topic, "shared", SubType.Shared, 1, 1)
        cnx.subscribe(topic, "shared", SubType.Shared, 2, 0)
        cnx.send(
            encode_command(client_commands.flow(1, 100))
            + encode_command(client_commands.flow(2, 3))
        )
        _produce(broker, topic)
        order = []
        while len(order) < MESSAGES:
            frame = cnx.next()
            if frame.type == T.MESSAGE:
                order.append(frame.message.consumer_id)
    assert order == [2, 2, 2, 1, 1, 1, 1, 1, 1, 1]
