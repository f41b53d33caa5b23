"""The ``starquake_broker`` fixture users get from the installed pytest plugin."""

from __future__ import annotations

import pulsar

from starquake.broker.embedded import EmbeddedBroker


def test_fixture_gives_a_running_broker(starquake_broker: EmbeddedBroker) -> None:
    client = pulsar.Client(starquake_broker.service_url)
    try:
        producer = client.create_producer("plugin-topic")
        consumer = client.subscribe(
            "plugin-topic", "s", initial_position=pulsar.InitialPosition.Earliest
        )
        producer.send(b"from the fixture")
        assert consumer.receive(timeout_millis=5000).data() == b"from the fixture"
    finally:
        client.close()
