"""The official ``pulsar-client`` connected to a test broker, the way every test configures it."""

from __future__ import annotations

import pulsar

from starquake.broker.embedded import EmbeddedBroker


def official_client(
    broker: EmbeddedBroker, level: pulsar.LoggerLevel = pulsar.LoggerLevel.Error
) -> pulsar.Client:
    """A client with a 10 s operation timeout that logs only at ``level`` and above."""
    return pulsar.Client(
        broker.service_url,
        operation_timeout_seconds=10,
        logger=pulsar.ConsoleLogger(level),
    )


def drain(consumer: pulsar.Consumer, timeout_ms: int = 1500) -> list[bytes]:
    """Receive and acknowledge until nothing arrives for ``timeout_ms``; the payloads."""
    out = []
    while True:
        try:
            msg = consumer.receive(timeout_millis=timeout_ms)
        except pulsar.Timeout:
            return out
        out.append(msg.data())
        consumer.acknowledge(msg)
