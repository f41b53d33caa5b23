"""Idle time of a topic counts from when its last producer or reader left, as in Pulsar.

A streaming sink topic between two micro-batches, as the broker's inactive-topic check sees it.

The sink's producers live as long as one Spark task, so between two micro-batches the sink topic
has no producer for a moment. A sink topic usually has no subscription of its own, so with
Pulsar's default ``brokerDeleteInactiveTopicsMode`` (``delete_when_no_subscriptions``) only that
idle time decides whether the periodic check deletes it. Pulsar counts the idle time from when
the last producer left; counted instead from the last check that found the topic in use (as
this broker once did), the topic is deleted at the first check that lands between two tasks,
taking with it the messages of the micro-batches already committed and the deduplication state
a restarted query relies on.

The check is run here at chosen (simulated) times, so the interleaving is exact.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pulsar
from official_client import official_client

from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.inactive_topics import delete_inactive_topics

MAX_INACTIVE_S = 60
SETTINGS = {
    # the periodic check never comes by itself during the test: the test runs it
    "brokerDeleteInactiveTopicsFrequencySeconds": 86_400,
    "brokerDeleteInactiveTopicsMaxInactiveDurationSeconds": MAX_INACTIVE_S,
}


def _check(broker: EmbeddedBroker, now: float) -> int:
    """One inactive-topic check at (monotonic) time ``now``; how many topics it deleted."""
    return broker.call(delete_inactive_topics(broker.service, now))


def _values(client: pulsar.Client, topic: str) -> list[bytes]:
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    try:
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(5000).data())
        return out
    finally:
        reader.close()


def test_sink_topic_idle_between_two_micro_batches_is_not_deleted(tmp_path: Path) -> None:
    sink = f"persistent://public/default/sink-{uuid.uuid4().hex[:10]}"
    with EmbeddedBroker(tmp_path / "data", **SETTINGS) as broker:
        client = official_client(broker)
        try:
            # micro-batch 0's task writes while the broker checks the topic: in use (the
            # check is dated two minutes back: the query has been running for a while)
            task = client.create_producer(sink, producer_name="spark-query-0")
            task.send(b"micro-batch 0")
            assert _check(broker, time.monotonic() - 2 * MAX_INACTIVE_S) == 0
            task.close()  # the task is done; micro-batch 1 is being planned
            # the next check lands a second later, before micro-batch 1's task attaches
            assert _check(broker, time.monotonic() + 1) == 0, "the sink topic was deleted"
            assert _values(client, sink) == [b"micro-batch 0"]
            # idle for longer than the limit, it goes (the check does delete idle topics)
            assert _check(broker, time.monotonic() + MAX_INACTIVE_S + 1) == 1
        finally:
            client.close()


def test_topic_read_then_left_counts_idle_from_the_readers_departure(tmp_path: Path) -> None:
    topic = f"persistent://public/default/read-{uuid.uuid4().hex[:10]}"
    with EmbeddedBroker(tmp_path / "data", **SETTINGS) as broker:
        client = official_client(broker)
        try:
            producer = client.create_producer(topic)
            producer.send(b"x")
            producer.close()
            assert _check(broker, time.monotonic() + 1) == 0  # it has just left
            reader = client.create_reader(topic, pulsar.MessageId.earliest)
            assert _check(broker, time.monotonic() - 2 * MAX_INACTIVE_S) == 0  # in use
            assert reader.read_next(5000).data() == b"x"
            reader.close()
            assert _check(broker, time.monotonic() + 1) == 0, "deleted right after the reader left"
            assert _values(client, topic) == [b"x"]
            assert _check(broker, time.monotonic() + MAX_INACTIVE_S + 1) == 1
        finally:
            client.close()
