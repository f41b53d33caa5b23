"""Random walks of Failover consumers joining, leaving, receiving and acknowledging (some
acknowledgments held back and given late, during the broker's wait after a change of the active
consumer) on one and on two partitions: every message published is acknowledged in the end,
and nothing arrives that was not published. Seeded, so a failure replays."""

from __future__ import annotations

import random
from pathlib import Path

import pulsar
import pytest

from starquake.broker.embedded import EmbeddedBroker

NAMES = ("a", "b", "c")


def _walk(broker: EmbeddedBroker, topic: str, rng: random.Random, steps: int) -> None:
    client = pulsar.Client(broker.service_url, operation_timeout_seconds=10)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        published: set[bytes] = set()
        acked: set[bytes] = set()
        held: dict[str, list[pulsar.Message]] = {}
        consumers: dict[str, pulsar.Consumer] = {}

        def subscribe(name: str) -> None:
            consumers[name] = client.subscribe(
                topic,
                "walk",
                consumer_type=pulsar.ConsumerType.Failover,
                consumer_name=name,
                initial_position=pulsar.InitialPosition.Earliest,
            )
            held[name] = []

        def take(name: str, count: int, hold: bool, timeout_ms: int) -> int:
            got = 0
            for _ in range(count):
                try:
                    msg = consumers[name].receive(timeout_millis=timeout_ms)
                except pulsar.Timeout:
                    break
                assert msg.data() in published, msg.data()
                got += 1
                if hold:
                    held[name].append(msg)
                else:
                    consumers[name].acknowledge(msg)
                    acked.add(msg.data())
            return got

        subscribe(rng.choice(NAMES))
        for step in range(steps):
            op = rng.choice(("publish", "publish", "join", "leave", "take", "hold", "release"))
            name = rng.choice(sorted(consumers)) if consumers else None
            if op == "publish":
                for i in range(rng.randint(1, 8)):
                    data = f"{step}-{i}".encode()
                    producer.send(data)
                    published.add(data)
            elif op == "join":
                free = [n for n in NAMES if n not in consumers]
                if free:
                    subscribe(rng.choice(free))
            elif op == "leave" and name is not None and len(consumers) > 1:
                consumers.pop(name).close()  # what it held comes again to another
                held.pop(name)
            elif op in ("take", "hold") and name is not None:
                take(name, rng.randint(1, 6), op == "hold", 50)
            elif op == "release" and name is not None:
                for msg in held[name]:
                    consumers[name].acknowledge(msg)
                    acked.add(msg.data())
                held[name] = []
        for name, msgs in held.items():
            for msg in msgs:
                consumers[name].acknowledge(msg)
                acked.add(msg.data())
        # drain: until every consumer was quiet for 2 s (the wait after a change is 0.2 s)
        quiet = 0
        while quiet < 2 and acked != published:
            got = sum(take(name, 50, False, 500) for name in sorted(consumers))
            quiet = 0 if got else quiet + 1
        assert acked == published, sorted(published - acked)[:10]
    finally:
        client.close()


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_a_failover_walk_loses_nothing(tmp_path: Path, topic: str, seed: int) -> None:
    rng = random.Random(seed)
    with EmbeddedBroker(tmp_path / "data", activeConsumerFailoverDelayTimeMillis=200) as broker:
        if seed % 2 == 0:
            broker.create_partitioned_topic(topic, 2)
        _walk(broker, topic, rng, steps=40)
